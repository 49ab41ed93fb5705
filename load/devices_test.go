package load

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
)

// TestLoadDevices places a checkpoint on three host engines, each loading
// a part and copying the others' from them, and each loading everything
// itself; every device's arena matches the source.
func TestDevices(t *testing.T) {
	c, src := llama(t)
	for _, raw := range []bool{false, true} {
		for _, peer := range []bool{true, false} {
			engs := []engine.Engine{hostengine.New(2), hostengine.New(2), hostengine.New(2)}
			rep, err := Devices(context.Background(), engs, c, src, Options{Raw: raw, Check: true}, peer)
			if err != nil {
				t.Fatalf("raw %v, peer %v: %v", raw, peer, err)
			}
			if !rep.Checked || len(rep.Parts) != 3 || rep.Wall <= 0 || rep.GBps <= 0 {
				t.Fatalf("raw %v, peer %v: report %+v", raw, peer, rep)
			}
			var loaded uint64
			tensors := 0
			for _, p := range rep.Parts {
				loaded += p.RawBytes
				tensors += p.Tensors
			}
			if peer {
				// Each tensor loaded once, on one device; the others copied
				// each part (the arena's alignment gaps between tensors too).
				if loaded != rep.RawBytes || tensors != rep.Tensors {
					t.Errorf("parts loaded %d bytes, %d tensors, of %d, %d", loaded, tensors, rep.RawBytes, rep.Tensors)
				}
				if rep.PeerBytes < 2*rep.RawBytes || rep.PeerBytes > 2*rep.RawBytes+uint64(2*rep.Tensors*256) {
					t.Errorf("peer copies moved %d bytes for 2 x %d", rep.PeerBytes, rep.RawBytes)
				}
			} else if loaded != 3*rep.RawBytes || rep.PeerBytes != 0 {
				t.Errorf("without peer copies: loaded %d bytes (want 3 x %d), peer %d", loaded, rep.RawBytes, rep.PeerBytes)
			}
			for d, e := range engs {
				if n := e.(*hostengine.Engine).PinnedBytes(); n != 0 {
					t.Errorf("device %d: %d pinned bytes leaked", d, n)
				}
				e.Close()
			}
		}
	}
}

// TestLoadDevicesFailure: a device whose copies fail ends the load with an
// error naming it, and the other devices stop instead of waiting.
func TestLoadDevicesFailure(t *testing.T) {
	c, src := llama(t)
	var calls atomic.Int64
	bad := hostengine.New(2, hostengine.WithHooks(hostengine.Hooks{Copy: func(engine.DevPtr, int) error {
		if calls.Add(1) > 3 {
			return engine.ErrInjected
		}
		return nil
	}}))
	engs := []engine.Engine{hostengine.New(2), bad, hostengine.New(2)}
	defer func() {
		for _, e := range engs {
			e.Close()
		}
	}()
	for _, peer := range []bool{true, false} {
		calls.Store(0)
		_, err := Devices(context.Background(), engs, c, src, Options{}, peer)
		if !errors.Is(err, engine.ErrInjected) || !strings.Contains(err.Error(), "device 1") {
			t.Errorf("peer %v: %v", peer, err)
		}
	}
	if _, err := Devices(context.Background(), engs, c, src, Options{Resident: true}, true); err == nil {
		t.Error("a resident load onto several devices: no error")
	}
}

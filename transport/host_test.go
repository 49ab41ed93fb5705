package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// TestEntropyPayloadsWithoutSource: a cache of entropy payloads loads
// from its source while that is there, and from its payloads, decoded on
// the host, once the source is gone, bit for bit, first loads and
// re-faults, resident or not; a corrupt payload fails its own binding
// only, which stays evicted, and a repaired one loads.
func TestEntropyPayloadsWithoutSource(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 21}, pipeline.CompressOptions{SelfContained: true, Codec: pipeline.CodecEntropy})
	load := func(what string) {
		t.Helper()
		for _, resident := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, resident %v", what, resident), func(t *testing.T) { loadAll(t, c, s, resident) })
		}
	}
	load("source present")
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	load("source absent")

	_, a, st, _ := setup(t, c, s, hostengine.Hooks{}, false)
	var victim *vmm.Binding
	for _, b := range a.Bindings() {
		if hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size); err == nil && hit.Tensor.Stored == shardcache.StoredEntropy && (victim == nil || b.Size > victim.Size) {
			victim = b
		}
	}
	if victim == nil {
		t.Fatal("no entropy payload in the fixture")
	}
	hit, _ := c.LookupSlice(victim.Shard, victim.Offset, victim.Size)
	restore := cachetest.Flip(t, c, hit.Tensor.Key, -1, 0x40)
	for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
		b := a.Bindings()[i]
		switch {
		case b == victim:
			var te *Error
			if !errors.As(err, &te) || te.Tensor != victim.Name || !errors.Is(err, codec.ErrChecksum) {
				t.Errorf("corrupt entropy payload: %v", err)
			}
		case err != nil:
			t.Errorf("%s beside a corrupt payload: %v", b.Name, err)
		}
	}
	if victim.State() != vmm.Evicted {
		t.Errorf("corrupt payload's binding is %v", victim.State())
	}
	restore()
	if err := st.FaultIn(context.Background(), []*vmm.Binding{victim})[0].Wait(); err != nil {
		t.Fatalf("after repair: %v", err)
	}
}

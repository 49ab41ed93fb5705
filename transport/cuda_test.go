package transport

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine/cudaengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// requireCUDA returns a CUDA engine on device 0, or skips with the reason.
func requireCUDA(t *testing.T) *cudaengine.Engine { return fixture.RequireCUDA(t, 2) }

// cudaStore builds an arena of src on eng and a store over a payload
// transport wrapping a raw one, closed when the test ends.
func cudaStore(t *testing.T, eng *cudaengine.Engine, c *shardcache.Cache, src *shardcache.Source) (*vmm.Arena, *Store) {
	t.Helper()
	a, _, st := stack(t, eng, c, mustSpecs(t, c, src), RawOptions{Readers: 3}, &PayloadOptions{Readers: 3})
	return a, st
}

// TestCUDAFaults checks on the GPU what TestFaults checks on the CPU
// engine for the faults that can be caused from outside: a corrupt
// payload and a truncated source.
func TestCUDAFaults(t *testing.T) {
	eng := requireCUDA(t)
	c, src := llama(t)
	a, st := cudaStore(t, eng, c, src)
	pz, rb := payloadBinding(t, c, a)
	hit, _ := c.LookupSlice(pz.Shard, pz.Offset, pz.Size)
	o, _ := c.Lookup(hit.Tensor.Key)
	restore := cachetest.Flip(t, c, hit.Tensor.Key, int64(o.Size/2), 0x08)
	err := st.FaultIn(context.Background(), []*vmm.Binding{pz})[0].Wait()
	var te *Error
	if !errors.As(err, &te) || te.Tensor != pz.Name || !errors.Is(err, codec.ErrChecksum) || pz.State() != vmm.Evicted {
		t.Fatalf("corrupt payload: %v, state %v", err, pz.State())
	}
	restore()
	for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
		if err != nil {
			t.Fatalf("%s after a failed fault: %v", a.Bindings()[i].Name, err)
		}
	}
	if err := CheckArena(eng, a.Bindings(), src); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(rb.Shard, int64(rb.Offset)); err != nil {
		t.Fatal(err)
	}
	st.Evict(rb)
	err = st.FaultIn(context.Background(), []*vmm.Binding{rb})[0].Wait()
	if !errors.As(err, &te) || te.Tensor != rb.Name || !(errors.Is(err, ErrShortRead) || errors.Is(err, shardcache.ErrSourceChanged)) {
		t.Fatalf("truncated source: %v", err)
	}
}

// TestCUDACancel: on the GPU, a batch under an ended context reads
// nothing, leaves its bindings evicted with the tensor named, and the same
// bindings fault in afterwards bit for bit.
func TestCUDACancel(t *testing.T) {
	eng := requireCUDA(t)
	c, src := llama(t)
	a, st := cudaStore(t, eng, c, src)
	ctx, end := context.WithCancel(context.Background())
	end()
	for i, err := range waitAll(st.FaultIn(ctx, a.Bindings())) {
		b := a.Bindings()[i]
		var te *Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &te) || te.Tensor != b.Name || b.State() != vmm.Evicted {
			t.Fatalf("%s under an ended context: %v, state %v", b.Name, err, b.State())
		}
	}
	for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
		if err != nil {
			t.Fatalf("%s after cancellation: %v", a.Bindings()[i].Name, err)
		}
	}
	if err := CheckArena(eng, a.Bindings(), src); err != nil {
		t.Fatal(err)
	}
}

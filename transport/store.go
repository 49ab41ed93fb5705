package transport

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/vmm"
)

// Store faults bindings in through a transport and tracks residency. A
// binding faulted by several goroutines at once is uploaded once: the
// upload in flight is recorded on the binding (vmm.Binding.Claim).
type Store struct {
	t   Transport
	eng engine.Engine
}

// batch is one FaultIn call's uploads: their bindings, and the
// transport's fences once ready is closed.
type batch struct {
	ready  chan struct{}
	todo   []*vmm.Binding
	fences []Fence
}

// flight is one binding's upload. It ends once: by the first Wait, or
// the batch's own goroutine, that sees its transport fence complete; the
// binding's state is set before done is.
type flight struct {
	up   vmm.Upload // up.Fence is the flight
	bt   *batch
	k    int
	once sync.Once
	done atomic.Bool
	err  error
}

func (f *flight) Wait() error {
	<-f.bt.ready
	f.once.Do(f.end)
	return f.err
}

func (f *flight) Done() bool { return f.done.Load() }

func (f *flight) end() {
	f.err = f.bt.fences[f.k].Wait()
	s := vmm.Resident
	if f.err != nil {
		s = vmm.Evicted
	}
	f.bt.todo[f.k].Finish(&f.up, s)
	f.done.Store(true)
}

// NewStore returns a store over t.
func NewStore(eng engine.Engine, t Transport) *Store {
	return &Store{t: t, eng: eng}
}

// FaultIn makes bs resident and returns a fence per binding. Bindings
// already resident get a completed fence; bindings being uploaded by
// another call share its fence. A failed upload leaves its binding evicted
// and its fence returns an error naming the tensor; other bindings are
// unaffected. When ctx ends, uploads not yet started are not started;
// their bindings stay evicted and their fences report ctx's error.
//
// A call allocates a few slices for its batch, not a channel, map entry
// or goroutine per binding: small tensors fault in by the hundred.
func (s *Store) FaultIn(ctx context.Context, bs []*vmm.Binding) []Fence {
	out := make([]Fence, len(bs))
	var bt *batch
	var flights []flight // the batch's, allocated once when one is needed
	for i, b := range bs {
		if bt == nil {
			bt = &batch{ready: make(chan struct{}), todo: make([]*vmm.Binding, 0, len(bs)-i)}
			flights = make([]flight, len(bs)-i)
		}
		// Set up before claim publishes it; a flight not claimed is
		// the next binding's.
		f := &flights[len(bt.todo)]
		f.up.Fence, f.bt, f.k = f, bt, len(bt.todo)
		if fence := claim(b, f); fence != nil {
			out[i] = fence
			continue
		}
		out[i] = f
		bt.todo = append(bt.todo, b)
	}
	if bt == nil || len(bt.todo) == 0 {
		return out
	}
	flights = flights[:len(bt.todo)]
	bt.fences = s.t.UploadBatch(ctx, bt.todo)
	close(bt.ready)
	// Every flight ends even when nobody waits for it, so that its
	// binding's state is set.
	go func() {
		for k := range flights {
			flights[k].Wait()
		}
	}()
	return out
}

// claim records f as b's upload and returns nil, or returns the fence to
// wait for instead: done for a resident binding, another call's upload
// for a loading one.
func claim(b *vmm.Binding, f *flight) Fence {
	for {
		if b.Claim(&f.up) {
			return nil
		}
		if u := b.Upload(); u != nil {
			return u.Fence
		}
		if b.State() == vmm.Resident {
			return doneFence{}
		}
		// Loading, its upload not yet recorded or just finished:
		// the other call is between two atomic steps.
		runtime.Gosched()
	}
}

// Evict marks bindings evicted; the next FaultIn uploads them again.
func (s *Store) Evict(bs ...*vmm.Binding) {
	for _, b := range bs {
		b.CompareAndSet(vmm.Resident, vmm.Evicted)
	}
}

// WaitForCompute makes later work on the engine's stream wait for f
// without blocking the host, when f is an engine event; other fences are
// waited for on the host.
func (s *Store) WaitForCompute(f Fence, stream int) error {
	switch f.(type) {
	case *flight, allFence, *wrapFence, errFence, doneFence:
		return f.Wait()
	}
	return s.eng.WaitEvent(stream, f)
}

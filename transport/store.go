package transport

import (
	"context"
	"sync"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/vmm"
)

// Store faults bindings in through a transport and tracks residency. A
// binding faulted by several goroutines at once is uploaded once.
type Store struct {
	t        Transport
	eng      engine.Engine
	mu       sync.Mutex
	inflight map[*vmm.Binding]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

func (f *flight) Wait() error { <-f.done; return f.err }

func (f *flight) Done() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// NewStore returns a store over t.
func NewStore(eng engine.Engine, t Transport) *Store {
	return &Store{t: t, eng: eng, inflight: map[*vmm.Binding]*flight{}}
}

// FaultIn makes bs resident and returns a fence per binding. Bindings
// already resident get a completed fence; bindings being uploaded by
// another call share its fence. A failed upload leaves its binding evicted
// and its fence returns an error naming the tensor; other bindings are
// unaffected. When ctx ends, uploads not yet started are not started;
// their bindings stay evicted and their fences report ctx's error.
func (s *Store) FaultIn(ctx context.Context, bs []*vmm.Binding) []Fence {
	out := make([]Fence, len(bs))
	todo := make([]*vmm.Binding, 0, len(bs))
	mine := make([]*flight, 0, len(bs))
	var flights []flight // the batch's, allocated once when one is needed
	s.mu.Lock()
	for i, b := range bs {
		if f, ok := s.inflight[b]; ok {
			out[i] = f
			continue
		}
		if b.State() == vmm.Resident {
			out[i] = doneFence{}
			continue
		}
		if flights == nil {
			flights = make([]flight, len(bs)-i)
		}
		f := &flights[len(mine)]
		f.done = make(chan struct{})
		s.inflight[b] = f
		b.SetState(vmm.Loading)
		out[i] = f
		todo = append(todo, b)
		mine = append(mine, f)
	}
	s.mu.Unlock()
	if len(todo) == 0 {
		return out
	}
	fences := s.t.UploadBatch(ctx, todo)
	go func() {
		for k, b := range todo {
			err := fences[k].Wait()
			if err != nil {
				b.SetState(vmm.Evicted)
			} else {
				b.SetState(vmm.Resident)
			}
			s.mu.Lock()
			delete(s.inflight, b)
			s.mu.Unlock()
			mine[k].err = err
			close(mine[k].done)
		}
	}()
	return out
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
	case *flight, allFence, wrapFence, errFence, doneFence:
		return f.Wait()
	}
	return s.eng.WaitEvent(stream, f)
}

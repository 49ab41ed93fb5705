package transport

import (
	"context"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/vmm"
)

// DefaultSmallBytes is the stored size at or below which a binding is
// packed with others: below it, a copy's fixed cost (a few microseconds)
// outweighs its transfer time.
const DefaultSmallBytes = 256 << 10

// packBytes is the size of one pack's pinned staging buffer.
const packBytes = 4 << 20

// smallItem is a binding to pack.
type smallItem struct {
	i      int // index of the binding in its batch
	b      *vmm.Binding
	stored uint64
	// fill writes the stored bytes into dst (stored bytes) and, for a
	// payload, returns its checked header.
	fill func(dst []byte) (*codec.Header, error)
}

// packer uploads small bindings in packs: each pack is read into one
// pinned buffer, copied with one DMA, and written to its bindings' ranges
// by one scatter pass (a single binding takes the direct path instead).
// Payloads and raw bytes share packs.
type packer struct {
	eng      engine.Engine
	workers  int
	maxSlots int           // cap on the staging ring (0: workers plus two)
	fills    chan struct{} // bounds concurrent item reads
	// streamMu serializes submissions per stream.
	streamMu []sync.Mutex

	mu     sync.Mutex
	slots  chan *slot // allocated on first use
	stats  Stats
	pinned uint64
	next   int
}

// newPacker returns a packer for workers fill goroutines whose staging
// ring holds at most slots buffers (0: workers plus two).
func newPacker(eng engine.Engine, workers, slots int) *packer {
	workers = max(workers, 1)
	return &packer{eng: eng, workers: workers, maxSlots: slots, fills: make(chan struct{}, 2*workers), streamMu: make([]sync.Mutex, eng.Streams())}
}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// ensure allocates the staging ring: one buffer per worker and two spare.
func (p *packer) ensure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots != nil {
		return nil
	}
	n := p.workers + 2
	if p.maxSlots > 0 {
		n = min(n, p.maxSlots)
	}
	slots, err := newRing(p.eng, n, packBytes)
	if err != nil {
		return err
	}
	p.slots, p.pinned = slots, uint64(n)*packBytes
	return nil
}

// upload packs items and sets their fences in out.
func (p *packer) upload(ctx context.Context, items []smallItem, out []Fence) {
	if len(items) == 0 {
		return
	}
	if err := p.ensure(); err != nil {
		for _, it := range items {
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
		}
		return
	}
	// Lay out the packs first, so that no more workers start than there
	// are packs (a layer's small tensors often make one).
	var packs [][]smallItem
	start, used := 0, uint64(0)
	for k, it := range items {
		need := align16(it.stored)
		if k > start && align16(engine.ScatterTableBytes(k-start+1))+used+need > packBytes {
			packs = append(packs, items[start:k])
			start, used = k, 0
		}
		used += need
	}
	packs = append(packs, items[start:])
	work := make(chan []smallItem)
	var wg sync.WaitGroup
	for range min(p.workers, len(packs)) {
		wg.Go(func() {
			for pack := range work {
				if err := ctx.Err(); err != nil {
					for _, it := range pack {
						out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
					}
					continue
				}
				p.send(pack, out)
			}
		})
	}
	for _, pack := range packs {
		work <- pack
	}
	close(work)
	wg.Wait()
}

// send reads one pack into a staging buffer and submits it.
func (p *packer) send(pack []smallItem, out []Fence) {
	s := <-p.slots
	defer func() { p.slots <- s }()
	if s.ev != nil {
		s.ev.Wait() // the copy that last read this buffer is done
		s.ev = nil
	}
	// Lay the pack out, then fill its items in parallel: a failed item
	// leaves a hole and is left out of the scatter.
	offs := make([]uint64, len(pack))
	off := align16(engine.ScatterTableBytes(len(pack)))
	for k, it := range pack {
		offs[k] = off
		off += align16(it.stored)
	}
	hdrs := make([]*codec.Header, len(pack))
	errs := make([]error, len(pack))
	var wg sync.WaitGroup
	for k, it := range pack {
		p.fills <- struct{}{}
		wg.Go(func() {
			defer func() { <-p.fills }()
			hdrs[k], errs[k] = it.fill(s.buf[offs[k] : offs[k]+it.stored])
		})
	}
	wg.Wait()
	its := make([]engine.ScatterItem, 0, len(pack))
	kept := make([]smallItem, 0, len(pack))
	for k, it := range pack {
		if errs[k] != nil {
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: errs[k]}}
			continue
		}
		its = append(its, engine.ScatterItem{Name: it.b.Name, Dst: uint64(it.b.Addr), Src: offs[k], Stored: it.stored, Size: it.b.Size, Header: hdrs[k]})
		kept = append(kept, it)
	}
	if len(its) == 0 {
		return
	}
	// Submissions on one stream are serialized so that an event follows
	// exactly its pack's work; packs on other streams go in parallel.
	t1 := time.Now()
	p.mu.Lock()
	stream := p.next % p.eng.Streams()
	p.next++
	p.mu.Unlock()
	p.streamMu[stream].Lock()
	err := p.submit(stream, s.buf[:off], its)
	var ev engine.Event
	if err == nil {
		ev, err = p.eng.Record(stream)
	}
	p.streamMu[stream].Unlock()
	p.mu.Lock()
	p.stats.Submit += time.Since(t1)
	if err == nil {
		p.stats.Bytes += off
	}
	p.mu.Unlock()
	for _, it := range kept {
		if err != nil {
			out[it.i] = errFence{&Error{Tensor: it.b.Name, Err: err}}
		} else {
			out[it.i] = wrapFence{ev, it.b.Name}
		}
	}
	if err == nil {
		s.ev = ev
	}
}

// submit enqueues a pack: a single raw binding or in-place payload is
// copied (and decoded) directly, anything else goes through Scatter.
func (p *packer) submit(stream int, buf []byte, its []engine.ScatterItem) error {
	if len(its) == 1 {
		it := its[0]
		src := buf[it.Src : it.Src+it.Stored]
		switch h := it.Header; {
		case h == nil:
			return p.eng.CopyHtoD(stream, engine.DevPtr(it.Dst), src)
		case h.InPlace:
			if err := p.eng.CopyHtoD(stream, engine.DevPtr(it.Dst), src); err != nil {
				return err
			}
			return p.eng.DecodeInPlace(stream, engine.DevPtr(it.Dst), h)
		}
	}
	return p.eng.Scatter(stream, buf, its)
}

// Stats returns the packer's time and bytes.
func (p *packer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// PinnedBytes returns the staging memory held.
func (p *packer) PinnedBytes() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pinned
}

// Close waits for the last copies and frees the staging ring.
func (p *packer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots == nil {
		return
	}
	freeRing(p.eng, p.slots)
	p.slots, p.pinned = nil, 0
}

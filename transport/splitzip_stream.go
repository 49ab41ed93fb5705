package transport

// Streaming payloads through the pinned staging ring: a payload of one
// piece in three driver calls, larger ones in pieces read in parallel.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// stream uploads a payload through the staging ring: its 8 MiB pieces are
// read, checksummed and copied to their places in the binding's range as
// they arrive, in parallel, all on one stream; once every piece has been
// read and the combined checksum matches the header, the decode is
// enqueued on that stream after the copies. A payload that fails its
// checksum is never decoded; its range holds garbage and its binding stays
// evicted.
func (z *SplitZip) stream(ctx context.Context, t target) (Fence, error) {
	if err := z.ensureRing(); err != nil {
		return nil, err
	}
	key := t.hit.Tensor.Key
	f, o, err := z.cache.OpenObject(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if o.Size < codec.HeaderSize {
		return nil, fmt.Errorf("%s: %w: %d bytes", f.Name(), codec.ErrCorrupt, o.Size)
	}
	z.mu.Lock()
	stream := z.next % z.eng.Streams()
	z.next++
	z.mu.Unlock()
	if o.Size <= readPiece {
		return z.streamOne(ctx, t, f, o.Size, stream)
	}
	sums := codec.NewPieceSums(o.Size, readPiece)
	n := sums.Pieces()
	errs := make([]error, n)
	evs := make([]Fence, n, n+1)
	var head [codec.HeaderSize]byte
	var wg sync.WaitGroup
	for i := range n {
		z.io <- struct{}{}
		wg.Go(func() {
			defer func() { <-z.io }()
			s := z.takeSlot()
			defer func() { z.ring <- s }()
			if err := ctx.Err(); err != nil {
				errs[i] = err
				return
			}
			off, size := sums.Span(i)
			q := s.buf[:size]
			sum, rd, vd, err := readChecked(f, q, off)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", f.Name(), err)
				return
			}
			sums.Set(i, sum)
			if i == 0 {
				copy(head[:], q)
			}
			// No lock across the device calls: an engine's streams take
			// work from several goroutines, and an event recorded after a
			// copy on its stream completes after that copy whatever else
			// was enqueued between them.
			t2 := time.Now()
			if err := z.eng.CopyHtoD(stream, t.b.Addr+vmm.Ptr(off), q); err != nil {
				errs[i] = err
				return
			}
			ev, err := z.eng.Record(stream)
			if err != nil {
				errs[i] = err
				return
			}
			s.ev, evs[i] = ev, ev
			submit := time.Since(t2)
			z.mu.Lock()
			z.stats.Read += rd
			z.stats.Verify += vd
			z.stats.Bytes += uint64(len(q))
			z.stats.Submit += submit
			z.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	h, err := codec.ParseHeader(head[:])
	if err == nil {
		err = sums.Check(&h, t.b.Size/2)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	case !h.InPlace:
		return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, key)
	}
	if err := z.eng.DecodeInPlace(stream, t.b.Addr, &h); err != nil {
		return nil, err
	}
	ev, err := z.eng.Record(stream)
	if err != nil {
		return nil, err
	}
	// A failed copy reports through its own event.
	return allFence(append(evs, ev)), nil
}

// streamOne uploads a payload of one staging piece: read and checked whole
// before anything is enqueued, then its copy, its decode and one event on
// one stream. That is three driver calls where a payload of several
// pieces takes an event per piece too; enqueues are serialized in the
// engine, so each call saved shortens every upload.
func (z *SplitZip) streamOne(ctx context.Context, t target, f *shardcache.ObjectReader, size uint64, stream int) (Fence, error) {
	z.io <- struct{}{}
	defer func() { <-z.io }()
	s := z.takeSlot()
	defer func() { z.ring <- s }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := s.buf[:size]
	sum, rd, vd, err := readChecked(f, q, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	h, err := codec.ParseHeader(q)
	if err == nil {
		err = codec.CheckPayload(&h, size, sum, t.b.Size/2)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	case !h.InPlace:
		return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, t.hit.Tensor.Key)
	}
	t0 := time.Now()
	if err := z.eng.CopyHtoD(stream, t.b.Addr, q); err != nil {
		return nil, err
	}
	if err := z.eng.DecodeInPlace(stream, t.b.Addr, &h); err != nil {
		if ev, rerr := z.eng.Record(stream); rerr == nil {
			s.ev = ev // the buffer is not reused before the copy is done
		}
		return nil, err
	}
	// A failed copy reports through this event too: it follows the copy
	// on the stream.
	ev, err := z.eng.Record(stream)
	if err != nil {
		return nil, err
	}
	s.ev = ev
	submit := time.Since(t0)
	z.mu.Lock()
	z.stats.Read += rd
	z.stats.Verify += vd
	z.stats.Bytes += size
	z.stats.Submit += submit
	z.mu.Unlock()
	return ev, nil
}

// takeSlot takes a staging piece from the ring once the copy that last
// read it is done; the caller puts it back.
func (z *SplitZip) takeSlot() *slot {
	s := <-z.ring
	if s.ev != nil {
		s.ev.Wait() // its error belongs to that copy's fence
		s.ev = nil
	}
	return s
}

package transport

// Streaming payloads of every kind through the pinned staging ring: a
// payload of one piece in one submission, larger ones in pieces read in
// parallel; resident ones from pinned memory.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// stream uploads a payload, fixed or entropy, through the staging ring:
// its pieces (8 MiB; 16 MiB from a remote cache) are read, checksummed and copied to their places in
// the binding's range as they arrive, in parallel, all on one stream;
// once every piece has been read and the payload passes its check
// (package payload: the combined checksum, and an entropy payload's
// chunk index gathered from the pieces as they pass), the in-place decode
// is enqueued on that stream after the copies. A payload that fails its
// check is never decoded; its range holds garbage and its binding stays
// evicted. An entropy payload that does not decode in place on a device
// (version 1, or without the flag) is decoded on the host (hostDecode).
func (z *Payloads) stream(ctx context.Context, t target) (Fence, error) {
	key := t.hit.Tensor.Key
	loc, o, f, err := z.openPayload(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kind := payload.KindFixed
	if t.host {
		kind = payload.KindEntropy
	}
	switch {
	case payloadKind(o) != kind:
		return nil, fmt.Errorf("%s: %w: a %s object for a tensor stored as a %v payload", loc.Name(), codec.ErrCorrupt, o.Kind, kind)
	case kind == payload.KindFixed && o.Size < codec.HeaderSize:
		return nil, fmt.Errorf("%s: %w: a %s object of %d bytes", loc.Name(), codec.ErrCorrupt, o.Kind, o.Size)
	case kind == payload.KindEntropy && o.RawSize != t.b.Size:
		return nil, fmt.Errorf("%s: a %s object of %d raw bytes, the tensor is an entropy payload of %d", loc.Name(), o.Kind, o.RawSize, t.b.Size)
	}
	// The head first where it decides the path (an entropy payload's) or
	// where the pieces need it (the chunk index of a payload of several).
	var h payload.Head
	if kind == payload.KindEntropy || o.Size > z.piece {
		hb := make([]byte, min(o.Size, payload.HeadBytes))
		if _, err := f.ReadAt(hb, 0); err != nil {
			return nil, fmt.Errorf("%s: %w", loc.Name(), err)
		}
		h, err = payload.Parse(kind, hb)
		switch {
		case kind == payload.KindEntropy && (errors.Is(err, entropy.ErrNoRecords) || err == nil && !h.InPlace()):
			return z.hostDecode(ctx, t)
		case err != nil:
			return nil, fmt.Errorf("%s: %w", loc.Name(), err)
		case !h.InPlace():
			return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, key)
		case h.DecodedSize() != t.b.Size || kind == payload.KindEntropy && h.Size() != o.Size:
			return nil, fmt.Errorf("%s: %w: a payload of %d bytes decoding to %d, the object has %d and the tensor %d",
				loc.Name(), codec.ErrSize, h.Size(), h.DecodedSize(), o.Size, t.b.Size)
		case h.Size() != o.Size: // the object the index sized is cut short or padded
			return nil, fmt.Errorf("%s: %w: header says %d bytes, the object has %d", loc.Name(), codec.ErrCorrupt, h.Size(), o.Size)
		}
	}
	stream := z.streams.pick(z.eng)
	// With the device tier, a fixed payload's bytes go to a slot of their
	// own, are kept there, and are copied within the device to the
	// binding's range to be decoded; else straight to that range.
	to, tierSlot := t.b.Addr, vmm.Ptr(0)
	if z.tier != nil && kind == payload.KindFixed {
		p, ok, err := z.tier.alloc(o.Size)
		if err != nil {
			return nil, err
		}
		if ok {
			to, tierSlot = p, p
		}
	}
	if o.Size <= z.piece {
		return z.streamOne(ctx, t, f, loc.Name(), kind, o.Size, o.Checksum, stream, to, tierSlot)
	}
	tail := payload.NewTail(h)
	evs, sums, err := z.copyPieces(ctx, f, loc.Name(), o.Size, stream, to, tail.Add)
	if err != nil {
		return nil, err
	}
	if err := payload.Check(h, o.Size, sums.Sum(), t.b.Size, tail.Bytes()); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	if err := codec.CheckRecorded(h.Checksum(), o.Checksum); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	ev, err := z.eng.Submit(stream, z.decodeWork(t, tierSlot, o.Size, h))
	if err != nil {
		return nil, err
	}
	z.keepOnDevice(key, tierSlot, h, stream, ev)
	// A failed copy reports through its own event.
	return allFence(append(evs, ev)), nil
}

// copyPieces reads a payload of size bytes from f in staging pieces, in
// parallel, checksums each and submits its copy to its place at to, all
// on one stream, and returns the copies' events and the pieces'
// checksums. saw, if set, is given each piece (from its goroutine) before
// its copy is submitted.
func (z *Payloads) copyPieces(ctx context.Context, f io.ReaderAt, name string, size uint64, stream int, to vmm.Ptr, saw func(off uint64, q []byte)) ([]Fence, *codec.PieceSums, error) {
	sums := codec.NewPieceSums(size, z.piece)
	n := sums.Pieces()
	evs := make([]Fence, n, n+1)
	err := z.eachPiece(ctx, n, func(i int, s *slot) error {
		off, size := sums.Span(i)
		q := s.buf[:size]
		sum, rd, vd, err := readChecked(f, q, off)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		sums.Set(i, sum)
		if saw != nil {
			saw(off, q)
		}
		// The pieces go on one stream, so a decode submitted after them
		// runs after them all.
		t2 := time.Now()
		ev, err := z.eng.Submit(stream, engine.Work{Dst: to + vmm.Ptr(off), Src: q})
		if err != nil {
			return err
		}
		s.ev, evs[i] = ev, ev
		submit := time.Since(t2)
		z.mu.Lock()
		z.stats.Read += rd
		z.stats.Verify += vd
		z.stats.Bytes += uint64(len(q))
		z.stats.Submit += submit
		z.mu.Unlock()
		return nil
	})
	return evs, sums, err
}

// decodeWork is the submission that decodes a payload whose bytes are in
// the binding's range, or, copied there first, in slot of the device tier.
func (z *Payloads) decodeWork(t target, slot vmm.Ptr, size uint64, h payload.Head) engine.Work {
	if slot != 0 {
		return engine.Work{Dst: t.b.Addr, From: slot, N: size, Decode: h}
	}
	return engine.Work{Dst: t.b.Addr, Decode: h}
}

// keepOnDevice records a payload uploaded into slot of the device tier
// (nothing when slot is 0).
func (z *Payloads) keepOnDevice(key shardcache.Key, slot vmm.Ptr, h payload.Head, stream int, ev engine.Event) {
	if slot != 0 {
		z.tier.keep(string(key), &devPayload{ptr: slot, h: h, stream: stream, ev: ev})
	}
}

// streamOne uploads a payload of one staging piece to to (the binding's
// range, or slot of the device tier): read and checked whole before
// anything is enqueued, then its copy, its decode and one event in one
// submission (two with the tier: the copy to the slot, then the copy
// within the device and the decode), where a payload of several pieces
// takes one per piece and one for the decode.
func (z *Payloads) streamOne(ctx context.Context, t target, f io.ReaderAt, name string, kind payload.Kind, size uint64, recorded uint32, stream int, to, slot vmm.Ptr) (Fence, error) {
	// A read token, then a slot, in that order everywhere (eachPiece):
	// a reader holding a slot while it waits for a token, beside one
	// holding a token while it waits for a slot, deadlocked loads.
	if err := z.acquire(ctx); err != nil {
		return nil, err
	}
	defer func() { <-z.io }()
	s, err := z.takeSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { z.ring <- s }()
	q := s.buf[:size]
	sum, rd, vd, err := readChecked(f, q, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h, err := payload.CheckBytes(kind, q, sum, t.b.Size)
	if err == nil {
		err = codec.CheckRecorded(h.Checksum(), recorded)
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	case !h.InPlace() && kind == payload.KindEntropy: // its head, read first, said otherwise
		return nil, fmt.Errorf("%s: %w: the payload changed while read", name, entropy.ErrPayload)
	case !h.InPlace():
		return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, t.hit.Tensor.Key)
	}
	t0 := time.Now()
	var ev engine.Event
	if slot == 0 {
		ev, err = z.eng.Submit(stream, engine.Work{Dst: to, Src: q, Decode: h})
	} else if ev, err = z.eng.Submit(stream, engine.Work{Dst: to, Src: q}); err == nil {
		s.ev = ev // the copy from the staging piece
		ev, err = z.eng.Submit(stream, z.decodeWork(t, slot, size, h))
	}
	if err != nil {
		return nil, err
	}
	if slot == 0 {
		s.ev = ev
	}
	z.keepOnDevice(t.hit.Tensor.Key, slot, h, stream, ev)
	submit := time.Since(t0)
	z.mu.Lock()
	z.stats.Read += rd
	z.stats.Verify += vd
	z.stats.Bytes += size
	z.stats.Submit += submit
	z.mu.Unlock()
	return ev, nil
}

// checksCopy reports whether binding b, a raw tensor of record hit, is
// read from its copy in the cache (its source absent) and the index
// records the copy's CRC-32C, on a streamed load (no resident copies, no
// device tier): streamCopy then uploads it, checked. Other raw tensors
// go to the wrapped transport, which reads them unchecked.
func (z *Payloads) checksCopy(b *vmm.Binding, hit shardcache.SliceHit) bool {
	if z.opts.Resident || z.opts.ResidentPacks || z.tier != nil {
		return false
	}
	return streamsCopy(z.cache, hit, b.Shard, b.Offset, b.Size)
}

// streamsCopy reports whether the tensor of hit, at offset of shard and
// of size bytes, is read from its copy in c (its source absent: the load
// names the copy) and c records the copy's CRC-32C: a streamed load
// uploads it through the payload ring, checked (checksCopy), and stages
// it there (stagingNeed).
func streamsCopy(c *shardcache.Cache, hit shardcache.SliceHit, shard string, offset, size uint64) bool {
	if !hit.Tensor.CopyStored {
		return false
	}
	loc, o, err := c.LocateHit(hit)
	return err == nil && o.Kind == shardcache.KindRaw && o.Checksum != 0 && o.Size == size && loc.Path == shard && loc.Offset == offset
}

// streamCopy uploads a raw tensor from its copy in the cache piece by
// piece, as a payload is streamed, and checks the pieces' CRC-32C,
// combined, against the one the index records for the copy: a damaged
// copy fails the tensor, as the C ABI's host reads do, rather than being
// loaded (docs/FORMAT.md 5.10).
func (z *Payloads) streamCopy(ctx context.Context, t target) (Fence, error) {
	loc, o, f, err := z.openPayload(t.hit.Tensor.Key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The pieces' sums are a payload's (a payload's checksum field taken
	// as zero): the copy's first bytes make them its plain CRC-32C.
	var head [codec.HeaderSize]byte
	evs, sums, err := z.copyPieces(ctx, f, loc.Name(), o.Size, z.streams.pick(z.eng), t.b.Addr, func(off uint64, q []byte) {
		if off == 0 {
			copy(head[:], q)
		}
	})
	if err != nil {
		return nil, err
	}
	if sum := codec.PlainChecksum(sums.Sum(), head[:], o.Size); sum != o.Checksum {
		return nil, copyCRCError(loc.Name(), sum, o.Checksum)
	}
	return allFence(evs), nil
}

// openPayload readies the staging ring and opens the object of key where
// it lies (its range of a pack, kept open, or its own file); the caller
// closes it.
func (z *Payloads) openPayload(key shardcache.Key) (shardcache.Location, *shardcache.Object, *shardcache.ObjectBytes, error) {
	if err := z.ensureRing(); err != nil {
		return shardcache.Location{}, nil, nil, err
	}
	loc, o, err := z.cache.Locate(key)
	if err != nil {
		return loc, nil, nil, err
	}
	f, err := z.objects.Open(loc)
	if err != nil {
		return loc, nil, nil, err
	}
	return loc, o, f, nil
}

// eachPiece runs fn for pieces 0 to n-1 of one payload, each on a
// goroutine of its own with a read token and a staging slot, and returns
// their errors joined. Pieces take their read tokens in order, before
// their goroutine starts: a payload's pieces then arrive about together,
// and its decode is not held up behind pieces of others (taking a slot
// first and the token after made an 8 GiB Llama load of 90 MB tensors
// 10-20% slower on the H200). Every taker that waits for both holds a
// token before a slot (takeSlot); the host's entropy decode takes slots
// alone and waits for nothing while it holds one.
func (z *Payloads) eachPiece(ctx context.Context, n int, fn func(i int, s *slot) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		if err := z.acquire(ctx); err != nil {
			errs[i] = err
			break
		}
		wg.Go(func() {
			defer func() { <-z.io }()
			s, err := z.takeSlot(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { z.ring <- s }()
			errs[i] = fn(i, s)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// acquire takes a read token, or returns ctx's error once it ends
// (an ended context takes none, even where one is free).
func (z *Payloads) acquire(ctx context.Context) error {
	select {
	case z.io <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		<-z.io
		return err
	}
	return nil
}

// takeSlot takes a staging piece from the ring once the copy that last
// read it is done, or returns ctx's error once it ends; the caller puts
// the piece back. A caller holds a read token, if any, before it takes a
// piece (see streamOne).
func (z *Payloads) takeSlot(ctx context.Context) (*slot, error) {
	var s *slot
	select {
	case s = <-z.ring:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		z.ring <- s
		return nil, err
	}
	if s.ev != nil {
		s.ev.Wait() // its error belongs to that copy's fence
		s.ev = nil
	}
	return s, nil
}

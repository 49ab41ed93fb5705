package transport

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// SplitZipOptions configures a SplitZip transport.
type SplitZipOptions struct {
	// Resident keeps payloads in pinned memory after their first upload,
	// so a re-fault reads no file and verifies nothing again.
	Resident bool
	// Slots is the number of pinned staging buffers (default 4), each as
	// large as the largest payload of the bindings seen.
	Slots int
	// Readers is the number of goroutines reading payloads (default 4);
	// each payload is read in 8 MiB pieces by up to twice as many.
	Readers int
}

// SplitZip uploads payloads from a cache and decodes them in place;
// bindings without a payload go to the wrapped transport unchanged.
type SplitZip struct {
	eng   Engine
	cache *shardcache.Cache
	inner Transport
	opts  SplitZipOptions

	mu       sync.Mutex
	resident map[shardcache.Key]*payload
	slots    chan *slot
	slotSize uint64
	nslots   int
	stats    Stats
	pinned   uint64
	next     int
	checked  map[string]error // source shards checked for changes
	io       chan struct{}    // bounds concurrent piece reads
}

// payload is a verified payload in pinned memory.
type payload struct {
	buf []byte
	h   codec.Header
}

// NewSplitZip wraps inner with payloads from cache.
func NewSplitZip(eng Engine, cache *shardcache.Cache, inner Transport, opts SplitZipOptions) *SplitZip {
	if opts.Slots <= 0 {
		opts.Slots = 4
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	return &SplitZip{eng: eng, cache: cache, inner: inner, opts: opts,
		resident: map[shardcache.Key]*payload{}, checked: map[string]error{}, io: make(chan struct{}, 2*opts.Readers)}
}

// target is a binding with a payload.
type target struct {
	i   int
	b   *vmm.Binding
	hit shardcache.SliceHit
}

// UploadBatch implements Transport. Mixed batches are split: bindings
// whose source slice has a payload take the SplitZip path, the others go
// to the wrapped transport in one batch.
func (z *SplitZip) UploadBatch(bs []*vmm.Binding) []Fence {
	out := make([]Fence, len(bs))
	var others []*vmm.Binding
	var otherIdx []int
	var targets []target
	var maxPayload uint64
	for i, b := range bs {
		hit, err := z.cache.LookupSlice(b.Shard, b.Offset, b.Size)
		if err != nil || hit.Tensor.Stored != shardcache.StoredSplitZip {
			others = append(others, b)
			otherIdx = append(otherIdx, i)
			continue
		}
		if err := z.checkSource(hit); err != nil {
			out[i] = errFence{&Error{Tensor: b.Name, Err: err}}
			continue
		}
		o, err := z.cache.Lookup(hit.Tensor.Key)
		if err != nil {
			out[i] = errFence{&Error{Tensor: b.Name, Err: err}}
			continue
		}
		maxPayload = max(maxPayload, o.Size)
		targets = append(targets, target{i, b, hit})
	}
	if len(others) > 0 {
		for k, f := range z.inner.UploadBatch(others) {
			out[otherIdx[k]] = f
		}
	}
	if !z.opts.Resident {
		if err := z.ensureSlots(maxPayload); err != nil {
			for _, t := range targets {
				out[t.i] = errFence{&Error{Tensor: t.b.Name, Err: err}}
			}
			return out
		}
	}
	work := make(chan target)
	var wg sync.WaitGroup
	for range z.opts.Readers {
		wg.Go(func() {
			for t := range work {
				f, err := z.upload(t)
				if err != nil {
					f = errFence{err}
				}
				out[t.i] = wrapFence{f, t.b.Name}
			}
		})
	}
	for _, t := range targets {
		work <- t
	}
	close(work)
	wg.Wait()
	return out
}

// checkSource fails when the shard a slice came from changed since it
// was compressed (size or modification time), once per shard.
func (z *SplitZip) checkSource(hit shardcache.SliceHit) error {
	path := hit.Path()
	z.mu.Lock()
	defer z.mu.Unlock()
	err, ok := z.checked[path]
	if !ok {
		err = shardcache.CheckStat(hit.Shard, path)
		z.checked[path] = err
	}
	return err
}

// ensureSlots sizes the staging ring for payloads of up to n bytes.
func (z *SplitZip) ensureSlots(n uint64) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if n <= z.slotSize && z.slots != nil {
		return nil
	}
	if z.slots != nil {
		z.drainSlots()
	}
	z.slots = make(chan *slot, z.opts.Slots)
	for range z.opts.Slots {
		b, err := z.eng.Pinned(n)
		if err != nil {
			z.drainSlots()
			return err
		}
		z.pinned += n
		z.slots <- &slot{buf: b}
	}
	z.slotSize = n
	return nil
}

// drainSlots frees the staging ring (z.mu held).
func (z *SplitZip) drainSlots() {
	close(z.slots)
	for s := range z.slots {
		if s.ev != nil {
			s.ev.Wait()
		}
		z.eng.FreePinned(s.buf)
		z.pinned -= uint64(len(s.buf))
	}
	z.slots, z.slotSize = nil, 0
}

// upload reads a payload into pinned memory (or finds it resident),
// verifies it, and submits copy, decode and event on one stream.
func (z *SplitZip) upload(t target) (Fence, error) {
	key := t.hit.Tensor.Key
	var p *payload
	var s *slot
	if z.opts.Resident {
		z.mu.Lock()
		p = z.resident[key]
		z.mu.Unlock()
	}
	if p == nil {
		var buf []byte
		if z.opts.Resident {
			o, err := z.cache.Lookup(key)
			if err != nil {
				return nil, err
			}
			if buf, err = z.eng.Pinned(o.Size); err != nil {
				return nil, err
			}
		} else {
			z.mu.Lock()
			slots := z.slots
			z.mu.Unlock()
			s = <-slots
			defer func() { slots <- s }()
			if s.ev != nil {
				s.ev.Wait() // the copy that last read this buffer is done
				s.ev = nil
			}
			buf = s.buf
		}
		var err error
		p, err = z.read(key, buf)
		if err != nil {
			if z.opts.Resident {
				z.eng.FreePinned(buf)
			}
			return nil, err
		}
		if 2*p.h.Values != t.b.Size {
			return nil, fmt.Errorf("%w: payload decodes to %d bytes, the tensor has %d", codec.ErrSize, 2*p.h.Values, t.b.Size)
		}
		if z.opts.Resident {
			z.mu.Lock()
			if old, ok := z.resident[key]; ok {
				z.eng.FreePinned(buf)
				p = old
			} else {
				z.resident[key] = p
				z.pinned += uint64(len(p.buf))
			}
			z.mu.Unlock()
		}
	}
	if !p.h.InPlace {
		return nil, fmt.Errorf("%w: payload %s", codec.ErrNotInPlace, key)
	}
	t0 := time.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	stream := z.next % z.eng.Streams()
	z.next++
	if err := z.eng.CopyHtoD(stream, t.b.Addr, p.buf); err != nil {
		return nil, err
	}
	if err := z.eng.DecodeInPlace(stream, t.b.Addr, &p.h); err != nil {
		return nil, err
	}
	ev, err := z.eng.Record(stream)
	if err != nil {
		return nil, err
	}
	if s != nil {
		s.ev = ev
	}
	z.stats.Bytes += uint64(len(p.buf))
	z.stats.Submit += time.Since(t0)
	return ev, nil
}

// readPiece is the unit of parallel payload reads.
const readPiece = 8 << 20

// read loads a payload object into buf, in pieces read and checksummed in
// parallel, and verifies header and checksum.
func (z *SplitZip) read(key shardcache.Key, buf []byte) (*payload, error) {
	t0 := time.Now()
	f, o, err := z.cache.OpenObject(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if o.Size > uint64(len(buf)) {
		return nil, ErrTooLarge
	}
	b := buf[:o.Size]
	n := int((o.Size + readPiece - 1) / readPiece)
	crcs := make([]uint32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		z.io <- struct{}{}
		wg.Go(func() {
			defer func() { <-z.io }()
			off := uint64(i) * readPiece
			q := b[off:min(off+readPiece, o.Size)]
			if _, err := f.ReadAt(q, int64(off)); err != nil {
				errs[i] = fmt.Errorf("%s: %w", f.Name(), err)
				return
			}
			crcs[i] = codec.PieceChecksum(q, off)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t1 := time.Now()
	var sum uint32
	for i, c := range crcs {
		sum = codec.CombineChecksums(sum, c, min(readPiece, o.Size-uint64(i)*readPiece))
	}
	h, err := codec.ParseHeader(b)
	if err == nil && (h.Size != o.Size || sum != h.Checksum) {
		err = fmt.Errorf("%s: %w", f.Name(), codec.ErrChecksum)
	}
	z.mu.Lock()
	z.stats.Read += t1.Sub(t0)
	z.stats.Verify += time.Since(t1)
	z.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &payload{buf: b, h: h}, nil
}

// Stats implements Transport; it includes the wrapped transport's.
func (z *SplitZip) Stats() Stats {
	in := z.inner.Stats()
	z.mu.Lock()
	defer z.mu.Unlock()
	s := z.stats
	s.Read += in.Read
	s.Verify += in.Verify
	s.Submit += in.Submit
	s.Bytes += in.Bytes
	return s
}

// PinnedBytes implements Transport; it includes the wrapped transport's.
func (z *SplitZip) PinnedBytes() uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.pinned + z.inner.PinnedBytes()
}

// Close frees the pinned memory and closes the wrapped transport.
func (z *SplitZip) Close() error {
	z.mu.Lock()
	if z.slots != nil {
		z.drainSlots()
	}
	for k, p := range z.resident {
		z.eng.FreePinned(p.buf[:cap(p.buf)])
		delete(z.resident, k)
	}
	z.pinned = 0
	z.mu.Unlock()
	return z.inner.Close()
}

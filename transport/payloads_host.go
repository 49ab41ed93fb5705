package transport

// Entropy payloads whose source is absent: small ones packed (hostItem),
// checked in the packer's buffers and decoded by the engine's batch
// launch, or with HostEntropy decoded there in place on the host; and,
// decoded on the host into the staging ring and copied raw, version 1
// payloads, those not decodable in place, and every one with HostEntropy
// (the others are decoded on the device, payloads_stream.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// hostItem is the packer's item for a small tensor taken from its entropy
// payload (its source absent, or the payload preferred), read through the
// packer's kept-open pack files with no file opened or buffer allocated
// for it. For the engine to decode (devEntropy) the payload is the item's
// stored bytes, checked in staging and decoded by the engine's batch
// launch with the pack's other entropy payloads (one no batch decodes,
// of version 1, goes the streamed way instead: uploadFallback). With
// HostEntropy, or a destination a batch cannot write (not 16-byte
// aligned), it is read into the start of the tensor's slot (a read of its
// own, or the end of the read of the members before it: its slot, larger
// than its bytes, ends a read) and decoded there in place on the host
// (hostEntropy).
func (z *Payloads) hostItem(i int, b *vmm.Binding, hit shardcache.SliceHit) smallItem {
	it := smallItem{i: i, b: b, stored: b.Size, key: hit.Tensor.Key}
	loc, o, err := z.cache.LocateHit(hit)
	switch {
	case err == nil && (o.Kind != shardcache.KindEntropy || o.Size > b.Size || o.Size == 0):
		// compress stores no payload larger than its tensor
		err = fmt.Errorf("%s: a %s object of %d bytes, where an entropy payload of a %d-byte tensor belongs", loc.Name(), o.Kind, o.Size, b.Size)
	case err == nil:
		it.file, it.off, it.cached, it.pack, it.sum = loc.Path, loc.Offset, true, loc.Pack, o.Checksum
		if !z.opts.HostEntropy && b.Addr%16 == 0 {
			it.stored, it.check, it.dev = o.Size, devEntropy{}, true
			return it
		}
		it.read, it.check = o.Size, hostEntropy{}
		return it
	}
	it.fill = func([]byte) (*codec.Header, error) { return nil, err }
	return it
}

// hostEntropy decodes the entropy payloads hostItem staged, in place; a
// payload encoded without the in-place flag is decoded from a copy.
type hostEntropy struct{}

// checkStaged decodes the payload in b's first it.read bytes into b, which
// is its tensor's slot, checking it; b then holds raw values.
func (hostEntropy) checkStaged(it *smallItem, b []byte, _ int, _ *staged) error {
	ph, err := entropy.ParsePayloadHeader(b[:it.read])
	if err == nil {
		err = codec.CheckRecorded(ph.Checksum, it.sum)
	}
	if err == nil {
		err = entropy.DecodeInPlace(b, it.read)
	}
	if errors.Is(err, entropy.ErrNotInPlace) {
		err = entropy.Decode(b, bytes.Clone(b[:it.read]), 1)
	}
	if err != nil {
		return it.payloadError(err)
	}
	return nil
}

// devEntropy checks the entropy payloads hostItem staged and leaves them
// for the engine's batch decode (engine.Work.Entropy).
type devEntropy struct{}

// checkStaged checks the payload b whole (head, checksum, chunk index)
// into a head for the engine, st.ent[k]; a version 1 payload, which no
// batch decodes, is errFallback.
func (devEntropy) checkStaged(it *smallItem, b []byte, k int, st *staged) error {
	h := headPool.Get().(*entropy.Head)
	err := entropy.CheckTo(b, h)
	switch {
	case errors.Is(err, entropy.ErrNoRecords):
		headPool.Put(h)
		return errFallback
	case err == nil && h.ValueBytes() != it.b.Size:
		err = fmt.Errorf("%w: entropy payload decodes to %d bytes, the tensor has %d", codec.ErrSize, h.ValueBytes(), it.b.Size)
	case err == nil:
		err = codec.CheckRecorded(h.Checksum, it.sum)
	}
	if err != nil {
		headPool.Put(h)
		return it.payloadError(err)
	}
	st.ent[k] = h
	return nil
}

// uploadFallback uploads a packed entropy payload that its check found no
// batch decodes (errFallback: version 1) the way a streamed one of its
// version goes: decoded on the host into the staging ring.
func (z *Payloads) uploadFallback(ctx context.Context, it *smallItem) Fence {
	f, err := z.hostDecode(ctx, target{i: it.i, b: it.b, hit: shardcache.SliceHit{Tensor: &shardcache.Tensor{Key: it.key}}, host: true})
	if err != nil {
		return errFence{&Error{Tensor: it.b.Name, Err: err}}
	}
	return f
}

// hostDecode decodes an entropy payload on the host into staging pieces
// and submits their copies on one stream: the pieces of a version 2
// payload (a piece of values each: 8 MiB, 16 MiB from a remote cache)
// decoded in parallel, a version 1
// payload's chunk after chunk. The payload's checksum is checked once
// every piece is decoded: a payload that fails it has had pieces copied,
// and its binding stays evicted.
func (z *Payloads) hostDecode(ctx context.Context, t target) (Fence, error) {
	loc, o, f, err := z.openPayload(t.hit.Tensor.Key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Reads count as reading; decodes, less the reads in them, as
	// decoding on the host; submits as submitting.
	r := &timedReader{r: f}
	var decoding, submitting atomic.Int64
	defer func() {
		z.mu.Lock()
		z.stats.Read += time.Duration(r.d.Load())
		z.stats.HostDecode += time.Duration(decoding.Load())
		z.stats.Submit += time.Duration(submitting.Load())
		z.mu.Unlock()
	}()
	if o.Kind != shardcache.KindEntropy || o.RawSize != t.b.Size {
		return nil, fmt.Errorf("%s: a %s object of %d raw bytes, the tensor is an entropy payload of %d", loc.Name(), o.Kind, o.RawSize, t.b.Size)
	}
	d, err := entropy.NewReader(r, o.Size)
	switch {
	case errors.Is(err, entropy.ErrNoRecords):
		return z.hostDecodeStream(ctx, t, loc, o, r, &decoding, &submitting)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	h := d.Header()
	if err := codec.CheckRecorded(h.Checksum, o.Checksum); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	if h.Values*uint64(entropy.Fields[h.Field].Size) != t.b.Size {
		return nil, fmt.Errorf("%s: %w: decodes to %d values, the tensor has %d bytes", loc.Name(), codec.ErrSize, h.Values, t.b.Size)
	}
	per := d.ChunkBytes()
	step := max(1, z.piece/per) // chunks a piece
	chunks := h.Chunks()
	pieces := (chunks + step - 1) / step
	crcs, lens := make([]uint32, pieces), make([]uint64, pieces)
	evs := make(allFence, pieces)
	stream := z.streams.pick(z.eng)
	// A piece's reads all happen within its DecodeChunks: the spans
	// summed, less every read of the pieces, are the decoding.
	r0 := r.d.Load()
	defer func() { decoding.Add(-(r.d.Load() - r0)) }()
	err = z.eachPiece(ctx, int(pieces), func(i int, s *slot) error {
		c0, c1 := uint64(i)*step, min(chunks, uint64(i+1)*step)
		off := c0 * per
		q := s.buf[:min(t.b.Size, c1*per)-off]
		t0 := time.Now()
		var err error
		crcs[i], lens[i], err = d.DecodeChunks(c0, c1, q)
		t1 := time.Now()
		decoding.Add(int64(t1.Sub(t0))) // less the pieces' reads, below
		if err != nil {
			return fmt.Errorf("%s: %w", loc.Name(), err)
		}
		ev, err := z.eng.Submit(stream, engine.Work{Dst: t.b.Addr + vmm.Ptr(off), Src: q})
		submitting.Add(int64(time.Since(t1)))
		if err != nil {
			return err
		}
		s.ev, evs[i] = ev, ev
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := d.Check(crcs, lens); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	z.mu.Lock()
	z.stats.Bytes += t.b.Size
	z.mu.Unlock()
	return evs, nil
}

// timedReader is an io.ReaderAt that sums the time its reads take, for a
// host decode's time to split into reading and decoding.
type timedReader struct {
	r io.ReaderAt
	d atomic.Int64
}

func (t *timedReader) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := t.r.ReadAt(p, off)
	t.d.Add(int64(time.Since(t0)))
	return n, err
}

// hostDecodeStream is hostDecode of a version 1 payload: decoded a chunk
// at a time (entropy.DecodeStream) into staging pieces, each full piece's
// copy submitted as it fills. Its time, less its reads (r's) and the
// staging's waits and submits, adds to decoding; its submits to
// submitting.
func (z *Payloads) hostDecodeStream(ctx context.Context, t target, loc shardcache.Location, o *shardcache.Object, r *timedReader, decoding, submitting *atomic.Int64) (Fence, error) {
	stream := z.streams.pick(z.eng)
	var evs allFence
	var s *slot
	var fill, done uint64 // bytes in s, bytes submitted before them
	var staging time.Duration
	t0, r0 := time.Now(), r.d.Load()
	defer func() {
		decoding.Add(int64(time.Since(t0)-staging) - (r.d.Load() - r0))
	}()
	flush := func() error {
		f0 := time.Now()
		ev, err := z.eng.Submit(stream, engine.Work{Dst: t.b.Addr + vmm.Ptr(done), Src: s.buf[:fill]})
		d := time.Since(f0)
		submitting.Add(int64(d))
		staging += d
		if err != nil {
			return err
		}
		s.ev = ev
		evs = append(evs, ev)
		z.ring <- s
		s, done, fill = nil, done+fill, 0
		return nil
	}
	err := entropy.DecodeStream(r, o.Size, func(off uint64, vals []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if off != done+fill || uint64(len(vals)) > t.b.Size-off {
			return fmt.Errorf("values at byte %d past the tensor's %d", off, t.b.Size)
		}
		for len(vals) > 0 {
			if s == nil {
				w0 := time.Now()
				var err error
				s, err = z.takeSlot(ctx)
				staging += time.Since(w0)
				if err != nil {
					return err
				}
			}
			k := copy(s.buf[fill:], vals)
			fill, vals = fill+uint64(k), vals[k:]
			if fill == uint64(len(s.buf)) {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil && s != nil {
		err = flush()
	}
	if s != nil {
		z.ring <- s
	}
	if err == nil && done != t.b.Size {
		err = fmt.Errorf("decodes to %d bytes, the tensor has %d", done, t.b.Size)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name(), err)
	}
	z.mu.Lock()
	z.stats.Bytes += done
	z.mu.Unlock()
	return evs, nil
}

package transport

// Entropy payloads whose source is absent, decoded on the device: read
// through the staging ring like SplitZip payloads, checked (the head, the
// checksum, the chunk index), and decoded in place after their copies.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/shardcache"
)

// headBytes bounds an entropy payload's head: the header, the code
// lengths and pair table of 256 symbols, padded to 16.
const headBytes = entropy.MaxHead

// entropyUpload uploads the entropy payload of a tensor whose source is
// absent and decodes it on the device in place; a version 1 payload, one
// not decodable in place, or every one with HostEntropy is decoded on
// the host instead (hostDecode). With Resident, the payload is kept in
// pinned memory after its first read.
func (z *SplitZip) entropyUpload(ctx context.Context, t target) (Fence, error) {
	if z.opts.HostEntropy {
		return z.hostDecode(ctx, t)
	}
	if z.opts.Resident {
		p, err := z.residentPayload(t.hit.Tensor.Key)
		switch {
		case errors.Is(err, entropy.ErrNoRecords):
			return z.hostDecode(ctx, t)
		case err != nil:
			return nil, err
		case p.h.Kind() != payload.KindEntropy || p.h.DecodedSize() != t.b.Size:
			return nil, fmt.Errorf("%w: payload %s does not decode to the tensor's %d bytes", codec.ErrSize, t.hit.Tensor.Key, t.b.Size)
		case !p.h.InPlace():
			return z.hostDecode(ctx, t)
		}
		return z.submitResident(engine.Work{Dst: t.b.Addr, Src: p.buf, Decode: p.h})
	}
	loc, o, f, closeFile, err := z.openPayload(t.hit.Tensor.Key)
	if err != nil {
		return nil, err
	}
	defer closeFile()
	if o.Kind != shardcache.KindEntropy || o.RawSize != t.b.Size {
		return nil, fmt.Errorf("%s: a %s object of %d raw bytes, the tensor is an entropy payload of %d", loc.Name, o.Kind, o.RawSize, t.b.Size)
	}
	hb := make([]byte, min(o.Size, headBytes))
	if _, err := f.ReadAt(hb, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name, err)
	}
	h, err := payload.Parse(payload.KindEntropy, hb)
	switch {
	case errors.Is(err, entropy.ErrNoRecords) || err == nil && !h.InPlace():
		return z.hostDecode(ctx, t)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", loc.Name, err)
	case h.Size() != o.Size || h.DecodedSize() != t.b.Size:
		return nil, fmt.Errorf("%s: %w: an entropy payload of %d bytes decoding to %d, the object has %d and the tensor %d",
			loc.Name, codec.ErrSize, h.Size(), h.DecodedSize(), o.Size, t.b.Size)
	}
	stream := z.streams.pick(z.eng)
	if o.Size <= readPiece {
		return z.entropyOne(ctx, t, f, loc.Name, h, stream)
	}
	// The chunk index, the payload's last bytes, gathered from the pieces
	// that hold it.
	tail := make([]byte, h.Size()-h.Tail())
	evs, sums, err := z.copyPieces(ctx, f, loc.Name, o.Size, stream, t.b.Addr, func(off uint64, q []byte) {
		if end := off + uint64(len(q)); end > h.Tail() {
			lo := max(off, h.Tail())
			copy(tail[lo-h.Tail():], q[lo-off:])
		}
	})
	if err != nil {
		return nil, err
	}
	if err := payload.Check(h, o.Size, sums.Sum(), t.b.Size, tail); err != nil {
		return nil, fmt.Errorf("%s: %w", loc.Name, err)
	}
	ev, err := z.eng.Submit(stream, engine.Work{Dst: t.b.Addr, Decode: h})
	if err != nil {
		return nil, err
	}
	return allFence(append(evs, ev)), nil
}

// entropyOne uploads an entropy payload of one staging piece: read and
// checked whole, then its copy, its decode and one event in one
// submission.
func (z *SplitZip) entropyOne(ctx context.Context, t target, f io.ReaderAt, name string, h payload.Head, stream int) (Fence, error) {
	s := z.takeSlot()
	defer func() { z.ring <- s }()
	z.io <- struct{}{}
	defer func() { <-z.io }()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := s.buf[:h.Size()]
	sum, rd, vd, err := readChecked(f, q, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if h, err = payload.CheckBytes(payload.KindEntropy, q, sum, t.b.Size); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !h.InPlace() {
		return nil, fmt.Errorf("%s: %w: the payload changed while read", name, entropy.ErrPayload)
	}
	t0 := time.Now()
	ev, err := z.eng.Submit(stream, engine.Work{Dst: t.b.Addr, Src: q, Decode: h})
	if err != nil {
		return nil, err
	}
	s.ev = ev
	submit := time.Since(t0)
	z.mu.Lock()
	z.stats.Read += rd
	z.stats.Verify += vd
	z.stats.Bytes += h.Size()
	z.stats.Submit += submit
	z.mu.Unlock()
	return ev, nil
}

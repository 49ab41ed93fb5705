package gpu

import (
	"errors"
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// DecodeStream decodes the payload of size bytes read through r on the
// GPU and passes the decoded tensor to fn in order, in pieces of at most
// len(buf) bytes held in buf: the payload is read into device memory
// through buf and its checksum computed on the way, decoded there (in
// place, or out of place when the payload lacks the in-place flag) and
// copied back a piece at a time. Host memory is bounded by buf whatever
// the tensor's size; device memory holds the tensor. len(buf) must be
// positive and even. It takes fixed-codec payloads and entropy payloads
// (version 1 ones are decoded on the host, entropy.DecodeStream). Like
// Decode, it is for one goroutine at a time.
func (d *Decoder) DecodeStream(r io.ReaderAt, size uint64, buf []byte, fn func(off uint64, b []byte) error) error {
	seg := len(buf)
	if seg <= 0 || seg%2 != 0 {
		return fmt.Errorf("gpu: piece buffer of %d bytes, want a positive even size", seg)
	}
	head := make([]byte, min(size, payload.HeadBytes))
	if _, err := r.ReadAt(head, 0); err != nil {
		return fmt.Errorf("codec: reading payload header: %w", err)
	}
	h, err := payload.Parse(payload.Sniff(head), head)
	switch {
	case errors.Is(err, entropy.ErrNoRecords):
		return entropy.DecodeStream(r, size, fn)
	case err != nil:
		return err
	case h.Size() != size:
		return payload.Check(h, size, 0, 0, nil) // says got and want
	}
	out := h.DecodedSize()
	target, err := d.targets(out, size, h.InPlace())
	if err != nil {
		return err
	}
	// The bytes past the checksum that the check needs (an entropy
	// payload's chunk index), gathered from the pieces as they pass.
	tail := payload.NewTail(h)
	sums, err := d.upload(r, size, buf, target, tail.Add)
	if err != nil {
		return err
	}
	if err := payload.Check(h, size, sums.Sum(), 0, tail.Bytes()); err != nil || out == 0 {
		return err
	}
	if err := d.launchPayload(h); err != nil {
		return err
	}
	return d.download(out, buf, fn)
}

// targets reserves the device buffers of a decode of size payload bytes
// into out bytes, and returns where the payload goes: the start of the
// output buffer in place, a buffer of its own else (none for no output).
func (d *Decoder) targets(out, size uint64, inPlace bool) (cuda.DevicePtr, error) {
	if out == 0 {
		return 0, nil
	}
	if err := d.reserve(&d.buf, &d.bufCap, out); err != nil {
		return 0, err
	}
	if inPlace {
		return d.buf, nil
	}
	if err := d.reserve(&d.payload, &d.payCap, size); err != nil {
		return 0, err
	}
	return d.payload, nil
}

// upload reads the payload of size bytes through buf, a piece at a time,
// into device memory at target (nothing is copied when target is 0),
// giving each piece to saw (when set), and returns the pieces' checksums.
func (d *Decoder) upload(r io.ReaderAt, size uint64, buf []byte, target cuda.DevicePtr, saw func(off uint64, b []byte)) (*codec.PieceSums, error) {
	sums := codec.NewPieceSums(size, uint64(len(buf)))
	for i := range sums.Pieces() {
		off, n := sums.Span(i)
		b := buf[:n]
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return nil, fmt.Errorf("codec: reading payload at %d: %w", off, err)
		}
		sums.Set(i, codec.PieceChecksum(b, off))
		if saw != nil {
			saw(off, b)
		}
		if target == 0 {
			continue
		}
		if err := d.ctx.CopyHtoDAsync(target+cuda.DevicePtr(off), b, d.stream); err != nil {
			return nil, err
		}
		// The host buffer is reused for the next piece.
		if err := d.ctx.StreamSynchronize(d.stream); err != nil {
			return nil, err
		}
	}
	return sums, nil
}

// download waits for the decode, takes its errors, and passes the out
// decoded bytes to fn in pieces copied back through buf.
func (d *Decoder) download(out uint64, buf []byte, fn func(off uint64, b []byte) error) error {
	if err := d.TakeError(d.stream); err != nil {
		return err
	}
	seg := uint64(len(buf))
	for off := uint64(0); off < out; off += seg {
		b := buf[:min(seg, out-off)]
		if err := d.ctx.CopyDtoHAsync(b, d.buf+cuda.DevicePtr(off), d.stream); err != nil {
			return err
		}
		if err := d.ctx.StreamSynchronize(d.stream); err != nil {
			return err
		}
		if err := fn(off, b); err != nil {
			return err
		}
	}
	return nil
}

package gpu

import (
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// DecodeStream decodes the payload of size bytes read through r on the
// GPU and passes the decoded tensor to fn in order, in pieces of at most
// len(buf) bytes held in buf: the payload is read into device memory
// through buf and its checksum computed on the way, decoded there (in
// place, or out of place when the payload lacks the in-place flag) and
// copied back a piece at a time. Host memory is bounded by buf whatever
// the tensor's size; device memory holds the tensor. len(buf) must be
// positive and even. Like Decode, it is for one goroutine at a time.
func (d *Decoder) DecodeStream(r io.ReaderAt, size uint64, buf []byte, fn func(off uint64, b []byte) error) error {
	seg := len(buf)
	if seg <= 0 || seg%2 != 0 {
		return fmt.Errorf("gpu: piece buffer of %d bytes, want a positive even size", seg)
	}
	head := make([]byte, min(size, codec.HeaderSize))
	if _, err := r.ReadAt(head, 0); err != nil {
		return fmt.Errorf("codec: reading payload header: %w", err)
	}
	h, err := codec.ParseHeader(head)
	if err != nil {
		return err
	}
	if h.Size != size {
		return codec.CheckPayload(&h, size, 0, 0)
	}
	// Every value takes at least a byte of payload: a header claiming more
	// would make the device buffer outgrow the file.
	if h.Values > size {
		return fmt.Errorf("%w: %d values in a %d-byte payload", codec.ErrCorrupt, h.Values, size)
	}
	out := 2 * h.Values
	// An empty tensor's payload is only checked; nothing goes to the device.
	var target cuda.DevicePtr
	if out > 0 {
		if h.InPlace && size > out {
			return fmt.Errorf("%w: an in-place payload of %d bytes is larger than its %d decoded bytes", codec.ErrCorrupt, size, out)
		}
		if err := d.reserve(&d.buf, &d.bufCap, out); err != nil {
			return err
		}
		target = d.buf
		if !h.InPlace {
			if err := d.reserve(&d.payload, &d.payCap, size); err != nil {
				return err
			}
			target = d.payload
		}
	}
	sums := codec.NewPieceSums(size, uint64(seg))
	for i := range sums.Pieces() {
		off, n := sums.Span(i)
		b := buf[:n]
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return fmt.Errorf("codec: reading payload at %d: %w", off, err)
		}
		sums.Set(i, codec.PieceChecksum(b, off))
		if out == 0 {
			continue
		}
		if err := d.ctx.CopyHtoDAsync(target+cuda.DevicePtr(off), b, d.stream); err != nil {
			return err
		}
		// The host buffer is reused for the next piece.
		if err := d.ctx.StreamSynchronize(d.stream); err != nil {
			return err
		}
	}
	if err := sums.Check(&h, 0); err != nil {
		return err
	}
	if out == 0 {
		return nil
	}
	if h.InPlace {
		err = d.LaunchInPlace(d.buf, &h, d.stream)
	} else {
		err = d.LaunchOutOfPlace(d.buf, d.payload, &h, d.stream)
	}
	if err != nil {
		return err
	}
	if err := d.TakeError(d.stream); err != nil {
		return err
	}
	for off := uint64(0); off < out; off += uint64(seg) {
		b := buf[:min(uint64(seg), out-off)]
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

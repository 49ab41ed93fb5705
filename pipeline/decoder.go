package pipeline

import (
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
)

// Decoder decodes fixed-codec and entropy payloads for Verify and
// Decompress. The reference is CPUDecoder; the GPU decoder implements it
// too.
type Decoder interface {
	// DecodeStream decodes the payload of size bytes read through r and
	// passes the decoded tensor to fn in order, in pieces held in buf
	// (len(buf) is a positive multiple of 2*codec.ChunkValues), so memory
	// stays bounded whatever the tensor's size.
	DecodeStream(r io.ReaderAt, size uint64, buf []byte, fn func(off uint64, b []byte) error) error
	Name() string
}

// CPUDecoder is the pure-Go reference decoder.
type CPUDecoder struct{}

var _ Decoder = CPUDecoder{}

// DecodeStream decodes with codec.Reader, whole chunks at a time, or an
// entropy payload with entropy.DecodeStream (a chunk at a time, its
// memory its own, not buf).
func (CPUDecoder) DecodeStream(r io.ReaderAt, size uint64, buf []byte, fn func(off uint64, b []byte) error) error {
	var magic [4]byte
	if size >= 4 {
		if _, err := r.ReadAt(magic[:], 0); err != nil {
			return fmt.Errorf("codec: reading payload header: %w", err)
		}
		if string(magic[:]) == entropy.PayloadMagic {
			return entropy.DecodeStream(r, size, fn)
		}
	}
	k := uint64(len(buf)) / (2 * codec.ChunkValues)
	if k == 0 || uint64(len(buf))%(2*codec.ChunkValues) != 0 {
		return fmt.Errorf("codec: piece buffer of %d bytes is not a whole number of chunks", len(buf))
	}
	rd, err := codec.NewReader(r, size)
	if err != nil {
		return err
	}
	h := rd.Header()
	N := h.Chunks()
	for first := uint64(0); first < N; first += k {
		n := min(k, N-first)
		off := 2 * first * codec.ChunkValues
		b := buf[:2*min((first+n)*codec.ChunkValues, h.Values)-off]
		if err := rd.DecodeChunks(b, first, n); err != nil {
			return err
		}
		if err := fn(off, b); err != nil {
			return err
		}
	}
	return nil
}

// Name returns "cpu".
func (CPUDecoder) Name() string { return "cpu" }

package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// Reader decodes a payload held in a file (any io.ReaderAt) a range of
// chunks at a time, holding only its tables in memory, so tensors of any
// size verify and decompress in bounded memory. NewReader checks the
// payload's checksum and tables as Validate does; chunk contents are
// checked as they are decoded.
type Reader struct {
	r     io.ReaderAt
	L     *layout
	lut   *[256]uint64
	codes [256]byte
	buf   []byte
}

// readBlock is the unit of the checksum pass.
const readBlock = 1 << 20

// NewReader opens the payload of size bytes read through r.
func NewReader(r io.ReaderAt, size uint64) (*Reader, error) {
	at := func(off, n uint64) ([]byte, error) {
		b := make([]byte, n)
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return nil, fmt.Errorf("codec: reading payload at %d: %w", off, err)
		}
		return b, nil
	}
	head, err := at(0, min(size, HeaderSize))
	if err != nil {
		return nil, err
	}
	h, err := ParseHeader(head)
	if errors.Is(err, ErrVersion) {
		return nil, versionOrDamage(err, head, size, r)
	}
	if err != nil {
		return nil, err
	}
	if h.Size != size {
		return nil, CheckPayload(&h, size, 0, 0)
	}
	sums := NewPieceSums(size, readBlock)
	buf := make([]byte, min(size, readBlock))
	for i := range sums.Pieces() {
		off, n := sums.Span(i)
		b := buf[:n]
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return nil, fmt.Errorf("codec: reading payload at %d: %w", off, err)
		}
		sums.Set(i, PieceChecksum(b, off))
	}
	if err := sums.Check(&h, 0); err != nil {
		return nil, err
	}
	L, err := parseTables(h, at)
	if err != nil {
		return nil, err
	}
	return &Reader{r: r, L: L, lut: pairTable(&h.Codebook), codes: h.Codebook.codeTable()}, nil
}

// versionOrDamage tells a payload of a version this build does not read
// (err, from its header) from a damaged one: every version sums itself
// with its checksum field, where version 1 keeps it, taken as zero, so a
// payload of size bytes read through r whose sum does not match is
// damage (ErrCorrupt), as ParseHeader finds of a whole payload in memory.
func versionOrDamage(err error, head []byte, size uint64, r io.ReaderAt) error {
	if len(head) < HeaderSize || binary.LittleEndian.Uint64(head[offSize:]) != size {
		return err
	}
	buf := make([]byte, min(size, readBlock))
	var crc uint32
	for off := uint64(0); off < size; off += readBlock {
		b := buf[:min(readBlock, size-off)]
		if _, rerr := r.ReadAt(b, int64(off)); rerr != nil {
			return err
		}
		if off == 0 {
			clear(b[offChecksum : offChecksum+4])
		}
		crc = crc32c.Update(crc, b)
	}
	if crc != binary.LittleEndian.Uint32(head[offChecksum:]) {
		return damagedVersion(binary.LittleEndian.Uint16(head[offVersion:]))
	}
	return err
}

// Header returns the payload's header.
func (r *Reader) Header() Header { return r.L.h }

// DecodeChunks decodes chunks [first, first+k) into dst, which must hold
// exactly their decoded bytes.
func (r *Reader) DecodeChunks(dst []byte, first, k uint64) error {
	h := &r.L.h
	N := h.Chunks()
	if first > N || k > N-first {
		return fmt.Errorf("%w: chunks [%d, %d) of %d", ErrSize, first, first+k, N)
	}
	if k == 0 {
		return nil
	}
	start := first * ChunkValues
	end := min((first+k)*ChunkValues, h.Values)
	if uint64(len(dst)) != 2*(end-start) {
		return fmt.Errorf("%w: destination of %d bytes for %d values", ErrSize, len(dst), end-start)
	}
	last := first + k - 1
	lo := r.L.entries[first].Offset
	hi := r.L.entries[last].Offset + chunkLen(h.chunkCount(last), r.L.entries[last].Escapes)
	if uint64(cap(r.buf)) < hi-lo {
		r.buf = make([]byte, hi-lo)
	}
	data := r.buf[:hi-lo]
	if _, err := r.r.ReadAt(data, int64(lo)); err != nil {
		return fmt.Errorf("codec: reading chunks at %d: %w", lo, err)
	}
	for c := first; c <= last; c++ {
		e := r.L.entries[c]
		cnt := h.chunkCount(c)
		d := data[e.Offset-lo : e.Offset-lo+chunkLen(cnt, e.Escapes)]
		o := dst[2*(c*ChunkValues-start) : 2*(c*ChunkValues-start)+2*uint64(cnt)]
		if reason := decodeChunk(o, d, e.Escapes, &h.Codebook, r.lut, &r.codes); reason != "" {
			return corrupt(e.Offset, int64(c), "%s", reason)
		}
	}
	return nil
}

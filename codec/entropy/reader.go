package entropy

// Decoding ranges of a version 2 or 3 payload's chunks from several goroutines.

import (
	"fmt"
	"io"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// ErrNoRecords is NewReader's error for a version 1 payload, whose
// chunks' bytes are not contiguous: DecodeStream reads it.
var ErrNoRecords = fmt.Errorf("%w: version 1 has no chunk records", ErrPayload)

// Reader decodes any range of the chunks of a version 2 or 3 payload read from
// an io.ReaderAt, from any number of goroutines at once, in memory bounded
// by the ranges asked for: the payload's head is read and checked once by
// NewReader, each range's records with one read. The payload's checksum
// covers the head and the records in order: each DecodeChunks returns the
// CRC of the bytes it read, and Check folds them.
type Reader struct {
	r    io.ReaderAt
	h    PayloadHeader
	head []byte // header, code lengths, padding
	idx  []byte // the chunk index
	tab  *Table
	at   func(c uint64) uint64
}

// NewReader reads the head and the chunk index of the payload of size
// bytes at r and checks them (header, code lengths, index). A version 1 payload is
// ErrNoRecords.
func NewReader(r io.ReaderAt, size uint64) (*Reader, error) {
	if size < headerSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrPayload, size)
	}
	var hb [headerSize]byte
	if err := readAt(r, hb[:], 0); err != nil {
		return nil, err
	}
	h, err := ParsePayloadHeader(hb[:])
	switch {
	case err != nil:
		return nil, err
	case h.Size != size:
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, size, h.Size)
	case !h.records():
		return nil, ErrNoRecords
	}
	d := &Reader{r: r, h: h, head: make([]byte, h.Others), idx: make([]byte, h.Size-h.Index)}
	if err := readAt(r, d.head, 0); err != nil {
		return nil, err
	}
	if err := readAt(r, d.idx, h.Index); err != nil {
		return nil, err
	}
	if d.tab, err = h.table(d.head); err != nil {
		return nil, err
	}
	d.at = indexAt(d.idx)
	if err := h.checkIndex(d.at); err != nil {
		return nil, err
	}
	return d, nil
}

// Header returns the payload's header.
func (d *Reader) Header() PayloadHeader { return d.h }

// ChunkBytes returns the bytes of values a chunk holds (the last may hold
// fewer).
func (d *Reader) ChunkBytes() uint64 {
	return uint64(d.h.ChunkValues) * uint64(Fields[d.h.Field].Size)
}

// DecodeChunks decodes chunks [c0, c1) into dst, which must hold exactly
// their values, and returns the CRC-32C of the record bytes it read and
// their count (for Check).
func (d *Reader) DecodeChunks(c0, c1 uint64, dst []byte) (crc uint32, n uint64, err error) {
	h, f := &d.h, Fields[d.h.Field]
	if c0 > c1 || c1 > h.Chunks() {
		return 0, 0, fmt.Errorf("entropy: chunks [%d, %d) of %d", c0, c1, h.Chunks())
	}
	lo := h.Others + d.at(c0)
	hi := h.Others + d.at(c1)
	vals := uint64(0)
	for c := c0; c < c1; c++ {
		vals += h.chunkValues(c)
	}
	if uint64(len(dst)) != vals*uint64(f.Size) {
		return 0, 0, fmt.Errorf("%w: %d bytes for the %d values of chunks [%d, %d)", codec.ErrSize, len(dst), vals, c0, c1)
	}
	sc := scratchPool.Get().(*chunkScratch)
	defer scratchPool.Put(sc)
	sc.rec = grow(sc.rec, hi-lo)
	rec := sc.rec
	if err := readAt(d.r, rec, lo); err != nil {
		return 0, 0, err
	}
	syms := sc.syms[:h.ChunkValues]
	var off uint64
	for c := c0; c < c1; c++ {
		oLo, oHi, _, sHi, _ := h.spans(c, d.at(c), d.at(c+1)) // checked
		m := h.chunkValues(c)
		r := rec[oLo-lo : sHi-lo]
		if err := decodeValues(d.tab, f, r[:oHi-oLo], r[oHi-oLo:], syms[:m], dst[off:off+m*uint64(f.Size)], sc); err != nil {
			return 0, 0, fmt.Errorf("chunk %d: %w", c, err)
		}
		off += m * uint64(f.Size)
	}
	return crc32c.Update(0, rec), uint64(len(rec)), nil
}

// Check folds the CRCs DecodeChunks returned for consecutive ranges that
// cover every chunk, in order, into the payload's checksum and compares
// it with the header's.
func (d *Reader) Check(crcs []uint32, lens []uint64) error {
	crc := codec.ChecksumWithout(d.head, offCRC)
	var total uint64
	for i := range crcs {
		crc = codec.CombineChecksums(crc, crcs[i], lens[i])
		total += lens[i]
	}
	crc = crc32c.Update(crc, d.idx)
	if total != d.h.Index-d.h.Others || crc != d.h.Checksum {
		return &codec.ChecksumError{Payload: "entropy payload", Computed: crc, Stored: d.h.Checksum}
	}
	return nil
}

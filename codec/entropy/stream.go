package entropy

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// Encoder writes an entropy payload of a tensor given a piece at a time,
// in memory bounded by a chunk (not the tensor): the caller counts the
// symbols first (Count, a pass over the tensor), then writes the values in
// order. Each chunk's record (its other bits, then its symbol chunk) goes
// to its place in w as the chunk fills; Close writes the chunk index
// after the records, then the header, code lengths and checksum. The payload is byte for byte
// what Encode writes.
type Encoder struct {
	w    io.WriterAt
	f    Field
	pc   *payloadCode
	n    uint64
	code *Code

	chunk []byte // the current chunk's values
	index []uint64
	pos   uint64 // bytes of records written
	done  uint64 // values written
	obits bitWriter
	crc   uint32 // of the records written
	enc   []byte
	syms  []byte
}

// NewEncoder starts the payload of the values c counted, written to w
// from offset 0. The values written must be those counted: a pair or a
// field they did not hold is an error.
func NewEncoder(w io.WriterAt, c *Counts) (*Encoder, error) {
	f := Fields[c.fi]
	pc, err := newPayloadCode(c)
	if err != nil {
		return nil, err
	}
	n := c.n
	e := &Encoder{w: w, f: f, pc: pc, n: n, code: pc.code}
	chunks := (n + codec.ChunkValues - 1) / codec.ChunkValues
	e.index = make([]uint64, 0, chunks+1)
	e.chunk = make([]byte, 0, codec.ChunkValues*f.Size)
	e.syms = make([]byte, codec.ChunkValues)
	return e, nil
}

// Write adds the next values (a whole number of them).
func (e *Encoder) Write(raw []byte) error {
	if len(raw)%e.f.Size != 0 {
		return fmt.Errorf("entropy: %d bytes are not whole %s values", len(raw), e.f.DType)
	}
	if e.done+uint64(len(raw)/e.f.Size) > e.n {
		return fmt.Errorf("entropy: more than the %d values announced", e.n)
	}
	full := codec.ChunkValues * e.f.Size
	for len(raw) > 0 {
		k := min(len(raw), full-len(e.chunk))
		e.chunk = append(e.chunk, raw[:k]...)
		raw = raw[k:]
		e.done += uint64(k / e.f.Size)
		if len(e.chunk) == full || e.done == e.n {
			if err := e.flushChunk(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushChunk codes the current chunk and writes its record: its other
// bits, then its symbol chunk.
func (e *Encoder) flushChunk() error {
	v := len(e.chunk) / e.f.Size
	syms := e.syms[:v]
	var rec []byte
	if e.f.DType == "BF16" && !e.f.Whole {
		// Symbols and other bits in one pass: a byte of other bits a value.
		rec = slices.Grow(e.obits.buf[:0], v)[:v]
		splitBF16(syms, rec, e.chunk)
	} else {
		if err := e.f.Symbols(syms, e.chunk); err != nil {
			return err
		}
		e.obits.buf = e.obits.buf[:0]
		packInto(&e.obits, e.f, e.chunk)
		rec = e.obits.flush()
	}
	syms, err := e.pc.toSymbols(syms)
	if err != nil {
		return err
	}
	if rec, err = EncodeChunk(rec, e.code, syms, e.pc.symbolBits()); err != nil {
		return err
	}
	e.obits.buf = rec[:0]
	if _, err := e.w.WriteAt(rec, int64(e.pc.records+e.pos)); err != nil {
		return err
	}
	e.index = append(e.index, e.pos)
	e.pos += uint64(len(rec))
	e.crc = crc32c.Update(e.crc, rec)
	e.chunk = e.chunk[:0]
	return nil
}

// Close writes the header, the code lengths and the chunk index, and
// returns the payload's size. Every announced value must have been
// written.
func (e *Encoder) Close() (uint64, error) {
	if e.done != e.n {
		return 0, fmt.Errorf("entropy: %d of %d values written", e.done, e.n)
	}
	e.index = append(e.index, e.pos)
	index := e.pc.records + e.pos
	size := index + 8*uint64(len(e.index))
	idx := make([]byte, 8*len(e.index))
	for c, p := range e.index {
		binary.LittleEndian.PutUint64(idx[8*c:], p)
	}
	head := make([]byte, e.pc.records)
	e.pc.putHead(head, index, size)
	e.pc.putFlags(head, idx)
	// CRC-32C of the whole payload, its field zero: the head, the
	// records' CRC folded in, then the index.
	crc := codec.CombineChecksums(crc32c.Update(0, head), e.crc, e.pos)
	crc = crc32c.Update(crc, idx)
	binary.LittleEndian.PutUint32(head[offCRC:], crc)
	if _, err := e.w.WriteAt(idx, int64(index)); err != nil {
		return 0, err
	}
	if _, err := e.w.WriteAt(head, 0); err != nil {
		return 0, err
	}
	return size, nil
}

// packInto appends the other bits of raw's values to w.
func packInto(w *bitWriter, f Field, raw []byte) {
	ob := f.Other()
	if ob == 0 {
		return
	}
	n := len(raw) / f.Size
	if f.DType == "BF16" && !f.Whole {
		k := len(w.buf)
		w.buf = append(w.buf, make([]byte, n)...)
		var syms [codec.ChunkValues]byte
		for o := 0; o < n; o += len(syms) {
			m := min(len(syms), n-o)
			splitBF16(syms[:m], w.buf[k+o:k+o+m], raw[2*o:2*(o+m)])
		}
		return
	}
	if w.nbits == 0 {
		k := len(w.buf)
		w.buf = append(w.buf, make([]byte, (n*ob+7)/8)...)
		packOthers(w.buf[k:], f, raw)
		return
	}
	for i := range n {
		w.write(uint64(f.otherBits(value(f, raw, i))), ob)
	}
}

// DecodeStream decodes the entropy payload of size bytes read from r a
// chunk at a time, in memory bounded by a chunk, and passes each chunk's
// values to fn with their byte offset in the tensor. The payload's
// checksum is folded as the regions are read and checked at the end: fn
// may have been given values of a payload that then fails it, and the
// call returns that error.
func DecodeStream(r io.ReaderAt, size uint64, fn func(off uint64, vals []byte) error) error {
	if size < headerSize {
		return fmt.Errorf("%w: %d bytes", ErrPayload, size)
	}
	var hb [headerSize]byte
	if err := readAt(r, hb[:], 0); err != nil {
		return err
	}
	h, err := ParsePayloadHeader(hb[:])
	if err != nil {
		return err
	}
	if h.Size != size {
		return fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, size, h.Size)
	}
	if h.records() {
		return decodeRecords(r, size, fn)
	}
	f := Fields[h.Field]
	head := make([]byte, h.Others) // header, code lengths, index, padding
	if err := readAt(r, head, 0); err != nil {
		return err
	}
	tab, err := h.table(head)
	if err != nil {
		return err
	}
	chunks := h.Chunks()
	index := uint64(headerSize) + uint64((h.Count+1)/2)
	at := func(c uint64) uint64 { return binary.LittleEndian.Uint64(head[index+8*c:]) }
	symBytes := h.Size - h.Symbols
	if chunks > 0 && at(chunks) != symBytes {
		return fmt.Errorf("%w: chunks end at %d of %d symbol bytes", ErrPayload, at(chunks), symBytes)
	}
	crc := codec.ChecksumWithout(head, offCRC)
	ob := uint64(f.Other())
	otherBytes := (h.Values*ob + 7) / 8
	var crcO, crcS uint32
	cv := uint64(h.ChunkValues)
	syms := make([]byte, cv)
	vals := make([]byte, cv*uint64(f.Size))
	var obuf, sbuf []byte
	sc := scratchPool.Get().(*chunkScratch)
	defer scratchPool.Put(sc)
	for c := range chunks {
		a, b := at(c), at(c+1)
		if a > b || b > symBytes || a != 0 && c == 0 || b-a > h.chunkValues(c)+maxChunkOverhead {
			return fmt.Errorf("%w: chunk %d at [%d, %d) of %d symbol bytes", ErrPayload, c, a, b, symBytes)
		}
		lo, hi := c*cv, min(h.Values, (c+1)*cv)
		oLo, oHi := lo*ob/8, min(otherBytes, (hi*ob+7)/8)
		if c+1 == chunks {
			oHi = h.Symbols - h.Others // the padding is checksummed too
		}
		obuf = grow(obuf, oHi-oLo)
		if err := readAt(r, obuf, h.Others+oLo); err != nil {
			return err
		}
		crcO = codec.CombineChecksums(crcO, crc32c.Update(0, obuf), uint64(len(obuf)))
		sbuf = grow(sbuf, b-a)
		if err := readAt(r, sbuf, h.Symbols+a); err != nil {
			return err
		}
		crcS = codec.CombineChecksums(crcS, crc32c.Update(0, sbuf), uint64(len(sbuf)))
		v := vals[:(hi-lo)*uint64(f.Size)]
		if err := decodeValues(tab, f, obuf, sbuf, syms[:hi-lo], v, sc); err != nil {
			return fmt.Errorf("chunk %d: %w", c, err)
		}
		if err := fn(lo*uint64(f.Size), v); err != nil {
			return err
		}
	}
	if chunks == 0 { // the (empty) other bits' padding
		obuf = grow(obuf, h.Symbols-h.Others)
		if err := readAt(r, obuf, h.Others); err != nil {
			return err
		}
		crcO = crc32c.Update(0, obuf)
	}
	crc = codec.CombineChecksums(crc, crcO, h.Symbols-h.Others)
	crc = codec.CombineChecksums(crc, crcS, symBytes)
	if crc != h.Checksum {
		return &codec.ChecksumError{Payload: "entropy payload", Computed: crc, Stored: h.Checksum}
	}
	return nil
}

// decodeRecords is DecodeStream of a version 2 or 3 payload: a chunk at a
// time through a Reader.
func decodeRecords(r io.ReaderAt, size uint64, fn func(off uint64, vals []byte) error) error {
	d, err := NewReader(r, size)
	if err != nil {
		return err
	}
	h := d.Header()
	vals := make([]byte, d.ChunkBytes())
	crcs, lens := make([]uint32, 0, h.Chunks()), make([]uint64, 0, h.Chunks())
	for c := range h.Chunks() {
		v := vals[:h.chunkValues(c)*uint64(Fields[h.Field].Size)]
		crc, n, err := d.DecodeChunks(c, c+1, v)
		if err != nil {
			return err
		}
		crcs, lens = append(crcs, crc), append(lens, n)
		if err := fn(c*d.ChunkBytes(), v); err != nil {
			return err
		}
	}
	return d.Check(crcs, lens)
}

// grow returns b resized to n bytes.
func grow(b []byte, n uint64) []byte {
	if uint64(cap(b)) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// readAt fills b from offset off of r; a short read is ErrPayload.
func readAt(r io.ReaderAt, b []byte, off uint64) error {
	if len(b) == 0 {
		return nil
	}
	n, err := r.ReadAt(b, int64(off))
	switch {
	case n == len(b):
		return nil
	case err == io.EOF:
		return fmt.Errorf("%w: %d of %d bytes at offset %d", ErrPayload, n, len(b), off)
	}
	return err
}

package entropy

// Decoding whole payloads in memory, and the chunk index checks every
// reader of a payload shares.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// Decode checks payload p (header, checksum, tables) and decodes it into
// dst, which must hold exactly its values, on up to workers goroutines
// (0: GOMAXPROCS). A damaged payload is an error, never a read or write
// out of bounds.
func Decode(dst, p []byte, workers int) error {
	h, err := ParsePayloadHeader(p)
	if err != nil {
		return err
	}
	f := Fields[h.Field]
	switch {
	case uint64(len(p)) != h.Size:
		return fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, len(p), h.Size)
	case codec.ChecksumParallel(p, workersOr(workers)) != h.Checksum:
		return &codec.ChecksumError{Payload: "entropy payload", Computed: codec.Checksum(p), Stored: h.Checksum}
	case uint64(len(dst)) != h.Values*uint64(f.Size):
		return fmt.Errorf("%w: %d bytes for %d %s values", codec.ErrSize, len(dst), h.Values, f.DType)
	}
	tab, err := h.tableFrom(p, true)
	if err != nil {
		return err
	}
	defer tab.release()
	at := indexAt(h.indexBytes(p))
	if err := h.checkIndex(at); err != nil {
		return err
	}
	chunks := int(h.Chunks())
	n := int(h.Values)
	errs := make([]error, chunks)
	cv := int(h.ChunkValues)
	parallel(chunks, workers, func(c int) {
		oLo, oHi, sLo, sHi, _ := h.spans(uint64(c), at(uint64(c)), at(uint64(c)+1)) // checked
		lo, hi := c*cv, min(n, (c+1)*cv)
		sc := scratchPool.Get().(*chunkScratch)
		// A chunk's symbols in the scratch's buffer (cv of them).
		if err := decodeValues(tab, f, p[oLo:oHi], p[sLo:sHi], sc.syms[:hi-lo], dst[lo*f.Size:hi*f.Size], sc); err != nil {
			errs[c] = fmt.Errorf("chunk %d: %w", c, err)
		}
		scratchPool.Put(sc)
	})
	return errors.Join(errs...)
}

// indexBytes returns the chunk index of the whole payload p.
func (h *PayloadHeader) indexBytes(p []byte) []byte {
	if h.records() {
		return p[h.Index:h.Size]
	}
	index := uint64(headerSize) + uint64((h.Count+1)/2)
	return p[index : index+8*(h.Chunks()+1)]
}

// indexAt returns entry c of chunk index idx.
func indexAt(idx []byte) func(c uint64) uint64 {
	return func(c uint64) uint64 { return binary.LittleEndian.Uint64(idx[8*c:]) }
}

// checkIndex checks the chunk index at: the chunks' data start at the
// start of their section and end at the payload's end, each chunk's
// spans lie in order inside the payload, and a payload flagged in place
// decodes in place.
func (h *PayloadHeader) checkIndex(at func(c uint64) uint64) error {
	chunks := h.Chunks()
	data := h.Index - h.Others
	if h.Version == 1 {
		data = h.Size - h.Symbols
	}
	if chunks > 0 && (at(0) != 0 || at(chunks) != data) {
		return fmt.Errorf("%w: chunks at [%d, %d), want [0, %d)", ErrPayload, at(0), at(chunks), data)
	}
	for c := range chunks {
		if _, _, _, _, err := h.spans(c, at(c), at(c+1)); err != nil {
			return err
		}
	}
	if h.InPlace && !h.inPlace(at) {
		return fmt.Errorf("%w: flagged decodable in place, and it is not", ErrPayload)
	}
	return nil
}

// decodeValues decodes a chunk's values into dst (len(syms) of them) from
// its symbol chunk, which must be all of symbols, and its other bits,
// through syms.
func decodeValues(tab *Table, f Field, others, symbols, syms, dst []byte, sc *chunkScratch) error {
	out, bits := syms, f.Bits
	if tab.pairs != nil { // version 3: (n+1)/2 symbols, a pair of fields each, expanded into syms
		out, bits = sc.pairs[:(len(syms)+1)/2], 8
	}
	used, err := decodeChunk(tab, symbols, bits, out, sc)
	if err == nil && used != len(symbols) {
		err = fmt.Errorf("%w: %d bytes after its symbols", ErrStream, len(symbols)-used)
	}
	if err != nil {
		return err
	}
	if tab.pairs != nil {
		expandPairs(tab.pairs, syms, out)
	}
	unpackValues(dst, f, others, syms)
	return nil
}

// unpackValues rebuilds the values from their symbols and other bits.
func unpackValues(dst []byte, f Field, others, syms []byte) {
	ob := f.Other()
	if f.DType == "BF16" && !f.Whole { // a byte of other bits a value: sign, 7 of mantissa
		others = others[:len(syms)]
		dst = dst[:2*len(syms)]
		// Sixteen values at a time with vector instructions where there
		// are, then eight at a time, bytes side by side in 64-bit words: a
		// value's high byte is its sign and the exponent's top 7 bits,
		// its low byte the exponent's low bit and 7 of mantissa.
		i := rebuildBF16(dst, syms, others)
		for ; i+8 <= len(syms); i += 8 {
			sy := binary.LittleEndian.Uint64(syms[i:])
			o := binary.LittleEndian.Uint64(others[i:])
			hi := o&0x8080808080808080 | sy>>1&0x7f7f7f7f7f7f7f7f
			lo := sy<<7&0x8080808080808080 | o&0x7f7f7f7f7f7f7f7f
			binary.LittleEndian.PutUint64(dst[2*i:], spread(uint32(lo))|spread(uint32(hi))<<8)
			binary.LittleEndian.PutUint64(dst[2*i+8:], spread(uint32(lo>>32))|spread(uint32(hi>>32))<<8)
		}
		for ; i < len(syms); i++ {
			o := uint16(others[i])
			binary.LittleEndian.PutUint16(dst[2*i:], o&0x80<<8|uint16(syms[i])<<7|o&0x7f)
		}
		return
	}
	if f.Whole { // FP8 bytes coded whole: the symbols are the values
		copy(dst[:len(syms)], syms)
		return
	}
	i := unpackFast(dst, f, others, syms)
	br := bitReader{buf: others, pos: i * ob}
	// The last few, whose 8-byte load would pass the end of others.
	for ; i < len(syms); i++ {
		b, _ := br.read(ob) // the header check bounds the section
		o := uint32(b)
		v := o>>f.Shift<<(f.Shift+f.Bits) | uint32(syms[i])<<f.Shift | o&(1<<f.Shift-1)
		switch f.Size {
		case 1:
			dst[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(dst[4*i:], v)
		}
	}
}

package entropy

// A payload's code, of single fields (version 2) or of pairs of fields
// (version 3), chosen from its counts; fields turned into symbols and
// back; the head the code writes.

import (
	"encoding/binary"
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// errUncounted reports values given to an encoder that hold a pair of
// fields its counts did not.
var errUncounted = fmt.Errorf("%w: a pair of fields that was not counted", ErrPayload)

// payloadCode is a payload's code and the layout it implies.
type payloadCode struct {
	fi        int
	n         uint64
	code      *Code
	lengths   []uint8
	lo, count int    // the symbols with code lengths
	records   uint64 // where the records start
	bits      uint64 // of the code words of every value
	// Version 3: pairs[s] is symbol s's fields (first | second<<8), and
	// symbol[(a-fieldLo) + (b-fieldLo)*fieldSpan] one more than the
	// symbol of fields a, b (0: no symbol), over the fields the pairs
	// hold (fieldLo to fieldLo+fieldSpan-1: a table of 81 entries for 9
	// neighbouring exponents, not 65,536 for any pair of bytes); nil in
	// version 2.
	pairs              []uint16
	symbol             []uint16
	fieldLo, fieldSpan uint
}

// newPayloadCode returns the code of the values counted, of single fields
// or of pairs, whichever stores smaller with its table, and the layout of
// the payload's sections; built once for the counts.
func newPayloadCode(c *Counts) (*payloadCode, error) {
	if c.pc == nil {
		pc, err := buildPayloadCode(c)
		if err != nil {
			return nil, err
		}
		c.pc = pc
	}
	return c.pc, nil
}

// buildPayloadCode is newPayloadCode's work.
func buildPayloadCode(c *Counts) (*payloadCode, error) {
	if !c.pairs() {
		return codeOf(c.fi, c.n, c.Freq())
	}
	pcount := c.pairCounts()
	pc, err := codeOf(c.fi, c.n, c.fieldCounts(pcount))
	if err != nil || c.n < 2 || len(pcount) > MaxSymbols {
		return pc, err
	}
	// Pairs, where at most 256 differ: symbols in the order of their
	// fields (a | b<<bits).
	bits := uint(Fields[c.fi].Bits)
	pairs := make([]uint16, len(pcount))
	pfreq := make([]uint64, len(pcount))
	for i, p := range pcount {
		pairs[i] = uint16(p.key&(1<<bits-1)) | uint16(p.key>>bits)<<8
		pfreq[i] = p.count
	}
	pp, err := codeOf(c.fi, c.n, pfreq)
	if err != nil {
		return nil, err
	}
	pp.pairs = pairs
	pp.records = align16(uint64(headerSize) + uint64((pp.count+1)/2) + 2*uint64(pp.count))
	if 8*pp.records+pp.bits >= 8*pc.records+pc.bits {
		return pc, nil
	}
	lo, hi := uint(255), uint(0)
	for _, p := range pairs {
		lo, hi = min(lo, uint(p&0xff), uint(p>>8)), max(hi, uint(p&0xff), uint(p>>8))
	}
	pp.fieldLo, pp.fieldSpan = lo, hi-lo+1
	pp.symbol = make([]uint16, pp.fieldSpan*pp.fieldSpan)
	for s, p := range pairs {
		pp.symbol[uint(p&0xff)-lo+(uint(p>>8)-lo)*pp.fieldSpan] = uint16(s) + 1
	}
	return pp, nil
}

// codeOf builds the length-limited code of symbols counted freq, for n
// values of field Fields[fi], and the version 2 layout.
func codeOf(fi int, n uint64, freq []uint64) (*payloadCode, error) {
	ls, err := Lengths(freq, MaxLen)
	if err != nil {
		return nil, err
	}
	code, err := NewCode(ls, MaxLen)
	if err != nil {
		return nil, err
	}
	pc := &payloadCode{fi: fi, n: n, code: code, lengths: ls, bits: code.Bits(freq)}
	hi := -1
	for s, l := range ls {
		if l > 0 {
			if hi < 0 {
				pc.lo = s
			}
			hi = s
		}
	}
	pc.count = hi - pc.lo + 1
	pc.records = align16(uint64(headerSize) + uint64((pc.count+1)/2))
	return pc, nil
}

// version returns the payload version the code is written as.
func (pc *payloadCode) version() int {
	if pc.pairs != nil {
		return pairVersion
	}
	return 2
}

// symbolBits returns the bits of a symbol the chunks code.
func (pc *payloadCode) symbolBits() int {
	if pc.pairs != nil {
		return 8
	}
	return Fields[pc.fi].Bits
}

// putHead writes the fixed header and the code lengths of a payload of
// size bytes whose chunk index starts at index into p (the checksum and
// the index are the caller's).
func (pc *payloadCode) putHead(p []byte, index, size uint64) {
	copy(p, PayloadMagic)
	binary.LittleEndian.PutUint16(p[4:], uint16(pc.version()))
	binary.LittleEndian.PutUint16(p[6:], headerSize)
	binary.LittleEndian.PutUint64(p[8:], pc.n)
	binary.LittleEndian.PutUint32(p[16:], codec.ChunkValues)
	p[offFields], p[offFields+1], p[offFields+2] = byte(pc.fi), MaxLen, byte(pc.lo)
	binary.LittleEndian.PutUint16(p[24:], uint16(pc.count))
	binary.LittleEndian.PutUint64(p[offOthers:], pc.records)
	binary.LittleEndian.PutUint64(p[offSymbols:], index)
	binary.LittleEndian.PutUint64(p[offSize:], size)
	for k := range pc.count {
		p[headerSize+k/2] |= pc.lengths[pc.lo+k] << (4 * (1 - k%2))
	}
	if pc.pairs != nil {
		at := headerSize + (pc.count+1)/2
		for k := range pc.count {
			binary.LittleEndian.PutUint16(p[at+2*k:], pc.pairs[pc.lo+k])
		}
	}
}

// putFlags sets the in-place flag in head, the payload's first bytes
// (header, code lengths), when the payload with chunk index idx decodes
// in place.
func (pc *payloadCode) putFlags(head, idx []byte) {
	h := PayloadHeader{Version: pc.version(), Values: pc.n, ChunkValues: codec.ChunkValues, Field: pc.fi,
		Others: pc.records, Size: binary.LittleEndian.Uint64(head[offSize:])}
	if h.inPlace(indexAt(idx)) {
		binary.LittleEndian.PutUint32(head[offFlags:], flagInPlace)
	}
}

// toSymbols turns the fields of a chunk's values into its symbols, in
// place, and returns them: the fields themselves, or in version 3 a
// symbol for each pair (the odd last field paired with itself). A pair
// the counts did not hold is an error.
func (pc *payloadCode) toSymbols(fields []byte) ([]byte, error) {
	if pc.pairs == nil {
		return fields, nil
	}
	n := len(fields)
	sym, lo, span := pc.symbol, pc.fieldLo, pc.fieldSpan
	// Symbol j is written after its fields 2j and 2j+1 (or the odd last,
	// twice) are read, and before any later symbol's fields.
	j := 0
	for ; 2*j < n; j++ {
		a, b := uint(fields[2*j])-lo, uint(fields[min(2*j+1, n-1)])-lo
		if a >= span || b >= span {
			return nil, errUncounted // a field no counted pair holds
		}
		s := sym[a+b*span]
		if s == 0 {
			return nil, errUncounted
		}
		fields[j] = byte(s - 1)
	}
	return fields[:j], nil
}

// expandPairs writes the fields of pair symbols pairs into dst (len(dst)
// fields, (len(dst)+1)/2 symbols): eight symbols a 64-bit load and their
// sixteen fields two 64-bit stores.
func expandPairs(table *[MaxSymbols]uint16, dst, pairs []byte) {
	n := len(dst)
	pairs = pairs[:(n+1)/2]
	j := 0
	for ; 2*j+16 <= n; j += 8 {
		x := binary.LittleEndian.Uint64(pairs[j:])
		lo := uint64(table[byte(x)]) | uint64(table[byte(x>>8)])<<16 | uint64(table[byte(x>>16)])<<32 | uint64(table[byte(x>>24)])<<48
		hi := uint64(table[byte(x>>32)]) | uint64(table[byte(x>>40)])<<16 | uint64(table[byte(x>>48)])<<32 | uint64(table[byte(x>>56)])<<48
		binary.LittleEndian.PutUint64(dst[2*j:], lo)
		binary.LittleEndian.PutUint64(dst[2*j+8:], hi)
	}
	for ; 2*j+1 < n; j++ {
		binary.LittleEndian.PutUint16(dst[2*j:], table[pairs[j]])
	}
	if n%2 == 1 {
		dst[n-1] = byte(table[pairs[j]])
	}
}

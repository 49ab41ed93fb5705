package entropy

import (
	"encoding/binary"
	"fmt"
)

// Field is where a float dtype's exponent lies in a little-endian value
// of Size bytes: Bits bits starting at bit Shift (or, with Whole, the
// entire byte of a one-byte value is the symbol).
type Field struct {
	DType string
	Size  int // bytes per value
	Shift int
	Bits  int
	Whole bool // FP8 coded a whole byte at a time
}

// Other returns the bits per value stored as they are, around the symbol.
func (f Field) Other() int {
	if f.Whole {
		return 0
	}
	return 8*f.Size - f.Bits
}

// otherBits returns value v without its field: the bits above the field
// moved down to meet the bits below it.
func (f Field) otherBits(v uint32) uint32 {
	return v>>(f.Shift+f.Bits)<<f.Shift | v&(1<<f.Shift-1)
}

// Name names the field: the dtype and "exponent", or "byte" for an FP8
// value coded whole.
func (f Field) Name() string {
	if f.Whole {
		return f.DType + " byte"
	}
	return f.DType + " exponent"
}

// FieldNamed returns the field of Fields that Name calls name.
func FieldNamed(name string) (Field, bool) {
	for _, f := range Fields {
		if f.Name() == name {
			return f, true
		}
	}
	return Field{}, false
}

// Fields are the exponent fields of the float dtypes entropy payloads
// cover, and the whole-byte variants of FP8.
var Fields = []Field{
	{DType: "BF16", Size: 2, Shift: 7, Bits: 8},
	{DType: "F16", Size: 2, Shift: 10, Bits: 5},
	{DType: "F32", Size: 4, Shift: 23, Bits: 8},
	{DType: "F8_E4M3", Size: 1, Shift: 3, Bits: 4},
	{DType: "F8_E4M3", Size: 1, Bits: 8, Whole: true},
	{DType: "F8_E5M2", Size: 1, Shift: 2, Bits: 5},
	{DType: "F8_E5M2", Size: 1, Bits: 8, Whole: true},
}

// Symbols writes the symbol of each value of raw (len(raw)/f.Size of
// them) into dst.
func (f Field) Symbols(dst, raw []byte) error {
	n := len(raw) / f.Size
	if len(raw)%f.Size != 0 || len(dst) < n {
		return fmt.Errorf("entropy: %d bytes of %s for %d symbols", len(raw), f.DType, len(dst))
	}
	if f.DType == "BF16" && !f.Whole {
		splitBF16(dst[:n], nil, raw)
		return nil
	}
	mask := uint32(1)<<f.Bits - 1
	switch f.Size {
	case 1:
		if f.Whole {
			copy(dst[:n], raw)
			break
		}
		// Eight values a 64-bit word: a shift and a mask of every byte
		// (the bits a shift brings in from the next byte are masked off).
		lanes := lanes8(uint64(mask))
		i := 0
		for ; i+8 <= n; i += 8 {
			binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(raw[i:])>>f.Shift&lanes)
		}
		for ; i < n; i++ {
			dst[i] = byte(uint32(raw[i]) >> f.Shift & mask)
		}
	case 2:
		// Four values a 64-bit word, their symbols then gathered from the
		// low bytes of its 16-bit lanes.
		lanes := lanes16(uint64(mask))
		i := 0
		for ; i+4 <= n; i += 4 {
			binary.LittleEndian.PutUint32(dst[i:], uint32(gather(binary.LittleEndian.Uint64(raw[2*i:])>>f.Shift&lanes)))
		}
		for ; i < n; i++ {
			dst[i] = byte(uint32(binary.LittleEndian.Uint16(raw[2*i:])) >> f.Shift & mask)
		}
	case 4:
		i := 0
		if f.DType == "F32" && !f.Whole {
			i = splitF32Vec(dst[:n], nil, raw)
		}
		for ; i < n; i++ {
			dst[i] = byte(binary.LittleEndian.Uint32(raw[4*i:]) >> f.Shift & mask)
		}
	default:
		return fmt.Errorf("entropy: values of %d bytes", f.Size)
	}
	return nil
}

// splitBF16 writes the exponent of each BF16 value of raw to syms and its
// other bits (sign, 7 of mantissa) to others, either of which may be nil:
// 32 values at a time with vector instructions where there are, then
// eight at a time in 64-bit words.
func splitBF16(syms, others, raw []byte) {
	n := len(raw) / 2
	if syms != nil {
		syms = syms[:n]
	}
	if others != nil {
		others = others[:n]
	}
	i := splitBF16Vec(syms, others, raw[:2*n])
	for ; i+8 <= n; i += 8 {
		a := binary.LittleEndian.Uint64(raw[2*i:])
		b := binary.LittleEndian.Uint64(raw[2*i+8:])
		if syms != nil {
			binary.LittleEndian.PutUint64(syms[i:], exponents8(a, b))
		}
		if others != nil {
			binary.LittleEndian.PutUint64(others[i:], gather(otherBits4(a))|gather(otherBits4(b))<<32)
		}
	}
	for ; i < n; i++ {
		v := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		if syms != nil {
			syms[i] = byte(v >> 7)
		}
		if others != nil {
			others[i] = byte(v>>15<<7 | v&0x7f)
		}
	}
}

// exponents8 returns the exponents of the eight BF16 values in a and b
// (little-endian words of four), one a byte.
func exponents8(a, b uint64) uint64 { return gather(a>>7) | gather(b>>7)<<32 }

// otherBits4 moves the other bits of the four BF16 values of x (sign,
// then 7 of mantissa) into the low bytes of its 16-bit lanes.
func otherBits4(x uint64) uint64 { return x>>8&0x0080008000800080 | x&0x007f007f007f007f }

// gather moves the low bytes of the four 16-bit lanes of x into the four
// low bytes of the result.
func gather(x uint64) uint64 {
	x &= 0x00ff00ff00ff00ff
	x = (x | x>>8) & 0x0000ffff0000ffff
	return (x | x>>16) & 0xffffffff
}

// packOthers writes the other bits of raw's values (f not BF16's
// exponent, not whole bytes), Other() bits each, most significant first,
// into out, which holds exactly their bytes: the last one padded with
// zeros, as a bitWriter flushes them.
func packOthers(out []byte, f Field, raw []byte) {
	ob, shift, bits := uint(f.Other()), uint(f.Shift), uint(f.Bits)
	n := len(raw) / f.Size
	lowMask := uint32(1)<<shift - 1
	pos := 0
	// acc's bits above the nb pending ones are never written; ob is at
	// most 24, so at most 55 are pending.
	var acc uint64
	var nb uint
	// putGroup appends w bits (at most 32), the other bits of one value
	// or of several, the first value's highest; put one value's.
	putGroup := func(g uint64, w uint) {
		acc = acc<<w | g
		nb += w
		if nb >= 32 {
			nb -= 32
			binary.BigEndian.PutUint32(out[pos:], uint32(acc>>nb))
			pos += 4
		}
	}
	put := func(v uint32) { putGroup(uint64(v>>(shift+bits)<<shift|v&lowMask), ob) }
	// A value's other bits, in every lane of a word at once: the bits
	// above the field moved down by its width onto those below it.
	hi, lo := (uint64(1)<<ob-1)&^uint64(lowMask), uint64(lowMask)
	switch f.Size {
	case 1:
		// Eight values a word (FP8's exponent fields: ob is 3 or 4, at
		// most 4 for one append): pairs, then fours, then all eight
		// merged into 8 x ob bits.
		hi8, lo8 := lanes8(hi), lanes8(lo)
		i := 0
		for ; ob <= 4 && i+8 <= n; i += 8 {
			x := binary.LittleEndian.Uint64(raw[i:])
			o := x>>bits&hi8 | x&lo8
			o = (o&0x00FF00FF00FF00FF)<<ob | o>>8&0x00FF00FF00FF00FF
			o = (o&0x0000FFFF0000FFFF)<<(2*ob) | o>>16&0x0000FFFF0000FFFF
			putGroup((o&0xFFFFFFFF)<<(4*ob)|o>>32, 8*ob)
		}
		for _, v := range raw[i:n] {
			put(uint32(v))
		}
	case 2:
		// Four values a word (ob at most 16): two pairs of 2 x ob bits.
		hi16, lo16 := lanes16(hi), lanes16(lo)
		i := 0
		if f.DType == "F16" {
			i, pos, acc, nb = packF16(out, raw[:2*n])
		}
		for ; i+4 <= n; i += 4 {
			x := binary.LittleEndian.Uint64(raw[2*i:])
			o := x>>bits&hi16 | x&lo16
			o = (o&0x0000FFFF0000FFFF)<<ob | o>>16&0x0000FFFF0000FFFF
			putGroup(o&0xFFFFFFFF, 2*ob)
			putGroup(o>>32, 2*ob)
		}
		for ; i < n; i++ {
			put(uint32(binary.LittleEndian.Uint16(raw[2*i:])))
		}
	default:
		i := 0
		if ob == 24 {
			// Three bytes a value: byte-aligned, vector code where there is some.
			i = splitF32Vec(nil, out, raw)
			pos = 3 * i
		}
		for ; i < n; i++ {
			put(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	flushBits(out, pos, acc, nb)
}

// packF16 is packOthers' loop for F16 (sign and mantissa, 11 bits a
// value) with its shifts constant, four values an appendWord while 8
// bytes fit in out: it returns the values done and the state packOthers
// goes on from.
func packF16(out, raw []byte) (int, int, uint64, uint) {
	const ob, hi16, lo16 = 11, 0x0400040004000400, 0x03FF03FF03FF03FF
	var acc uint64
	var nb uint
	pos, i := 0, 0
	for ; 2*i+8 <= len(raw) && pos+8 <= len(out); i += 4 {
		x := binary.LittleEndian.Uint64(raw[2*i:])
		o := x>>5&hi16 | x&lo16
		o = (o&0x0000FFFF0000FFFF)<<ob | o>>16&0x0000FFFF0000FFFF
		pos, acc, nb = appendWord(out, pos, acc, nb, (o&0xFFFFFFFF)<<(2*ob)|o>>32, 4*ob)
	}
	return i, pos, acc, nb
}

// appendWord appends the w bits of g (nb + w at most 64; g's first
// value's bits highest) to the bits packed into out: pos bytes written
// and the nb pending bits at the bottom of acc, with nb below 8 before
// and after. It stores 8 bytes at pos, which must fit in out, whatever
// it completes: the bytes past those it counts are written again by the
// next append or the last flush, so no branch decides when to store.
func appendWord(out []byte, pos int, acc uint64, nb uint, g uint64, w uint) (int, uint64, uint) {
	acc = acc<<w | g
	nb += w
	binary.BigEndian.PutUint64(out[pos:], acc<<(64-nb))
	return pos + int(nb>>3), acc, nb & 7
}

// lanes8 repeats the byte m in every byte of a word, lanes16 the 16-bit
// m in every 16-bit lane.
func lanes8(m uint64) uint64  { return m * 0x0101010101010101 }
func lanes16(m uint64) uint64 { return m * 0x0001000100010001 }

// unpackFast rebuilds the values of syms whose other bits (f not BF16's
// exponent, not whole bytes) it can read with whole-word loads inside
// others, from the first, and returns how many it did: F32, F16 and the
// FP8 exponent fields with vector loops where there are, F32's
// other values three bytes at a time, narrower fields four values from
// each 8-byte load (eight values from two loads measured no faster).
func unpackFast(dst []byte, f Field, others, syms []byte) int {
	ob, shift, bits := uint(f.Other()), uint(f.Shift), uint(f.Bits)
	lowMask := uint64(1)<<shift - 1
	rebuild := func(o uint64, s byte) uint64 { return o>>shift<<(shift+bits) | uint64(s)<<shift | o&lowMask }
	if ob == 24 && f.Size == 4 {
		n := min(len(syms), len(others)/3)
		for i := unpackF32Vec(dst, others, syms); i < n; i++ {
			o := uint64(others[3*i])<<16 | uint64(others[3*i+1])<<8 | uint64(others[3*i+2])
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(rebuild(o, syms[i])))
		}
		return n
	}
	if len(others) < 8 || ob > 14 {
		return 0
	}
	// Value i's bits start in byte i*ob/8, which must leave 8 bytes.
	n := min(len(syms), ((len(others)-8)*8+7)/int(ob)+1)
	// F16 8 values, F8_E4M3 32 and F8_E5M2 16 at a time with vector
	// instructions where there are, then four values from each load:
	// 7 + 4 x 14 bits fit its 64.
	i := 0
	switch {
	case f.DType == "F16":
		i = unpackF16Vec(dst, others, syms)
	case f.DType == "F8_E4M3" && ob == 4:
		i = unpackE4M3Vec(dst, others, syms)
	case f.DType == "F8_E5M2" && ob == 3:
		i = unpackE5M2Vec(dst, others, syms)
	}
	n &^= 3
	for ; i < n; i += 4 {
		q := uint(i) * ob
		w := binary.BigEndian.Uint64(others[q>>3:]) << (q & 7)
		s := syms[i : i+4 : i+4]
		v0 := rebuild(w>>(64-ob), s[0])
		v1 := rebuild(w<<ob>>(64-ob), s[1])
		v2 := rebuild(w<<(2*ob)>>(64-ob), s[2])
		v3 := rebuild(w<<(3*ob)>>(64-ob), s[3])
		if f.Size == 1 {
			d := dst[i : i+4 : i+4]
			d[0], d[1], d[2], d[3] = byte(v0), byte(v1), byte(v2), byte(v3)
		} else {
			binary.LittleEndian.PutUint64(dst[2*i:], v0&0xffff|v1&0xffff<<16|v2&0xffff<<32|v3<<48)
		}
	}
	return max(i, n)
}

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
		for i := range n {
			if f.Whole {
				dst[i] = raw[i]
			} else {
				dst[i] = byte(uint32(raw[i]) >> f.Shift & mask)
			}
		}
	case 2:
		for i := range n {
			dst[i] = byte(uint32(binary.LittleEndian.Uint16(raw[2*i:])) >> f.Shift & mask)
		}
	case 4:
		for i := range n {
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

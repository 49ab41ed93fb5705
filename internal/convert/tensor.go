package convert

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Tensor is one converted tensor: its safetensors dtype, shape and
// little-endian bytes.
type Tensor struct {
	Name  string
	DType string
	Shape []uint64
	Data  []byte
}

// BF16 rounds a float32 to BF16 by round-to-nearest-even, the way
// PyTorch's .to(torch.bfloat16) does; NaNs stay NaN (quiet) with their
// sign and top payload bits.
func BF16(f uint32) uint16 {
	if f&0x7fffffff > 0x7f800000 {
		return uint16(f>>16) | 0x0040
	}
	return uint16((f + 0x7fff + (f>>16)&1) >> 16)
}

// HalfToFloat widens an IEEE half to float32 exactly.
func HalfToFloat(h uint16) uint32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return sign | 0x7f800000 | man<<13
	case exp != 0:
		return sign | (exp+112)<<23 | man<<13
	case man == 0:
		return sign
	}
	// Subnormal half: normalize.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return sign | e<<23 | (man&0x3ff)<<13
}

// fromFloat32 converts little-endian float32 values to BF16 bytes.
func fromFloat32(b []byte) []byte {
	out := make([]byte, len(b)/2)
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint16(out[i/2:], BF16(binary.LittleEndian.Uint32(b[i:])))
	}
	return out
}

// fromFloat16 converts little-endian half values to BF16 bytes.
func fromFloat16(b []byte) []byte {
	out := make([]byte, len(b))
	for i := 0; i+2 <= len(b); i += 2 {
		binary.LittleEndian.PutUint16(out[i:], BF16(HalfToFloat(binary.LittleEndian.Uint16(b[i:]))))
	}
	return out
}

// elements returns the product of a shape, or an error when it overflows
// or is negative.
func elements(shape []int64) (uint64, []uint64, error) {
	n := uint64(1)
	out := make([]uint64, len(shape))
	for i, d := range shape {
		if d < 0 {
			return 0, nil, fmt.Errorf("negative dimension %d", d)
		}
		out[i] = uint64(d)
		if d != 0 && n > math.MaxUint64/uint64(d) {
			return 0, nil, fmt.Errorf("shape %v overflows", shape)
		}
		n *= uint64(d)
	}
	return n, out, nil
}

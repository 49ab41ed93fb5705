package synth

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// BF16 rounds f to the nearest BF16 value (ties to even) and returns its bits.
// NaNs stay NaNs.
func BF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Normal returns n little-endian BF16 values drawn from N(0, sigma).
func Normal(rng *rand.Rand, n int, sigma float64) []byte {
	out := make([]byte, 2*n)
	FillNormal(rng, out, sigma, 0, 0)
	return out
}

// FillNormal fills dst with BF16 values from N(0, sigma), each row of cols
// values scaled by its own factor drawn from [1-spread/2, 1+spread/2]
// (spread 0 gives no row scaling).
func FillNormal(rng *rand.Rand, dst []byte, sigma, spread float64, cols int) {
	n := len(dst) / 2
	scale := sigma
	for i := range n {
		if cols > 0 && i%cols == 0 && spread > 0 {
			scale = sigma * (1 - spread/2 + spread*rng.Float64())
		}
		binary.LittleEndian.PutUint16(dst[2*i:], BF16(float32(rng.NormFloat64()*scale)))
	}
}

// Peaked returns n little-endian values of size bytes (1, 2 or 4) whose
// field of bits bits at bit shift takes few values, one of them 80% of
// the time (a trained tensor's exponents, made peaked), the other bits
// random; with whole, the one-byte values are the field themselves. Entropy
// payloads of them code pairs of fields.
func Peaked(rng *rand.Rand, n, size, shift, bits int, whole bool) []byte {
	raw := make([]byte, n*size)
	for i := range n {
		e := uint32(3)
		switch r := rng.IntN(100); {
		case r >= 97:
			e = uint32(rng.IntN(6))
		case r >= 92:
			e = 2
		case r >= 80:
			e = 4
		}
		v := rng.Uint32()
		if whole {
			v = e*7 + 1
		} else {
			v = v&^((1<<bits-1)<<shift) | e<<shift
		}
		switch size {
		case 1:
			raw[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(raw[4*i:], v)
		}
	}
	return raw
}

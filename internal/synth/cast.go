package synth

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// minifloat describes a binary float format of 1+ebits+mbits bits.
type minifloat struct {
	ebits, mbits, bias int
	max                float64 // largest finite value
}

var (
	f16  = minifloat{5, 10, 15, 65504}
	e4m3 = minifloat{4, 3, 7, 448} // OCP E4M3FN: no infinities
	e5m2 = minifloat{5, 2, 15, 57344}
)

// encode rounds x to the nearest value of the format (ties to even),
// saturating at its largest finite value, and returns its bits.
func (m minifloat) encode(x float64) uint32 {
	var sign uint32
	if math.Signbit(x) {
		sign, x = 1, -x
	}
	sign <<= m.ebits + m.mbits
	if x == 0 {
		return sign
	}
	maxCode := uint32(m.max/math.Ldexp(1, int(math.Floor(math.Log2(m.max)))-m.mbits)) - 1<<m.mbits // mantissa of max
	maxCode |= uint32(int(math.Floor(math.Log2(m.max)))+m.bias) << m.mbits
	if x >= m.max {
		return sign | maxCode
	}
	minExp := 1 - m.bias
	e := math.Ilogb(x)
	if e < minExp { // subnormal (may round up to the smallest normal)
		q := math.RoundToEven(x / math.Ldexp(1, minExp-m.mbits))
		return sign | uint32(q)
	}
	q := math.RoundToEven(x / math.Ldexp(1, e-m.mbits))
	if q >= math.Ldexp(1, m.mbits+1) {
		q /= 2
		e++
	}
	code := uint32(e+m.bias)<<m.mbits | (uint32(q) - 1<<m.mbits)
	return sign | min(code, maxCode)
}

// Cast converts little-endian BF16 values to dtype ("F16", "F32",
// "F8_E4M3", "F8_E5M2"), rounding to nearest even and saturating; FP8 rows
// of cols values are scaled so that each row's largest magnitude maps to
// the format's largest value, as FP8 checkpoints scale per channel. Any
// other dtype returns raw unchanged.
func Cast(raw []byte, dtype string, cols int) []byte {
	n := len(raw) / 2
	val := func(i int) float64 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16))
	}
	switch dtype {
	case "F32":
		out := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(out[4*i:], uint32(binary.LittleEndian.Uint16(raw[2*i:]))<<16)
		}
		return out
	case "F16":
		out := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(f16.encode(val(i))))
		}
		return out
	case "F8_E4M3", "F8_E5M2":
	default:
		return raw
	}
	m := e4m3
	if dtype == "F8_E5M2" {
		m = e5m2
	}
	out := make([]byte, n)
	cols = max(cols, 1)
	for r := 0; r < n; r += cols {
		end := min(n, r+cols)
		var amax float64
		for i := r; i < end; i++ {
			if v := math.Abs(val(i)); v > amax && !math.IsInf(v, 0) && !math.IsNaN(v) {
				amax = v
			}
		}
		scale := 1.0
		if amax > 0 {
			scale = m.max / amax
		}
		for i := r; i < end; i++ {
			out[i] = byte(m.encode(val(i) * scale))
		}
	}
	return out
}

// Trained returns the values of bf16 (little-endian BF16 drawn from N(0,
// sigma)) as dtype, the way the entropy benchmarks use them: F32 drawn
// afresh from rng with full mantissas (a cast would leave 16 of them zero),
// every other dtype cast with a scale a row of cols values (Cast).
func Trained(rng *rand.Rand, bf16 []byte, sigma float64, dtype string, cols int) []byte {
	if dtype != "F32" {
		return Cast(bf16, dtype, cols)
	}
	n := len(bf16) / 2
	out := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(float32(rng.NormFloat64()*sigma)))
	}
	return out
}

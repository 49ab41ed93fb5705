package codec

import (
	"encoding/binary"
	"math"
)

// Histogram counts BF16 exponents.
type Histogram [256]uint64

// Add counts the exponents of the little-endian BF16 values in src. An odd
// trailing byte is ignored.
func (h *Histogram) Add(src []byte) {
	// Eight sub-histograms of 32-bit counters break the dependency between
	// successive increments of one bucket; blocks of 2^28 values keep the
	// counters from overflowing.
	const block = 1 << 29
	src = src[h.addVector(src):]
	for len(src) > 0 {
		n := min(len(src), block)
		h.add(src[:n])
		src = src[n:]
	}
}

func (h *Histogram) add(src []byte) {
	var t [8][256]uint32
	i := 0
	for ; i+16 <= len(src); i += 16 {
		b := (*[16]byte)(src[i:])
		x := binary.LittleEndian.Uint64(b[:8])
		y := binary.LittleEndian.Uint64(b[8:])
		t[0][byte(x>>7)]++
		t[1][byte(x>>23)]++
		t[2][byte(x>>39)]++
		t[3][byte(x>>55)]++
		t[4][byte(y>>7)]++
		t[5][byte(y>>23)]++
		t[6][byte(y>>39)]++
		t[7][byte(y>>55)]++
	}
	for ; i+2 <= len(src); i += 2 {
		t[0][byte(binary.LittleEndian.Uint16(src[i:])>>7)]++
	}
	for e := range h {
		h[e] += uint64(t[0][e]) + uint64(t[1][e]) + uint64(t[2][e]) + uint64(t[3][e]) +
			uint64(t[4][e]) + uint64(t[5][e]) + uint64(t[6][e]) + uint64(t[7][e])
	}
}

// Merge adds the counts of o.
func (h *Histogram) Merge(o *Histogram) {
	for e := range h {
		h[e] += o[e]
	}
}

// Total returns the number of values counted.
func (h *Histogram) Total() uint64 {
	var t uint64
	for _, c := range h {
		t += c
	}
	return t
}

// Entropy returns the Shannon entropy of the exponent distribution in bits
// per value, the lower bound for any code of the exponents alone.
func (h *Histogram) Entropy() float64 {
	t := float64(h.Total())
	if t == 0 {
		return 0
	}
	var bits float64
	for _, c := range h {
		if c > 0 {
			p := float64(c) / t
			bits -= p * math.Log2(p)
		}
	}
	return bits
}

// Codebook maps a 4-bit code to an exponent. Its entries are distinct.
type Codebook [CodebookSize]byte

// NewCodebook returns the codebook of the 16 most frequent exponents in h.
// Ties are broken by the smaller exponent, and exponents that never occur
// fill the remaining codes in ascending order, so the result depends on the
// counts alone.
func NewCodebook(h *Histogram) Codebook {
	// A stable sort of all 256 exponents by count, cut to the first 16,
	// is what this computes; keeping the 16 best while scanning in
	// exponent order gives the same codebook without sorting (compress
	// builds one a BF16 tensor, and a checkpoint of many small tensors
	// spent most of its codebook time in the sort).
	var top Codebook
	n := 0
	for e := range h {
		c := h[e]
		if n == CodebookSize && c <= h[top[n-1]] {
			continue
		}
		// After every kept exponent of at least this count: an earlier
		// exponent of the same count stays ahead.
		p := min(n, CodebookSize-1)
		for p > 0 && h[top[p-1]] < c {
			p--
		}
		end := min(n, CodebookSize-1)
		copy(top[p+1:end+1], top[p:end])
		top[p] = byte(e)
		n = min(n+1, CodebookSize)
	}
	return top
}

// Coverage returns the fraction of the values counted in h whose exponent
// is in cb.
func (cb *Codebook) Coverage(h *Histogram) float64 {
	t := h.Total()
	if t == 0 {
		return 1
	}
	var in uint64
	for _, e := range cb {
		in += h[e]
	}
	return float64(in) / float64(t)
}

// codeTable returns, for each exponent, its code, or escapeCode when the
// exponent is not in the codebook.
func (cb *Codebook) codeTable() (t [256]byte) {
	for e := range t {
		t[e] = escapeCode
	}
	for code, e := range cb {
		t[e] = byte(code)
	}
	return t
}

// escapeCode marks an exponent outside the codebook in a code table.
const escapeCode = 0x10

// valid reports whether the codebook's entries are distinct.
func (cb *Codebook) valid() bool {
	var seen [256]bool
	for _, e := range cb {
		if seen[e] {
			return false
		}
		seen[e] = true
	}
	return true
}

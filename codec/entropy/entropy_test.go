package entropy

import (
	"bytes"
	"container/heap"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// huffmanBits is the total code length of an unlimited Huffman code (the
// classic two-smallest merge), the optimum Lengths must reach when the
// limit does not bind.
func huffmanBits(freq []uint64) uint64 {
	h := &u64heap{}
	for _, f := range freq {
		if f > 0 {
			heap.Push(h, f)
		}
	}
	if h.Len() == 1 {
		return (*h)[0]
	}
	var bits uint64
	for h.Len() > 1 {
		a, b := heap.Pop(h).(uint64), heap.Pop(h).(uint64)
		bits += a + b
		heap.Push(h, a+b)
	}
	return bits
}

type u64heap []uint64

func (h u64heap) Len() int           { return len(h) }
func (h u64heap) Less(i, j int) bool { return h[i] < h[j] }
func (h u64heap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *u64heap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *u64heap) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

// histograms returns adversarial and random symbol frequencies.
func histograms(rng *rand.Rand) [][]uint64 {
	var hs [][]uint64
	one := make([]uint64, 256)
	one[7] = 100
	hs = append(hs, one)
	two := make([]uint64, 256)
	two[0], two[255] = 1, 1<<40
	hs = append(hs, two)
	flat := make([]uint64, 256)
	for i := range flat {
		flat[i] = 5
	}
	hs = append(hs, flat)
	fib := make([]uint64, 40) // Fibonacci weights: the deepest unlimited tree
	fib[0], fib[1] = 1, 1
	for i := 2; i < len(fib); i++ {
		fib[i] = fib[i-1] + fib[i-2]
	}
	hs = append(hs, fib)
	for range 200 {
		h := make([]uint64, 1+rng.IntN(256))
		for i := range h {
			if rng.IntN(3) > 0 {
				h[i] = uint64(rng.ExpFloat64() * 1e4 * float64(1+rng.IntN(1000)))
			}
		}
		hs = append(hs, h)
	}
	return hs
}

func TestLengthsOptimalAndLimited(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for k, freq := range histograms(rng) {
		for _, limit := range []int{8, 10, 12, 24} {
			ls, err := Lengths(freq, limit)
			used := 0
			for _, f := range freq {
				if f > 0 {
					used++
				}
			}
			if used > 1<<limit {
				if !errors.Is(err, ErrCode) {
					t.Fatalf("hist %d: %d symbols in %d bits: %v", k, used, limit, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("hist %d limit %d: %v", k, limit, err)
			}
			c, err := NewCode(ls, limit)
			if err != nil {
				t.Fatalf("hist %d limit %d: lengths %v: %v", k, limit, ls, err)
			}
			for s, l := range ls {
				if int(l) > limit || (l == 0) != (freq[s] == 0) {
					t.Fatalf("hist %d: symbol %d (freq %d) has %d bits, limit %d", k, s, freq[s], l, limit)
				}
			}
			got, opt := c.Bits(freq), huffmanBits(freq)
			// The Fibonacci weights (hist 3) are the one case here whose
			// unlimited tree is deeper than 24.
			if got < opt || limit == 24 && k != 3 && got != opt {
				t.Fatalf("hist %d limit %d: %d bits, Huffman %d", k, limit, got, opt)
			}
			if float64(got) < EntropyBits(freq)-1e-6 {
				t.Fatalf("hist %d: %d bits beats the entropy bound %f", k, got, EntropyBits(freq))
			}
		}
	}
}

func TestNewCodeRejects(t *testing.T) {
	for name, ls := range map[string][]uint8{
		"over-subscribed": {1, 1, 1},
		"incomplete":      {1, 2},
		"past the limit":  {1, 13, 13},
	} {
		if _, err := NewCode(ls, 12); !errors.Is(err, ErrCode) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCheckLengthsAgrees: checkLengths accepts exactly the lengths
// NewCode builds a code of, with the same error, on valid codes, random
// lengths (mostly invalid) and the edge cases of one symbol.
func TestCheckLengthsAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := [][]uint8{{}, {0}, {1}, {2}, {1, 1}, {0, 1, 0}, {1, 1, 1}, {1, 2}, {1, 13, 13}, {24, 24}, {25}}
	for range 2000 {
		freq := make([]uint64, 1+rng.IntN(MaxSymbols))
		for i := range freq {
			freq[i] = uint64(rng.IntN(3)) * rng.Uint64N(1000)
		}
		if ls, err := Lengths(freq, 12); err == nil {
			cases = append(cases, ls) // a valid code
		}
		ls := make([]uint8, 1+rng.IntN(MaxSymbols+2))
		for i := range ls {
			ls[i] = uint8(rng.IntN(14))
		}
		cases = append(cases, ls)
	}
	valid := 0
	for _, ls := range cases {
		for _, maxLen := range []int{12, 24, 0} {
			code, cerr := NewCode(ls, maxLen)
			count, err := checkLengths(ls, 0, maxLen)
			if (err == nil) != (cerr == nil) || err != nil && err.Error() != cerr.Error() {
				t.Fatalf("lengths %v, limit %d: checkLengths says %v, NewCode %v", ls, maxLen, err, cerr)
			}
			// The same of only the symbols from the first with a length,
			// as a payload's head names them.
			lo := 0
			for lo < len(ls) && ls[lo] == 0 {
				lo++
			}
			if part, perr := checkLengths(ls[lo:], lo, maxLen); (perr == nil) != (err == nil) || perr != nil && perr.Error() != err.Error() || err == nil && part != count {
				t.Fatalf("lengths %v from symbol %d, limit %d: %v, %v; all of them: %v, %v", ls[lo:], lo, maxLen, part, perr, count, err)
			}
			if err != nil {
				continue
			}
			valid++
			var want [25]uint32
			for _, l := range code.Lengths {
				if l > 0 {
					want[l]++
				}
			}
			if count != want {
				t.Fatalf("lengths %v: counts %v, want %v", ls, count, want)
			}
		}
	}
	if valid < 1000 {
		t.Fatalf("only %d valid codes among the cases", valid)
	}
}

// TestHistogramAndSplit: the eight-table histogram counts as a plain loop
// does, and the eight-at-a-time BF16 split gives every value's exponent
// and other bits, at every length around its steps.
func TestHistogramAndSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 1000, 16384 + 5} {
		raw := make([]byte, 2*n)
		for i := range raw {
			raw[i] = byte(rng.Uint32())
		}
		syms, others := make([]byte, n), make([]byte, n)
		splitBF16(syms, others, raw)
		want := make([]uint64, 256)
		for i := range n {
			v := uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
			if syms[i] != byte(v>>7) || others[i] != byte(Fields[0].otherBits(uint32(v))) {
				t.Fatalf("n %d: value %d (%#04x) split into %#02x, %#02x", n, i, v, syms[i], others[i])
			}
			want[syms[i]]++
		}
		got := make([]uint64, 256)
		histogram(got, syms)
		if !slices.Equal(got, want) {
			t.Fatalf("n %d: histogram differs", n)
		}
		fused := make([]uint64, 256)
		histogramBF16(fused, raw)
		if !slices.Equal(fused, want) {
			t.Fatalf("n %d: the BF16 histogram differs", n)
		}
		only := make([]byte, n)
		splitBF16(nil, only, raw)
		if !bytes.Equal(only, others) {
			t.Fatalf("n %d: other bits alone differ", n)
		}
	}
}

package entropy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// TestLengthsReference: Lengths gives the very lengths of the first
// implementation (lengthsReference), so payloads stay byte for byte what
// earlier builds wrote, on random frequencies of every alphabet size and
// limit and on adversarial ones: ties everywhere, powers of two,
// Fibonacci weights (the deepest unlimited trees), one heavy symbol,
// huge weights, alphabets that just fit the limit and one past it.
func TestLengthsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var cases [][]uint64
	for range 3000 {
		freq := make([]uint64, 1+rng.IntN(MaxSymbols))
		switch rng.IntN(4) {
		case 0: // sparse
			for i := range freq {
				if rng.IntN(3) == 0 {
					freq[i] = uint64(1 + rng.IntN(1000))
				}
			}
		case 1: // peaked, like exponents
			for i := range freq {
				freq[i] = uint64(rng.ExpFloat64() * 1e6 / float64(1+i*i))
			}
		case 2: // few distinct weights: many ties
			for i := range freq {
				freq[i] = uint64(rng.IntN(3))
			}
		default:
			for i := range freq {
				freq[i] = rng.Uint64() >> uint(8+rng.IntN(56))
			}
		}
		cases = append(cases, freq)
	}
	fib := make([]uint64, 60)
	fib[0], fib[1] = 1, 1
	for i := 2; i < len(fib); i++ {
		fib[i] = fib[i-1] + fib[i-2]
	}
	pow := make([]uint64, 63)
	for i := range pow {
		pow[i] = 1 << i
	}
	huge := []uint64{1 << 62, 1 << 62, 1<<62 - 1, 3, 1}
	cases = append(cases, fib, pow, huge, slices.Repeat([]uint64{7}, MaxSymbols), []uint64{0, 0, 5}, []uint64{1, 1},
		append(slices.Repeat([]uint64{1}, 255), 1<<40), []uint64{})
	for i, freq := range cases {
		for _, limit := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 24} {
			want, werr := lengthsReference(freq, limit)
			got, gerr := Lengths(freq, limit)
			if (werr == nil) != (gerr == nil) || !slices.Equal(got, want) {
				t.Fatalf("case %d (%d symbols), limit %d: %v, %v; want %v, %v", i, len(freq), limit, got, gerr, want, werr)
			}
		}
	}
}

// BenchmarkLengths: the code lengths of one tensor's exponent pairs (81
// used symbols, as trained weights' large tensors have) and of 256.
func BenchmarkLengths(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, used := range []int{9, 81, 256} {
		freq := make([]uint64, MaxSymbols)
		for i := range used {
			freq[i] = uint64(rng.ExpFloat64()*1e5) + 1
		}
		for name, f := range map[string]func([]uint64, int) ([]uint8, error){"new": Lengths, "reference": lengthsReference} {
			b.Run(fmt.Sprintf("%d/%s", used, name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := f(freq, MaxLen); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// lengthsReference is the first Lengths, kept to check the one in use
// against, bit for bit: it returns optimal code lengths of at most maxLen bits for the
// symbol frequencies freq (package-merge): the shortest total code length
// any prefix code within the limit achieves. Symbols of frequency zero get
// length zero (no code); a single used symbol gets length 1.
func lengthsReference(freq []uint64, maxLen int) ([]uint8, error) {
	if len(freq) > MaxSymbols || maxLen < 1 || maxLen > 24 {
		return nil, fmt.Errorf("%w: %d symbols, limit %d", ErrCode, len(freq), maxLen)
	}
	type leaf struct {
		sym int
		w   uint64
	}
	var leaves []leaf
	for s, f := range freq {
		if f > 0 {
			leaves = append(leaves, leaf{s, f})
		}
	}
	out := make([]uint8, len(freq))
	switch n := len(leaves); {
	case n == 0:
		return out, nil
	case n == 1:
		out[leaves[0].sym] = 1
		return out, nil
	case n > 1<<maxLen:
		return nil, fmt.Errorf("%w: %d symbols do not fit codes of %d bits", ErrCode, n, maxLen)
	}
	sort.Slice(leaves, func(i, j int) bool {
		if leaves[i].w != leaves[j].w {
			return leaves[i].w < leaves[j].w
		}
		return leaves[i].sym < leaves[j].sym
	})
	// An item is a leaf or a package of two items of the level below
	// (indices into that level's items).
	type item struct {
		w    uint64
		leaf int // index into leaves, or -1 for a package
		a, b int
	}
	n := len(leaves)
	merge := func(prev []item) []item {
		cur := make([]item, 0, n+len(prev)/2)
		i, j := 0, 0
		for i < n || j+1 < len(prev) {
			if j+1 >= len(prev) || i < n && leaves[i].w <= prev[j].w+prev[j+1].w {
				cur = append(cur, item{w: leaves[i].w, leaf: i})
				i++
			} else {
				cur = append(cur, item{w: prev[j].w + prev[j+1].w, leaf: -1, a: j, b: j + 1})
				j += 2
			}
		}
		return cur
	}
	// levels[0] is the deepest (leaves only); each level above merges the
	// leaves with the packages of pairs of the level below.
	levels := make([][]item, maxLen)
	levels[0] = merge(nil)
	for l := 1; l < maxLen; l++ {
		levels[l] = merge(levels[l-1])
	}
	// The 2n-2 lightest items of the top level; a leaf's code length is how
	// often it occurs in them, packages unfolded.
	var visit func(l, k int)
	visit = func(l, k int) {
		it := levels[l][k]
		if it.leaf >= 0 {
			out[leaves[it.leaf].sym]++
			return
		}
		visit(l-1, it.a)
		visit(l-1, it.b)
	}
	for k := range 2*n - 2 {
		visit(maxLen-1, k)
	}
	return out, nil
}

package entropy

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// MaxSymbols is the alphabet size: symbols are bytes.
const MaxSymbols = 256

// ErrCode reports code lengths that do not form a complete prefix code
// within the limit (over-subscribed, or incomplete with more than one
// symbol), or a limit too small for the alphabet.
var ErrCode = errors.New("invalid code lengths")

// Lengths returns optimal code lengths of at most maxLen bits for the
// symbol frequencies freq (package-merge): the shortest total code length
// any prefix code within the limit achieves. Symbols of frequency zero get
// length zero (no code); a single used symbol gets length 1.
func Lengths(freq []uint64, maxLen int) ([]uint8, error) {
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

// Code is a canonical prefix code: symbols ordered by (length, symbol)
// get consecutive codes, shorter ones first.
type Code struct {
	MaxLen  int
	Lengths [MaxSymbols]uint8
	Codes   [MaxSymbols]uint32 // the code of each symbol, its Lengths bits, MSB first
}

// NewCode builds the canonical code of the given lengths (at most maxLen
// bits). The lengths must form a complete prefix code (Kraft sum 1), or
// name a single symbol with length 1.
func NewCode(lengths []uint8, maxLen int) (*Code, error) {
	count, err := checkLengths(lengths, 0, maxLen)
	if err != nil {
		return nil, err
	}
	c := &Code{MaxLen: maxLen}
	copy(c.Lengths[:], lengths)
	var next [26]uint32
	code := uint32(0)
	for l := 1; l <= maxLen; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	for s := range MaxSymbols {
		if l := c.Lengths[s]; l > 0 {
			c.Codes[s] = next[l]
			next[l]++
		}
	}
	return c, nil
}

// checkLengths checks the code lengths of symbols first, first + 1, ...
// (every other symbol has none) as NewCode does, without building the
// code (a payload's head checked before a device decodes it), and
// returns how many symbols have each length.
func checkLengths(lengths []uint8, first, maxLen int) (count [25]uint32, err error) {
	if first+len(lengths) > MaxSymbols || maxLen < 1 || maxLen > 24 {
		return count, fmt.Errorf("%w: %d lengths, limit %d", ErrCode, first+len(lengths), maxLen)
	}
	for s, l := range lengths {
		if int(l) > maxLen {
			return count, fmt.Errorf("%w: symbol %d has %d bits, the limit is %d", ErrCode, first+s, l, maxLen)
		}
		count[l]++
	}
	used := len(lengths) - int(count[0])
	count[0] = 0
	// Kraft: sum of 2^(maxLen-l) must be exactly 2^maxLen (one symbol:
	// half of it, a code of one bit whose other value is never used).
	var kraft uint64
	for l := 1; l <= maxLen; l++ {
		kraft += uint64(count[l]) << (maxLen - l)
	}
	full := uint64(1) << maxLen
	if used == 1 && kraft == full/2 && count[1] == 1 {
		kraft = full
	}
	if used > 0 && kraft != full {
		return count, fmt.Errorf("%w: Kraft sum %d/%d", ErrCode, kraft, full)
	}
	return count, nil
}

// Bits returns the bits the code spends on symbols of frequencies freq.
func (c *Code) Bits(freq []uint64) uint64 {
	var b uint64
	for s, f := range freq {
		b += f * uint64(c.Lengths[s])
	}
	return b
}

// EntropyBits returns the Shannon bound, in bits, of symbols with
// frequencies freq: what no code of these symbols coded one by one
// beats.
func EntropyBits(freq []uint64) float64 {
	var total uint64
	for _, f := range freq {
		total += f
	}
	var bits float64
	for _, f := range freq {
		if f > 0 {
			bits -= float64(f) * math.Log2(float64(f)/float64(total))
		}
	}
	return bits
}

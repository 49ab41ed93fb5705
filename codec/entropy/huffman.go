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
	// An item is a leaf or a package of two items of the level below; it
	// counts how often each leaf occurs in it.
	type item struct {
		w     uint64
		count []uint16 // per leaf index
	}
	n := len(leaves)
	single := func(i int) item {
		c := make([]uint16, n)
		c[i] = 1
		return item{leaves[i].w, c}
	}
	var prev []item // the packages of the level below
	for range maxLen - 1 {
		// This level's items: the leaves merged with the packages made
		// from the level below, in weight order.
		cur := make([]item, 0, n+len(prev))
		i, j := 0, 0
		for i < n || j < len(prev) {
			if j == len(prev) || i < n && leaves[i].w <= prev[j].w {
				cur = append(cur, single(i))
				i++
			} else {
				cur = append(cur, prev[j])
				j++
			}
		}
		// Package pairs for the level above.
		next := make([]item, 0, len(cur)/2)
		for k := 0; k+1 < len(cur); k += 2 {
			c := make([]uint16, n)
			for x := range c {
				c[x] = cur[k].count[x] + cur[k+1].count[x]
			}
			next = append(next, item{cur[k].w + cur[k+1].w, c})
		}
		prev = next
	}
	// The top level: leaves and the packages, the 2n-2 lightest items.
	top := make([]item, 0, n+len(prev))
	i, j := 0, 0
	for i < n || j < len(prev) {
		if j == len(prev) || i < n && leaves[i].w <= prev[j].w {
			top = append(top, single(i))
			i++
		} else {
			top = append(top, prev[j])
			j++
		}
	}
	for _, it := range top[:2*n-2] {
		for x, c := range it.count {
			out[leaves[x].sym] += uint8(c)
		}
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
	if len(lengths) > MaxSymbols || maxLen < 1 || maxLen > 24 {
		return nil, fmt.Errorf("%w: %d lengths, limit %d", ErrCode, len(lengths), maxLen)
	}
	c := &Code{MaxLen: maxLen}
	var count [25]uint32
	used := 0
	for s, l := range lengths {
		if int(l) > maxLen {
			return nil, fmt.Errorf("%w: symbol %d has %d bits, the limit is %d", ErrCode, s, l, maxLen)
		}
		c.Lengths[s] = l
		if l > 0 {
			count[l]++
			used++
		}
	}
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
		return nil, fmt.Errorf("%w: Kraft sum %d/%d", ErrCode, kraft, full)
	}
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

package entropy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	stdbits "math/bits"
	"slices"
	"sync"
)

// MaxSymbols is the alphabet size: symbols are bytes.
const MaxSymbols = 256

// maxLimit is the longest code length limit Lengths and NewCode take.
const maxLimit = 24

// ErrCode reports code lengths that do not form a complete prefix code
// within the limit (over-subscribed, or incomplete with more than one
// symbol), or a limit too small for the alphabet.
var ErrCode = errors.New("invalid code lengths")

// Lengths returns optimal code lengths of at most maxLen bits for the
// symbol frequencies freq (package-merge): the shortest total code length
// any prefix code within the limit achieves. Symbols of frequency zero get
// length zero (no code); a single used symbol gets length 1.
//
// Each level's items are the leaves (symbols by weight, then symbol) and
// the packages of pairs of the level below, merged by weight (a leaf
// first on ties); the lightest 2n-2 items of the top level, packages
// unfolded, count how often each leaf occurs: its length. Packages are
// made of consecutive pairs from the lightest, so the items taken at each
// level are a prefix of it, whose leaves are the lightest ones: a level
// only needs to know which of its items are leaves. It allocates only
// its result.
func Lengths(freq []uint64, maxLen int) ([]uint8, error) {
	if len(freq) > MaxSymbols || maxLen < 1 || maxLen > maxLimit {
		return nil, fmt.Errorf("%w: %d symbols, limit %d", ErrCode, len(freq), maxLen)
	}
	type leaf struct {
		w   uint64
		sym int
	}
	var leafBuf [MaxSymbols]leaf
	leaves := leafBuf[:0]
	for s, f := range freq {
		if f > 0 {
			leaves = append(leaves, leaf{f, s})
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
	slices.SortFunc(leaves, func(a, b leaf) int { return cmp.Or(cmp.Compare(a.w, b.w), cmp.Compare(a.sym, b.sym)) })
	n := len(leaves)
	// A level has fewer than 2n items: its n leaves and fewer than n
	// packages. Bit k of isLeaf[l] says whether item k of level l is a
	// leaf; prev and cur hold the weights of the level below and this one.
	var isLeaf [maxLimit][2 * MaxSymbols / 64]uint64
	s := levelsPool.Get().(*[2][2 * MaxSymbols]uint64)
	defer levelsPool.Put(s)
	prev, cur := s[0][:0], s[1][:0]
	for l := range maxLen {
		cur = cur[:0]
		i, j := 0, 0
		for i < n || j+1 < len(prev) {
			if j+1 >= len(prev) || i < n && leaves[i].w <= prev[j]+prev[j+1] {
				isLeaf[l][len(cur)/64] |= 1 << (len(cur) % 64)
				cur = append(cur, leaves[i].w)
				i++
			} else {
				cur = append(cur, prev[j]+prev[j+1])
				j += 2
			}
		}
		prev, cur = cur, prev
	}
	// Top down: the prefix taken at a level holds some leaves (each
	// gains a bit) and some packages, which take twice as many items of
	// the level below. A level holds what is taken of it: the top one
	// at least 2n-2 items (n <= 2^maxLen), each one below at least two
	// for each package above.
	take := 2*n - 2
	for l := maxLen - 1; l >= 0 && take > 0; l-- {
		leavesIn := 0
		for w, bits := range isLeaf[l][:(take+63)/64] {
			if rest := take - 64*w; rest < 64 {
				bits &= 1<<rest - 1
			}
			leavesIn += stdbits.OnesCount64(bits)
		}
		for k := range leavesIn {
			out[leaves[k].sym]++
		}
		take = 2 * (take - leavesIn)
	}
	return out, nil
}

// levelsPool holds Lengths' two levels of weights.
var levelsPool = sync.Pool{New: func() any { return new([2][2 * MaxSymbols]uint64) }}

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
	if first+len(lengths) > MaxSymbols || maxLen < 1 || maxLen > maxLimit {
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

//go:build amd64 && !noasm

package entropy

import "golang.org/x/sys/cpu"

// useAVX2 selects the vector rebuild and split of BF16 values; tests
// turn it off to check the pure-Go loops too.
var useAVX2 = cpu.X86.HasAVX2

// rebuildBF16AVX2 rebuilds groups of 16 BF16 values from 16 exponent
// symbols (syms) and 16 sign-and-mantissa bytes (others) each, into 32
// bytes of dst a group.
//
//go:noescape
func rebuildBF16AVX2(dst, syms, others *byte, groups int)

// rebuildBF16 rebuilds as many whole groups of 16 values of dst (2 bytes
// each) from syms and others as the vector loop takes, and returns the
// values done.
func rebuildBF16(dst, syms, others []byte) int {
	n := min(len(syms), len(others), len(dst)/2) / 16
	if !useAVX2 || n == 0 {
		return 0
	}
	rebuildBF16AVX2(&dst[0], &syms[0], &others[0], n)
	return 16 * n
}

// splitExponentsAVX2 and splitOthersAVX2 split groups of 32 BF16 values
// (64 bytes of raw a group) into their 32 exponent symbols or their 32
// sign-and-mantissa bytes.
//
//go:noescape
func splitExponentsAVX2(dst, raw *byte, groups int)

//go:noescape
func splitOthersAVX2(dst, raw *byte, groups int)

// splitBF16Vec splits as many whole groups of 32 values of raw as the
// vector loops take into syms and others (either may be nil; each holds
// a byte a value) and returns the values done.
func splitBF16Vec(syms, others, raw []byte) int {
	n := len(raw) / 64
	if syms != nil {
		n = min(n, len(syms)/32)
	}
	if others != nil {
		n = min(n, len(others)/32)
	}
	if !useAVX2 || n == 0 {
		return 0
	}
	if syms != nil {
		splitExponentsAVX2(&syms[0], &raw[0], n)
	}
	if others != nil {
		splitOthersAVX2(&others[0], &raw[0], n)
	}
	return 32 * n
}

// laneBitsConsts is laneBitsAVX2's tables and constants, at the offsets
// its assembly reads: the code lengths of symbols lo to lo+63 (0: none),
// then lo, 16 and 0x70 in every byte of 32.
type laneBitsConsts struct {
	tabs         [64]byte
	lo, c16, c70 [32]byte
}

//go:noescape
func laneBitsAVX2(syms *byte, blocks int, c *laneBitsConsts, bits *[32]uint16) bool

// laneBitsVec adds to laneBits each lane's code bits of a chunk of syms
// coded in Lanes lanes, from tab (code<<5 | length a symbol), with vector
// instructions, and reports whether it could: every symbol has a code,
// the coded symbols lie within 64 of each other, codes are at most 15
// bits, and the chunk is whole blocks of 16 rows, at most 4096 rows (so
// that a lane's 16-bit sum cannot overflow).
func laneBitsVec(tab *[MaxSymbols]uint32, syms []byte, laneBits *[Lanes]uint64) bool {
	if !useAVX2 || len(syms) == 0 || len(syms)%(16*Lanes) != 0 || len(syms) > 4096*Lanes {
		return false
	}
	lo, hi := -1, -1
	for s, e := range tab {
		if e != 0 {
			if e&31 > 15 {
				return false
			}
			if lo < 0 {
				lo = s
			}
			hi = s
		}
	}
	if lo < 0 || hi-lo >= 64 {
		return false
	}
	var c laneBitsConsts
	for i := range c.tabs {
		if lo+i < MaxSymbols {
			c.tabs[i] = byte(tab[lo+i] & 31)
		}
	}
	for i := range 32 {
		c.lo[i], c.c16[i], c.c70[i] = byte(lo), 16, 0x70
	}
	var bits [32]uint16
	if !laneBitsAVX2(&syms[0], len(syms)/(16*Lanes), &c, &bits) {
		return false
	}
	for k, b := range bits {
		laneBits[k] += uint64(b)
	}
	return true
}

// shape is a vector rebuild's group: the values it takes, the bytes of
// output it writes and of other bits it consumes, and the bytes of other
// bits its loads read from the group's start.
type shape struct{ values, out, in, load int }

// vecGroups returns how many groups of shape s a vector rebuild may take
// of syms, writing dst and reading others: as many as all three hold,
// every load inside others; 0 without AVX2.
func vecGroups(dst, others, syms []byte, s shape) int {
	if !useAVX2 || len(others) < s.load {
		return 0
	}
	return min(len(syms)/s.values, len(dst)/s.out, (len(others)-s.load)/s.in+1)
}

// f16Consts is unpackF16AVX2's constants, at the offsets its assembly
// reads: the byte shuffle, the dword shifts and the mantissa mask.
type f16Consts struct {
	shuffle [32]byte
	shifts  [8]uint32
	mask    [8]uint32
}

var f16c = func() *f16Consts {
	c := new(f16Consts)
	for j := range 8 {
		k, r := 11*j/8, 11*j%8
		for b := range 4 {
			c.shuffle[4*j+b] = byte(k + 3 - b) // lane-relative: both halves hold the same 16 bytes
		}
		c.shifts[j] = uint32(r)
		c.mask[j] = 0x3FF
	}
	return c
}()

//go:noescape
func unpackF16AVX2(dst, others, syms *byte, groups int, c *f16Consts)

// unpackF16Vec rebuilds F16 values from their exponent symbols and other
// bits (11 a value, packed) eight at a time with AVX2, as far as 16-byte
// loads stay inside others, and returns the values done.
func unpackF16Vec(dst, others, syms []byte) int {
	g := vecGroups(dst, others, syms, shape{values: 8, out: 16, in: 11, load: 16})
	if g > 0 {
		unpackF16AVX2(&dst[0], &others[0], &syms[0], g, f16c)
	}
	return 8 * g
}

// f32Consts is unpackF32AVX2's constants: the byte shuffle and the
// mantissa mask.
type f32Consts struct {
	shuffle [32]byte
	mask    [8]uint32
}

var f32c = func() *f32Consts {
	c := new(f32Consts)
	for j := range 8 {
		k := 3 * (j % 4) // lane-relative: the high half loads from byte 12
		c.shuffle[4*j], c.shuffle[4*j+1], c.shuffle[4*j+2], c.shuffle[4*j+3] = byte(k+2), byte(k+1), byte(k), 0x80
		c.mask[j] = 0x7FFFFF
	}
	return c
}()

//go:noescape
func unpackF32AVX2(dst, others, syms *byte, groups int, c *f32Consts)

//go:noescape
func unpackE4M3AVX2(dst, others, syms *byte, groups int)

// unpackF32Vec rebuilds F32 values from their exponent symbols and other
// bits (three bytes a value) eight at a time with AVX2, as far as its
// loads stay inside others, and returns the values done.
func unpackF32Vec(dst, others, syms []byte) int {
	g := vecGroups(dst, others, syms, shape{values: 8, out: 32, in: 24, load: 28})
	if g > 0 {
		unpackF32AVX2(&dst[0], &others[0], &syms[0], g, f32c)
	}
	return 8 * g
}

// unpackE4M3Vec rebuilds F8_E4M3 values from their exponent symbols and
// other bits (a nibble a value) 32 at a time with AVX2 and returns the
// values done.
func unpackE4M3Vec(dst, others, syms []byte) int {
	g := vecGroups(dst, others, syms, shape{values: 32, out: 32, in: 16, load: 16})
	if g > 0 {
		unpackE4M3AVX2(&dst[0], &others[0], &syms[0], g)
	}
	return 32 * g
}

// e5m2Consts is unpackE5M2AVX2's constants: the byte shuffle and the
// word multipliers.
type e5m2Consts struct {
	shuffle [32]byte
	mul     [16]uint16
}

var e5m2c = func() *e5m2Consts {
	c := new(e5m2Consts)
	for j := range 16 {
		k, r := 3*j/8, 3*j%8
		c.shuffle[2*j], c.shuffle[2*j+1] = byte(k+1), byte(k) // both halves hold the same 16 bytes
		c.mul[j] = 1 << r
	}
	return c
}()

//go:noescape
func unpackE5M2AVX2(dst, others, syms *byte, groups int, c *e5m2Consts)

// unpackE5M2Vec rebuilds F8_E5M2 values from their exponent symbols and
// other bits (3 a value, packed) 16 at a time with AVX2, as far as its
// 16-byte loads stay inside others, and returns the values done.
func unpackE5M2Vec(dst, others, syms []byte) int {
	g := vecGroups(dst, others, syms, shape{values: 16, out: 16, in: 6, load: 16})
	if g > 0 {
		unpackE5M2AVX2(&dst[0], &others[0], &syms[0], g, e5m2c)
	}
	return 16 * g
}

// f32SplitConsts is splitF32AVX2's constants.
type f32SplitConsts struct {
	syms, others [32]byte
	mant, sign   [8]uint32
	perm         [8]uint32
}

var f32sc = func() *f32SplitConsts {
	c := new(f32SplitConsts)
	for i := range c.syms {
		c.syms[i], c.others[i] = 0x80, 0x80
	}
	for h := range 2 { // each 128-bit half, lane-relative
		for j := range 4 {
			c.syms[16*h+j] = byte(4 * j) // the exponent, shifted down to the dword's low byte
			c.others[16*h+3*j], c.others[16*h+3*j+1], c.others[16*h+3*j+2] = byte(4*j+2), byte(4*j+1), byte(4*j)
		}
	}
	for j := range 8 {
		c.mant[j], c.sign[j] = 0x7FFFFF, 0x800000
	}
	c.perm[0], c.perm[1] = 0, 4
	return c
}()

//go:noescape
func splitF32AVX2(syms, others, raw *byte, groups int, c *f32SplitConsts)

// splitF32Vec writes the exponents of the F32 values of raw to syms and
// their other bits (three bytes a value) to others, either of which may
// be nil, eight values at a time with AVX2, and returns the values done
// (others' stores pass the group by 4 bytes, so the last group is left
// to the caller unless others has room).
func splitF32Vec(syms, others, raw []byte) int {
	if !useAVX2 || (syms == nil && others == nil) {
		return 0
	}
	groups := len(raw) / 32
	if syms != nil {
		groups = min(groups, len(syms)/8)
	}
	if others != nil {
		groups = min(groups, (len(others)-4)/24)
	}
	if groups <= 0 {
		return 0
	}
	var sp, op *byte
	if syms != nil {
		sp = &syms[0]
	}
	if others != nil {
		op = &others[0]
	}
	splitF32AVX2(sp, op, &raw[0], groups, f32sc)
	return 8 * groups
}

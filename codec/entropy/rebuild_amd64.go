//go:build amd64 && !noasm

package entropy

import "golang.org/x/sys/cpu"

// useAVX2 selects the vector rebuild of BF16 values; tests turn it off to
// check the pure-Go loop too.
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

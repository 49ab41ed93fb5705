//go:build amd64 && !noasm

package codec

import "golang.org/x/sys/cpu"

// encodeAVX2 encodes groups of 32 values (64 bytes of src) into 32
// sign-and-mantissa bytes of sm and 16 code bytes of nib, stopping before
// the first group with an exponent outside the codebook. It returns the
// number of groups encoded.
//
//go:noescape
func encodeAVX2(sm, nib, src *byte, groups int, tab *encTables) int

// encodeAVX512 is encodeAVX2's AVX-512 VBMI form: groups of 64 values,
// exponent codes looked up in the 256-byte code table.
//
//go:noescape
func encodeAVX512(sm, nib, src *byte, groups int, codes *[256]byte) int

// useAVX512 selects encodeAVX512 (tests turn it off to cover the AVX2 loop).
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VBMI

// encodeGroups encodes whole groups of values with vector instructions
// until a group needs an escape, and returns the number of values done.
func encodeGroups(sm, nib, src []byte, tab *encTables) int {
	if !useAVX2 {
		return 0
	}
	done := 0
	if useAVX512 {
		if g := min(len(sm)/64, len(nib)/32, len(src)/128); g > 0 {
			done = 64 * encodeAVX512(&sm[0], &nib[0], &src[0], g, &tab.codeTable)
		}
		sm, nib, src = sm[done:], nib[done/2:], src[2*done:]
	}
	if g := min(len(sm)/32, len(nib)/16, len(src)/64); g > 0 {
		done += 32 * encodeAVX2(&sm[0], &nib[0], &src[0], g, tab)
	}
	return done
}

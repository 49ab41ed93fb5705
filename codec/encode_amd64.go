//go:build amd64 && !noasm

package codec

// encodeAVX2 encodes groups of 32 values (64 bytes of src) into 32
// sign-and-mantissa bytes of sm and 16 code bytes of nib, stopping before
// the first group with an exponent outside the codebook. It returns the
// number of groups encoded.
//
//go:noescape
func encodeAVX2(sm, nib, src *byte, groups int, tab *encTables) int

// encodeGroups encodes whole groups of 32 values with vector instructions
// until a group needs an escape, and returns the number of values done.
func encodeGroups(sm, nib, src []byte, tab *encTables) int {
	groups := min(len(sm)/32, len(nib)/16, len(src)/64)
	if !useAVX2 || groups == 0 {
		return 0
	}
	return 32 * encodeAVX2(&sm[0], &nib[0], &src[0], groups, tab)
}

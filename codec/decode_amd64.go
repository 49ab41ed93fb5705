//go:build amd64 && !noasm

package codec

import "golang.org/x/sys/cpu"

// useAVX2 selects the AVX2 decode loop; tests turn it off to check the
// pure-Go loop too.
var useAVX2 = cpu.X86.HasAVX2

// decodeAVX2 decodes groups of 16 values: 16 sign-and-mantissa bytes from
// sm and 8 code bytes from nib per group, into 32 bytes of out, looking
// exponents up in table.
//
//go:noescape
func decodeAVX2(out, sm, nib *byte, groups int, table *Codebook)

// decodeGroups decodes as many whole groups of 16 values as it can with
// vector instructions and returns the number of values done.
func decodeGroups(out, sm, nib []byte, cb *Codebook) int {
	groups := len(sm) / 16
	if !useAVX2 || groups == 0 {
		return 0
	}
	_ = out[32*groups-1]
	_ = nib[8*groups-1]
	decodeAVX2(&out[0], &sm[0], &nib[0], groups, cb)
	return 16 * groups
}

//go:build !amd64 || noasm

package codec

// encodeGroups has no vector loop on this platform.
func encodeGroups(sm, nib, src []byte, tab *encTables) int { return 0 }

// useAVX512 is false where there is no assembly.
var useAVX512 = false

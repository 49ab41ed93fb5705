//go:build !amd64 || noasm

package codec

// useAVX2 is false where there is no assembly.
var useAVX2 = false

// decodeGroups has no vector loop on this platform.
func decodeGroups(out, sm, nib []byte, cb *Codebook) int { return 0 }

// addVector has no vector loop on this platform.
func (h *Histogram) addVector(src []byte) int { return 0 }

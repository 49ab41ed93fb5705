//go:build !amd64 || noasm

package entropy

// useAVX2 is false where there is no assembly.
var useAVX2 = false

// rebuildBF16 does nothing where there is no assembly: the caller's Go
// loop rebuilds every value.
func rebuildBF16(dst, syms, others []byte) int { return 0 }

// splitBF16Vec does nothing where there is no assembly.
func splitBF16Vec(syms, others, raw []byte) int { return 0 }

// laneBitsVec does nothing where there is no assembly.
func laneBitsVec(tab *[MaxSymbols]uint32, syms []byte, laneBits *[Lanes]uint64) bool { return false }

// unpackF16Vec does nothing where there is no assembly.
func unpackF16Vec(dst, others, syms []byte) int { return 0 }

// unpackF32Vec, unpackE4M3Vec and unpackE5M2Vec do nothing where there
// is no assembly.
func unpackF32Vec(dst, others, syms []byte) int  { return 0 }
func unpackE4M3Vec(dst, others, syms []byte) int { return 0 }
func unpackE5M2Vec(dst, others, syms []byte) int { return 0 }

// splitF32Vec does nothing where there is no assembly.
func splitF32Vec(syms, others, raw []byte) int { return 0 }

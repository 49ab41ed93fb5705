//go:build !amd64 || noasm

package entropy

// useCodeAsm is false where there is no assembly.
var useCodeAsm = false

// codeLanes is codeLanesGo where there is no assembly.
func codeLanes(out []byte, pos int, acc uint64, nb uint, tab *[MaxSymbols]uint32, syms []byte, L int, ends *[Lanes]uint64) (int, uint64, uint, bool) {
	return codeLanesGo(out, pos, acc, nb, tab, syms, L, ends)
}

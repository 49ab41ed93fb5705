//go:build amd64 && !noasm

package entropy

import "golang.org/x/sys/cpu"

// useCodeAsm selects the assembly lane coder where the processor has
// BMI2's shifts; tests turn it off to check the Go loop too.
var useCodeAsm = cpu.X86.HasBMI2

// codeLanesBMI2 is codeLanesGo's loop in assembly (code_amd64.s).
//
//go:noescape
func codeLanesBMI2(out *byte, pos int, acc uint64, nb uint, tab *[MaxSymbols]uint32, syms *byte, n, L int, ends *[Lanes]uint64) (rpos int, racc uint64, rnb uint, ok bool)

// codeLanes is codeLanesGo, in assembly where it can be: out must have
// room for codes of quadBits bits for every symbol, and 8 bytes more.
func codeLanes(out []byte, pos int, acc uint64, nb uint, tab *[MaxSymbols]uint32, syms []byte, L int, ends *[Lanes]uint64) (int, uint64, uint, bool) {
	n := len(syms)
	if !useCodeAsm || n == 0 || L < 1 || L > Lanes || pos < 0 || nb > 7 || len(out)-pos < (quadBits*n+7)/8+16 {
		return codeLanesGo(out, pos, acc, nb, tab, syms, L, ends)
	}
	return codeLanesBMI2(&out[0], pos, acc, nb, tab, &syms[0], n, L, ends)
}

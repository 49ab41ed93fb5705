//go:build amd64 && !noasm

package crc32c

import "golang.org/x/sys/cpu"

// canFold reports whether the processor has what the folding takes:
// PCLMULQDQ, SSE4.1 and SSE4.2's CRC32 instruction.
var canFold = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41 && cpu.X86.HasSSE42

// canFoldWide reports whether it also has AVX-512 with VPCLMULQDQ, which
// folds four 128-bit lanes a register (fold256).
var canFoldWide = canFold && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

// foldRaw returns the raw CRC-32C (state r, no inversions) of p, whose
// length is a nonzero multiple of 64; wide folds its 256-byte blocks
// with fold256 (only where canFoldWide).
func foldRaw(r uint32, p []byte, wide bool) uint32 {
	if n := len(p) / 256; wide && n > 0 {
		r = fold256(r, &p[0], n, &foldWideK)
		if p = p[n*256:]; len(p) == 0 {
			return r
		}
	}
	return fold64(r, &p[0], len(p)/64, &foldK)
}

// fold64 is foldRaw in assembly (fold_amd64.s): n blocks of 64 bytes.
//
//go:noescape
func fold64(r uint32, p *byte, n int, k *[4]uint64) uint32

// fold256 is foldRaw with AVX-512 (fold_amd64.s): n blocks of 256 bytes.
//
//go:noescape
func fold256(r uint32, p *byte, n int, k *[6]uint64) uint32

//go:build amd64 && !noasm

package crc32c

import "golang.org/x/sys/cpu"

// canFold reports whether the processor has what the folding takes:
// PCLMULQDQ, SSE4.1 and SSE4.2's CRC32 instruction.
var canFold = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41 && cpu.X86.HasSSE42

// foldRaw returns the raw CRC-32C (state r, no inversions) of p, whose
// length is a nonzero multiple of 64.
func foldRaw(r uint32, p []byte) uint32 {
	return fold64(r, &p[0], len(p)/64, &foldK)
}

// fold64 is foldRaw in assembly (fold_amd64.s): n blocks of 64 bytes.
//
//go:noescape
func fold64(r uint32, p *byte, n int, k *[4]uint64) uint32

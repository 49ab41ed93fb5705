package codec

import (
	"math/rand/v2"
	"testing"
)

// TestPlainChecksum: a checksum folded from pieces as a payload's (the
// checksum field's bytes taken as zero) becomes the bytes' plain CRC-32C
// from their head alone, for sizes around the field and far past it, the
// bytes cut into pieces anywhere.
func TestPlainChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 57, 59, 60, 61, 64, 1000, 1 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		cut := r.IntN(n + 1)
		folded := CombineChecksums(PieceChecksum(b[:cut], 0), PieceChecksum(b[cut:], uint64(cut)), uint64(n-cut))
		if got, want := PlainChecksum(folded, b[:min(n, HeaderSize)], uint64(n)), UpdateChecksum(0, b); got != want {
			t.Errorf("%d bytes cut at %d: %08x, want %08x", n, cut, got, want)
		}
	}
}

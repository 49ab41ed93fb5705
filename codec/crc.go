package codec

import (
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/internal/crc32c"
)

// CRC-32C concatenation. The encoder computes the CRC of each chunk while
// encoding, in parallel, and combines them in file order at Close, so no
// pass over the written payload is needed. This is the method of zlib's
// crc32_combine: multiplication modulo the CRC polynomial, with powers
// x^(2^k) precomputed.

const castagnoliReflected = 0x82F63B78

// multModP returns a*b modulo the polynomial, in the reflected bit order.
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
}

// powers[k] is x^(2^k) modulo the polynomial.
var powers = sync.OnceValue(func() *[32]uint32 {
	var t [32]uint32
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return &t
})

// x8n returns x^(8n) modulo the polynomial: the effect of n zero bytes.
func x8n(n uint64) uint32 {
	t := powers()
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; k++ {
		if n&1 != 0 {
			p = multModP(t[k&31], p)
		}
		n >>= 1
	}
	return p
}

// crcCombine returns the CRC-32C of A followed by B, given crc(A), crc(B)
// and len(B).
func crcCombine(crcA, crcB uint32, lenB uint64) uint32 {
	return multModP(x8n(lenB), crcA) ^ crcB
}

// CombineChecksums returns the CRC-32C of A followed by B from crc(A),
// crc(B) and len(B), so that pieces of a payload read in parallel can be
// checked without a second pass.
func CombineChecksums(crcA, crcB uint32, lenB uint64) uint32 { return crcCombine(crcA, crcB, lenB) }

// PieceChecksum returns the CRC-32C of piece p, which starts at offset off
// of a payload, taking the header's checksum field as zero as Checksum does.
// Folding the pieces in order with CombineChecksums gives Checksum.
func PieceChecksum(p []byte, off uint64) uint32 {
	lo, hi := uint64(offChecksum), uint64(offChecksum+4)
	end := off + uint64(len(p))
	if end <= lo || off >= hi {
		return crc32c.Update(0, p)
	}
	var zero [4]byte
	a := min(lo, end) - min(lo, off) // bytes before the field
	crc := crc32c.Update(0, p[:a])
	zs := max(off, lo) - off
	ze := min(end, hi) - off
	crc = crc32c.Update(crc, zero[:ze-zs])
	return crc32c.Update(crc, p[ze:])
}

// checksumPiece is the bytes a goroutine of ChecksumParallel takes at a
// time.
const checksumPiece = 4 << 20

// ChecksumParallel returns Checksum(p) computed on up to workers
// goroutines: pieces of checksumPiece bytes at once, folded in order with
// CombineChecksums. A payload of less than two pieces, or one worker,
// takes the caller's goroutine alone.
func ChecksumParallel(p []byte, workers int) uint32 {
	n := (len(p) + checksumPiece - 1) / checksumPiece
	if workers <= 1 || n < 2 {
		return Checksum(p)
	}
	crcs := make([]uint32, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				lo := i * checksumPiece
				crcs[i] = PieceChecksum(p[lo:min(len(p), lo+checksumPiece)], uint64(lo))
			}
		})
	}
	wg.Wait()
	crc := crcs[0]
	for i := 1; i < n; i++ {
		lo := i * checksumPiece
		crc = CombineChecksums(crc, crcs[i], uint64(min(len(p), lo+checksumPiece)-lo))
	}
	return crc
}

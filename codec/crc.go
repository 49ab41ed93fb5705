package codec

import (
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// CRC-32C concatenation. The encoder computes the CRC of each chunk while
// encoding, in parallel, and combines them in file order at Close, so no
// pass over the written payload is needed (crc32c.Combine: zlib's
// crc32_combine).

// UpdateChecksum returns the CRC-32C (Castagnoli) of crc's bytes followed
// by p: the checksum every format here uses, for callers that sum bytes
// before they are a payload (a tensor's values as they are read).
func UpdateChecksum(crc uint32, p []byte) uint32 { return crc32c.Update(crc, p) }

// CombineChecksums returns the CRC-32C of A followed by B from crc(A),
// crc(B) and len(B), so that pieces of a payload read in parallel can be
// checked without a second pass.
func CombineChecksums(crcA, crcB uint32, lenB uint64) uint32 { return crc32c.Combine(crcA, crcB, lenB) }

// PlainChecksum turns sum, the checksum of size bytes folded from their
// pieces as a payload's (PieceChecksum: the bytes where a payload's
// checksum field lies taken as zero), into their plain CRC-32C, from head,
// their first bytes (at least to the field's end, or all of them). The
// CRC is linear, so only the field's bytes need summing again: a raw
// object streamed as a payload's pieces is checked without a second pass.
func PlainChecksum(sum uint32, head []byte, size uint64) uint32 {
	h := head[:min(uint64(len(head)), offChecksum+4, size)]
	return sum ^ CombineChecksums(PieceChecksum(h, 0)^UpdateChecksum(0, h), 0, size-uint64(len(h)))
}

// PieceChecksum returns the CRC-32C of piece p, which starts at offset off
// of a payload, taking the header's checksum field as zero as Checksum does.
// Folding the pieces in order with CombineChecksums gives Checksum.
func PieceChecksum(p []byte, off uint64) uint32 { return UpdatePieceChecksum(0, p, off) }

// UpdatePieceChecksum returns the checksum of the bytes before piece p
// (whose checksum as a piece is crc) followed by p, which starts at
// offset off of a payload: PieceChecksum of the two pieces as one. It
// lets a piece that arrives in order be checksummed span by span.
func UpdatePieceChecksum(crc uint32, p []byte, off uint64) uint32 {
	lo, hi := uint64(offChecksum), uint64(offChecksum+4)
	end := off + uint64(len(p))
	if end <= lo || off >= hi {
		return crc32c.Update(crc, p)
	}
	var zero [4]byte
	a := min(lo, end) - min(lo, off) // bytes before the field
	crc = crc32c.Update(crc, p[:a])
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

package codec

import "fmt"

// Every reader of a payload checks it the same way, through this file: the
// header's size against the bytes read, the checksum of those bytes
// against the header's, and the value count against the tensor's. Pieces
// read in parallel are checksummed where they land (PieceSums) and folded
// in order here, so no caller combines CRCs itself.

// CheckPayload checks a payload's header h against the payload it came
// with: size bytes whose checksum is sum, decoding to a tensor of values
// values (0: not checked). Errors say what was found and what was wanted,
// and match ErrCorrupt, ErrChecksum or ErrSize.
func CheckPayload(h *Header, size uint64, sum uint32, values uint64) error {
	switch {
	case h.Size != size:
		return corrupt(offSize, -1, "header says %d bytes, payload has %d", h.Size, size)
	case sum != h.Checksum:
		return checksumError(sum, h.Checksum)
	case values != 0 && h.Values != values:
		return fmt.Errorf("%w: payload decodes to %d values, the tensor has %d", ErrSize, h.Values, values)
	}
	return nil
}

// PieceSums gathers the checksums of a payload's pieces of piece bytes
// each (the last one shorter), set in any order by the goroutines that
// read them, and folds them into the payload's checksum.
type PieceSums struct {
	size, piece uint64
	sums        []uint32
}

// NewPieceSums returns the sums of a payload of size bytes read in pieces
// of piece bytes.
func NewPieceSums(size, piece uint64) *PieceSums {
	return &PieceSums{size: size, piece: piece, sums: make([]uint32, (size+piece-1)/piece)}
}

// Pieces returns the number of pieces.
func (p *PieceSums) Pieces() int { return len(p.sums) }

// Span returns the offset and length of piece i.
func (p *PieceSums) Span(i int) (off, n uint64) {
	off = uint64(i) * p.piece
	return off, min(p.piece, p.size-off)
}

// Set records the checksum of piece i: PieceChecksum of its bytes, or the
// sums of its sub-pieces folded with CombineChecksums.
func (p *PieceSums) Set(i int, sum uint32) { p.sums[i] = sum }

// Sum folds the pieces' checksums in order into the payload's.
func (p *PieceSums) Sum() uint32 {
	var sum uint32
	for i, c := range p.sums {
		_, n := p.Span(i)
		sum = CombineChecksums(sum, c, n)
	}
	return sum
}

// Check checks header h against the pieces (CheckPayload).
func (p *PieceSums) Check(h *Header, values uint64) error {
	return CheckPayload(h, p.size, p.Sum(), values)
}

// CheckRecorded checks a payload's checksum, its header's (checked
// against its bytes), against the one the cache's index records (0: none
// recorded, as in indexes older than the field): a payload rewritten with
// a checksum of its own fails here, since the index's own hash covers
// what it records.
func CheckRecorded(got, recorded uint32) error {
	if recorded == 0 || got == recorded {
		return nil
	}
	return fmt.Errorf("%w: the payload's checksum is %08x, the cache's index records %08x", ErrChecksum, got, recorded)
}

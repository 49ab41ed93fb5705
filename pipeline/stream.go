package pipeline

import (
	"bytes"
	"fmt"
	"io"

	"github.com/splitzip/splitzip/shardcache"
)

// segmentBytes is how much of a tensor each compress pass handles at a
// time: small enough that the hash, histogram and CRC sweeps find it in
// L2, and a multiple of the chunk size.
const segmentBytes = 1 << 20

// readFull reads len(b) bytes of r at off.
func readFull(r io.ReaderAt, b []byte, off uint64) error {
	if _, err := r.ReadAt(b, int64(off)); err != nil {
		if err == io.EOF {
			return fmt.Errorf("short read at offset %d: file truncated", off)
		}
		return err
	}
	return nil
}

// pieces are one job's reusable buffers of pieceBytes each.
type pieces struct{ a, b []byte }

func newPieces() *pieces {
	return &pieces{a: make([]byte, pieceBytes), b: make([]byte, pieceBytes)}
}

// pieceCost is what a job with its pieces holds of the budget.
func pieceCost() uint64 { return 2 * uint64(pieceBytes) }

// streamRange reads bytes [off, off+n) of r through buf, passes each
// piece and its position in the range to fn (if not nil), and returns the
// content key of the whole range.
func streamRange(r io.ReaderAt, off, n uint64, buf []byte, fn func(pos uint64, b []byte) error) (shardcache.Key, error) {
	h := shardcache.NewHasher()
	for pos := uint64(0); pos < n; pos += uint64(len(buf)) {
		b := buf[:min(uint64(len(buf)), n-pos)]
		if err := readFull(r, b, off+pos); err != nil {
			return "", err
		}
		h.Write(b)
		if fn != nil {
			if err := fn(pos, b); err != nil {
				return "", err
			}
		}
	}
	return shardcache.KeyFromSum([32]byte(h.Sum(nil))), nil
}

// compareRanges compares a raw object of n bytes with bytes [off, off+n)
// of src a piece at a time. It returns the content key of the object's
// bytes, of the source's bytes, and the first byte at which they differ
// (-1 for none).
func compareRanges(obj io.ReaderAt, src io.ReaderAt, off, n uint64, p *pieces) (objKey, srcKey shardcache.Key, diff int64, err error) {
	diff = -1
	srcHash := shardcache.NewHasher()
	objKey, err = streamRange(obj, 0, n, p.a, func(pos uint64, b []byte) error {
		s := p.b[:len(b)]
		if err := readFull(src, s, off+pos); err != nil {
			return err
		}
		srcHash.Write(s)
		if i := firstDiff(b, s); i >= 0 && diff < 0 {
			diff = int64(pos) + int64(i)
		}
		return nil
	})
	if err != nil {
		return "", "", -1, err
	}
	return objKey, shardcache.KeyFromSum([32]byte(srcHash.Sum(nil))), diff, nil
}

// copyChecked writes bytes [off, off+n) of r to w a piece at a time and
// checks that they have content key key.
func copyChecked(w io.Writer, r io.ReaderAt, off, n uint64, key shardcache.Key, buf []byte, what error) error {
	got, err := streamRange(r, off, n, buf, func(_ uint64, b []byte) error {
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if got != key {
		return fmt.Errorf("%w: content hash mismatch", what)
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

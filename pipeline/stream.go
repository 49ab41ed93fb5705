package pipeline

import (
	"fmt"
	"io"
	"os"
)

// segmentBytes is how much of a tensor each pass handles at a time: small
// enough that the hash, histogram and CRC sweeps find it in L2, and a multiple of
// the chunk size, small enough to bound memory per job.
const segmentBytes = 1 << 20

// readRange reads bytes [off, off+size) of the file at path.
func readRange(f *os.File, off, size uint64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("short read at offset %d: file truncated", off)
		}
		return nil, err
	}
	return b, nil
}

package pipeline

import (
	"fmt"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// mapping is a read-only memory map of a whole source file. Reading through
// it saves a copy per pass over the data. A file truncated while mapped
// faults on access; readers run under guard, which turns that fault into
// an error.
type mapping struct {
	data []byte
}

func mapFile(f *os.File, size uint64) (*mapping, error) {
	if size == 0 {
		return &mapping{}, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", f.Name(), err)
	}
	_ = unix.Madvise(b, unix.MADV_SEQUENTIAL)
	return &mapping{data: b}, nil
}

func (m *mapping) close() {
	if m.data != nil {
		unix.Munmap(m.data)
		m.data = nil
	}
}

// release drops the mapped pages of [begin, end) from this process, so
// the memory a compress holds stays bounded by what it is working on; the
// page cache keeps them.
func (m *mapping) release(begin, end uint64) {
	const page = 4096
	begin = (begin + page - 1) &^ (page - 1)
	end &^= page - 1
	if m.data != nil && begin < end {
		_ = unix.Madvise(m.data[begin:end], unix.MADV_DONTNEED)
	}
}

// guard runs fn and converts a memory fault (a mapped file that shrank)
// into an error.
func guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(interface{ Addr() uintptr }); ok {
				_ = e
				err = fmt.Errorf("%w: the source file shrank while it was read", ErrMismatch)
				return
			}
			panic(r)
		}
	}()
	return fn()
}

// segments calls fn for successive pieces of at most segmentBytes of
// bytes [begin, end) of the mapping and, with drop, drops each piece's
// pages from this process once fn is done with it, so a job holds one
// segment's pages whatever the tensor's size.
func (m *mapping) segments(begin, end uint64, drop bool, fn func(seg []byte) error) error {
	for pos := begin; pos < end; {
		n := min(end-pos, segmentBytes)
		err := fn(m.data[pos : pos+n])
		if drop {
			m.release(pos, pos+n)
		}
		if err != nil {
			return err
		}
		pos += n
	}
	return nil
}

package transport

// Files the transports read: shards and packs, kept open while a
// transport lives, and payloads' own files, opened for one read.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/splitzip/splitzip/shardcache"
)

// fileCache keeps files open that many reads share (shards, packs).
type fileCache struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func (c *fileCache) get(path string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if c.files == nil {
		c.files = map[string]*os.File{}
	}
	c.files[path] = f
	return f, nil
}

func (c *fileCache) readAt(path string, dst []byte, off uint64) error {
	f, err := c.get(path)
	if err != nil {
		return err
	}
	n, err := f.ReadAt(dst, int64(off))
	if err == io.EOF && n < len(dst) {
		return fmt.Errorf("%s: %w (%d of %d bytes at offset %d)", path, ErrShortRead, n, len(dst), off)
	}
	return err
}

func (c *fileCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, f := range c.files {
		f.Close()
		delete(c.files, p)
	}
	return nil
}

// rawFile is a file read with pread alone: opened without the poller an
// os.File registers with (no read of a regular file ever waits on it) and
// without a stat, so a read of a whole payload's own file costs its open,
// its reads and its close. The payload header's size and checksum cover a
// file of the wrong length.
type rawFile struct{ fd int }

func openRaw(path string) (*rawFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &rawFile{fd: fd}, nil
}

// ReadAt reads len(dst) bytes at off or fails: a file that ends first is
// ErrShortRead. Its errors do not name the file: callers do.
func (f *rawFile) ReadAt(dst []byte, off int64) (int, error) {
	for n := 0; n < len(dst); {
		k, err := unix.Pread(f.fd, dst[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, fmt.Errorf("read: %w", err)
		case k == 0:
			return n, fmt.Errorf("%w (%d of %d bytes at offset %d)", ErrShortRead, n, len(dst), off)
		}
		n += k
	}
	return len(dst), nil
}

func (f *rawFile) Close() error { return unix.Close(f.fd) }

// readFileAt reads len(dst) bytes at offset off of the file at path,
// opening and closing it.
func readFileAt(path string, dst []byte, off uint64) error {
	f, err := openRaw(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadAt(dst, int64(off)); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// objectSource is where a payload object's bytes are read: its range of a
// pack kept open in files, or its own file, opened here; close releases
// what was opened.
func objectSource(files *fileCache, loc shardcache.Location, o *shardcache.Object) (r io.ReaderAt, close func() error, err error) {
	if o.Pack != "" {
		f, err := files.get(loc.Path)
		if err != nil {
			return nil, nil, err
		}
		return objectReader{io.NewSectionReader(f, int64(loc.Offset), int64(o.Size)), o.Size}, func() error { return nil }, nil
	}
	f, err := openRaw(loc.Path)
	if err != nil {
		return nil, nil, err
	}
	return objectReader{f, o.Size}, f.Close, nil
}

// objectReader reads a cache object: one that ends before the size its
// index records is a corrupt cache (shardcache.ErrObjectCorrupt), not a
// source file that changed.
type objectReader struct {
	r    io.ReaderAt
	size uint64
}

func (o objectReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.r.ReadAt(p, off)
	if n < len(p) && (err == io.EOF || errors.Is(err, ErrShortRead)) {
		return n, fmt.Errorf("%w: it ends at byte %d, the index says %d bytes", shardcache.ErrObjectCorrupt, off+int64(n), o.size)
	}
	return n, err
}

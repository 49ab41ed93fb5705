package shardcache

// Reading objects for many reads (a load's): a checkpoint's thousands of
// small objects lie in a few packs, each opened, and its size checked
// against the index, once; an object of its own file is opened for the
// read and closed after it, so that a cache of loose objects does not
// hold a descriptor per object.

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// errNegativeOffset is a read of an object at a negative offset.
var errNegativeOffset = errors.New("shardcache: read at a negative offset")

// ObjectFiles reads a cache's objects by Location (Locate's) for many
// reads: a pack member from its range of its pack, whose file it keeps
// open until Close, having checked the file's size against the index when
// it opened it (a pack cut short or grown is ErrObjectCorrupt); an object
// stored in a file of its own from that file, opened for the read, its
// size checked against the index with one fstat (a file cut short or
// grown is ErrObjectCorrupt, as OpenObject finds it). Either way a file
// that ends before the bytes the index records is a corrupt cache, not a
// short read. A remote cache's objects (OpenRemote) are read through its
// Files, by the file key their Path names. It is safe for concurrent use.
type ObjectFiles struct {
	c     *Cache
	mu    sync.RWMutex
	packs map[Key]*os.File // open packs, by key
}

// NewObjectFiles returns the reader of c's objects, with no file open.
func NewObjectFiles(c *Cache) *ObjectFiles {
	return &ObjectFiles{c: c, packs: map[Key]*os.File{}}
}

// Open opens the object at loc for reading: its range of its pack, kept
// open, or its own file, opened now. Its errors name the file. The
// caller closes the ObjectBytes, which closes an object's own file and
// leaves a pack open.
func (fs *ObjectFiles) Open(loc Location) (*ObjectBytes, error) {
	f, err := fs.open(loc)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// ReadAt reads len(p) bytes at offset off of the bytes at loc (an
// object's, or a range of a pack that several members share: Locate's
// Location of one, with Offset and Size widened), opening an object's own
// file for this read alone. Its errors name the file.
func (fs *ObjectFiles) ReadAt(loc Location, p []byte, off int64) error {
	f, err := fs.open(loc)
	if err != nil {
		return err
	}
	_, err = f.ReadAt(p, off)
	cerr := f.Close()
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", loc.Name(), err)
	}
	return nil
}

// open opens the bytes at loc without allocating the ObjectBytes.
func (fs *ObjectFiles) open(loc Location) (ObjectBytes, error) {
	if r := fs.c.remote; r != nil {
		return ObjectBytes{loc: loc, remote: r, fd: -1}, nil
	}
	if loc.Pack != "" {
		p, err := fs.pack(loc)
		return ObjectBytes{loc: loc, pack: p, fd: -1}, err
	}
	for {
		fd, err := unix.Open(loc.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ENOENT:
			// The index names it: a cache that lost a file is damaged
			// (unless the whole cache went).
			return ObjectBytes{}, fmt.Errorf("%s: %w", loc.Path, MissingObject(loc.Path))
		case err != nil:
			return ObjectBytes{}, &os.PathError{Op: "open", Path: loc.Path, Err: err}
		}
		// The file's size is the index's, as OpenObject checks: a file
		// that grew (or shrank) is damaged even where the bytes read are
		// right. One fstat an object of its own (packs are checked once).
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || uint64(st.Size) != loc.Size {
			unix.Close(fd)
			if err != nil {
				return ObjectBytes{}, &os.PathError{Op: "stat", Path: loc.Path, Err: err}
			}
			return ObjectBytes{}, fmt.Errorf("%s: %w: %d bytes, index says %d", loc.Path, ErrObjectCorrupt, st.Size, loc.Size)
		}
		return ObjectBytes{loc: loc, fd: fd}, nil
	}
}

// pack returns the open file of loc's pack, opening it and checking its
// size the first time. Two first reads of one pack may both open it; one
// file is kept.
func (fs *ObjectFiles) pack(loc Location) (*os.File, error) {
	fs.mu.RLock()
	f := fs.packs[loc.Pack]
	fs.mu.RUnlock()
	if f != nil {
		return f, nil
	}
	// Opened outside the lock: reads of packs already open do not wait
	// for a first open.
	f, err := fs.c.openPack(loc.Pack, loc.Path)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if kept := fs.packs[loc.Pack]; kept != nil {
		f.Close()
		return kept, nil
	}
	fs.packs[loc.Pack] = f
	return f, nil
}

// openPack opens the file at path of the pack with key and checks that
// its size is the index's.
func (c *Cache) openPack(key Key, path string) (*os.File, error) {
	o := c.ix.Objects[key]
	if o == nil || o.Kind != KindPack {
		return nil, fmt.Errorf("%s: %w: pack %s is not in the index", path, ErrObjectCorrupt, key)
	}
	f, err := os.Open(path)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, MissingObject(path)) // a lost pack
	}
	if err != nil {
		return nil, err // it names path
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if uint64(st.Size()) != o.Size {
		f.Close()
		return nil, fmt.Errorf("%s: %w: pack of %d bytes, index says %d", path, ErrObjectCorrupt, st.Size(), o.Size)
	}
	return f, nil
}

// Close closes the packs kept open. Reads after it open them again (and
// a later Close closes those); a read running meanwhile fails with
// os.ErrClosed, never on another file.
func (fs *ObjectFiles) Close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var errs []error
	for k, f := range fs.packs {
		errs = append(errs, f.Close())
		delete(fs.packs, k)
	}
	return errors.Join(errs...)
}

// ObjectBytes is an object's bytes open for reading (ObjectFiles.Open).
type ObjectBytes struct {
	loc    Location
	pack   *os.File // the member's pack, which ObjectFiles keeps open
	fd     int      // the object's own file, when pack is nil (-1 once closed)
	remote *remote  // a remote cache's files, read by key (OpenRemote)
}

var (
	_ io.ReaderAt = (*ObjectBytes)(nil)
	_ io.Closer   = (*ObjectBytes)(nil)
)

// Name describes the object's bytes for errors (Location.Name).
func (f *ObjectBytes) Name() string { return f.loc.Name() }

// Remote reports whether the bytes are a remote cache's (OpenRemote):
// each read is a request, so readers read large ranges.
func (f *ObjectBytes) Remote() bool { return f.remote != nil }

// Location returns where the object's bytes lie.
func (f *ObjectBytes) Location() Location { return f.loc }

// ReadAt reads len(p) bytes at offset off of the object's bytes. A file
// that ends before them is ErrObjectCorrupt; a read past the object's end
// (its size in the index) reads to that end and returns io.EOF, as
// io.ReaderAt says. Its errors do not name the file: callers do (Name).
func (f *ObjectBytes) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errNegativeOffset
	}
	size := int64(f.loc.Size)
	past := int64(len(p)) > size-off
	if past {
		p = p[:max(0, size-off)]
	}
	n, err := f.read(p, int64(f.loc.Offset)+off)
	switch {
	case err != nil:
		return n, err
	case n < len(p):
		return n, fmt.Errorf("%w: it ends at byte %d, the index says %d bytes", ErrObjectCorrupt, off+int64(n), size)
	case past:
		return n, io.EOF
	}
	return n, nil
}

// ReadAtStretches reads exactly len(p) bytes at offset off of the
// object's bytes, telling stretches (if not nil; offsets of the object)
// of them as they land: a remote cache's in the stretches its Files reads
// in parallel, where they are StretchFiles; any other as one stretch once
// read. Asking for bytes past the object's end is io.ErrUnexpectedEOF; a
// file that ends before the object does is ErrObjectCorrupt, as with
// ReadAt.
func (f *ObjectBytes) ReadAtStretches(p []byte, off int64, stretches Stretches) error {
	if off < 0 {
		return errNegativeOffset
	}
	if size := int64(f.loc.Size); int64(len(p)) > size-off {
		return fmt.Errorf("bytes [%d, %d) of an object of %d: %w", off, off+int64(len(p)), size, io.ErrUnexpectedEOF)
	}
	if f.remote == nil || stretches == nil {
		if _, err := f.ReadAt(p, off); err != nil {
			return err
		}
		if stretches != nil {
			stretches.Whole(off, p)
		}
		return nil
	}
	base := int64(f.loc.Offset)
	return f.remote.fileStretches(f.loc.Path, p, base+off, func(at int64) func([]byte) { return stretches(at - base) })
}

// read reads p at offset off of the file, up to the file's end (a
// remote file: exactly, its size checked when the cache was opened).
func (f *ObjectBytes) read(p []byte, off int64) (int, error) {
	if f.remote != nil {
		if err := f.remote.fileAt(f.loc.Path, p, off); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if f.pack != nil {
		n, err := f.pack.ReadAt(p, off)
		if err == io.EOF {
			err = nil
		}
		return n, err
	}
	for n := 0; n < len(p); {
		k, err := unix.Pread(f.fd, p[n:], off+int64(n))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, &os.PathError{Op: "read", Path: f.loc.Path, Err: err}
		case k == 0:
			return n, nil
		}
		n += k
	}
	return len(p), nil
}

// Close closes the object's own file; a pack stays open until
// ObjectFiles.Close.
func (f *ObjectBytes) Close() error {
	if f.pack != nil || f.fd < 0 {
		return nil
	}
	fd := f.fd
	f.fd = -1
	if err := unix.Close(fd); err != nil {
		return &os.PathError{Op: "close", Path: f.loc.Path, Err: err}
	}
	return nil
}

package shardcache

// Caches kept elsewhere: a cache in a bucket or a registry read in place,
// its object files and packs fetched by key as a load reads them, with no
// local copy.

import (
	"errors"
	"fmt"
)

// ErrRemote: an operation needs the cache's files on the local disk.
var ErrRemote = errors.New("the cache is remote: its files are not on this disk")

// Files reads the object files and packs of a cache kept elsewhere.
type Files interface {
	// ReadFileAt reads exactly len(p) bytes of the file with key (an
	// object's own file or a pack) at offset off.
	ReadFileAt(key Key, p []byte, off int64) error
}

// Stretches is told of a read's bytes as they land, for work best done
// while they are still in the processor's cache (a checksum). A read
// arrives in stretches, each in order: one ranged GET, with the GETs
// that resume it where its body broke off. For each stretch Stretches is
// called once with the stretch's offset, from the goroutine that reads
// it; the function it returns is then called from that goroutine with
// each span of the stretch, in order, as soon as the span's bytes are in
// place. The stretches tile the read; several may be under way at once.
// A stretch that breaks off for good fails the read.
type Stretches func(off int64) (span func(q []byte))

// Whole tells s of p, read at off, as one stretch of one span (nothing of
// an empty p): what a reader that reads p at once tells.
func (s Stretches) Whole(off int64, p []byte) {
	if len(p) > 0 {
		s(off)(p)
	}
}

// StretchFiles is Files that can also tell a read's Stretches (oci's
// ranged GETs in parallel parts do).
type StretchFiles interface {
	Files
	// ReadFileStretches reads as ReadFileAt does, telling stretches (if
	// not nil) of the bytes as they land, in offsets of the file.
	ReadFileStretches(key Key, p []byte, off int64, stretches Stretches) error
}

// remote is a remote cache's files and the name each goes by in a
// Location (Path), which ObjectFiles maps back to its key.
type remote struct {
	files Files
	name  string
	keys  map[string]Key // Location.Path: the file's key
}

// path names a file of the remote cache.
func (r *remote) path(key Key) string { return r.name + "/" + string(key) }

// OpenRemote returns a read-only view of the cache with index ix (checked
// as Open checks one) whose object files and packs files reads; name
// (the cache's reference) names it in errors, and its files as
// NAME/KEY. The caller has checked that files holds every file of the
// index at the size the index records.
func OpenRemote(ix *Index, name string, files Files) *Cache {
	r := &remote{files: files, name: name, keys: map[string]Key{}}
	fs, _ := ix.Files()
	for _, k := range fs {
		r.keys[r.path(k)] = k
	}
	return newCacheAt(name, ix, r)
}

// Remote reports whether the cache is read through Files (OpenRemote).
func (c *Cache) Remote() bool { return c.remote != nil }

// fileAt reads len(p) bytes at off of the remote file named path.
func (r *remote) fileAt(path string, p []byte, off int64) error {
	k, ok := r.keys[path]
	if !ok {
		return fmt.Errorf("%s: %w: no file of the index", path, ErrObjectCorrupt)
	}
	return r.files.ReadFileAt(k, p, off)
}

// ReadRemote reads len(p) bytes at off of the file path names, when path
// names a file of a remote cache (a Location's Path, RawSlice's file);
// ok is false, and nothing read, for any other path.
func (c *Cache) ReadRemote(path string, p []byte, off int64) (ok bool, err error) {
	if c == nil || c.remote == nil {
		return false, nil
	}
	if _, ok := c.remote.keys[path]; !ok {
		return false, nil
	}
	return true, c.remote.fileAt(path, p, off)
}

// fileStretches reads len(p) bytes at off of the remote file named path,
// telling stretches (not nil) of them, in offsets of the file, as they
// land: through StretchFiles where files is one, else as one stretch once
// all are read.
func (r *remote) fileStretches(path string, p []byte, off int64, stretches Stretches) error {
	k, ok := r.keys[path]
	if !ok {
		return fmt.Errorf("%s: %w: no file of the index", path, ErrObjectCorrupt)
	}
	if sf, ok := r.files.(StretchFiles); ok {
		return sf.ReadFileStretches(k, p, off, stretches)
	}
	if err := r.files.ReadFileAt(k, p, off); err != nil {
		return err
	}
	stretches.Whole(off, p)
	return nil
}

// remoteAt is a remote file as an io.ReaderAt of exact reads.
type remoteAt struct {
	r    *remote
	path string
}

func (a remoteAt) ReadAt(p []byte, off int64) (int, error) {
	if err := a.r.fileAt(a.path, p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

package shardcache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrSourceMissing reports a source shard that is not where it is looked
// for, for a tensor whose bytes are only in it (not copied into the cache).
var ErrSourceMissing = errors.New("source shard missing, and the tensor's bytes are only in it")

// allInCacheHint is what CheckSource adds for a changed file of a shard
// whose every tensor the cache holds.
const allInCacheHint = "the cache holds every tensor of this shard: with this file moved away (an absent source is no error for it), loads and decompress serve what was compressed, and verify checks it against its content keys"

// ErrHostDecode reports, from RawSlice, a tensor whose source shard is
// absent and that the cache holds as an entropy payload: no raw bytes are
// anywhere, and whoever reads it decodes the payload on the host.
var ErrHostDecode = errors.New("source shard missing; the tensor is an entropy payload, to decode from its payload")

// SourceState reports whether the shard file at path is there and, if it
// is, ErrSourceChanged when its size or mtime differ from the record. An
// absent shard is no error: tensors whose bytes the cache holds are served
// from the cache.
func SourceState(sh *Shard, path string) (present bool, err error) {
	st, err := os.Stat(path) // once: a load's host reads ask this a tensor
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return true, sourceError(sh, checkInfo(sh, path, st, err))
}

// CheckSource is CheckStat for a cache's source file about to be served
// or verified: for a shard whose every tensor the cache holds
// (AllInCache) the error says so, and that with the file moved away the
// cache serves what was compressed. (A present file is the source, and
// a changed one stops a load rather than let a cache that tracks it
// serve stale tensors.)
func CheckSource(sh *Shard, path string) error {
	return sourceError(sh, CheckStat(sh, path))
}

// sourceError is CheckSource's error of CheckStat's err.
func sourceError(sh *Shard, err error) error {
	var fe *FileError
	if err != nil && sh.AllInCache() && errors.As(err, &fe) {
		return &FileError{File: fe.File, Err: fmt.Errorf("%w; %s", fe.Err, allInCacheHint)}
	}
	return err
}

// InCache reports whether the cache holds a tensor's bytes: as a payload,
// or as a raw copy (compress --self-contained).
func (t *Tensor) InCache() bool { return t.Payload() || t.CopyStored }

// AllInCache reports whether the cache holds the bytes of every tensor of
// a shard (compress --self-contained, or every tensor a payload): the
// cache then needs nothing of the shard's file, and serves the shard
// when the file is absent.
func (sh *Shard) AllInCache() bool {
	for i := range sh.Tensors {
		if !sh.Tensors[i].InCache() {
			return false
		}
	}
	return true
}

// Payload reports whether a tensor is stored as a payload that decodes to
// it (fixed codec or entropy), not as raw bytes.
func (t *Tensor) Payload() bool { return t.Stored == StoredFixed || t.Stored == StoredEntropy }

// ObjectKind returns the kind of the object t's record names: its
// payload's, KindRaw for a raw copy, "" for a tensor read from its source
// alone.
func (t *Tensor) ObjectKind() string {
	switch {
	case t.Stored == StoredFixed:
		return KindFixed
	case t.Stored == StoredEntropy:
		return KindEntropy
	case t.CopyStored:
		return KindRaw
	}
	return ""
}

// StoredAs returns the form (Tensor.Stored) of a tensor whose bytes the
// cache holds as an object of kind: a payload's, else StoredRaw.
func StoredAs(kind string) string {
	switch kind {
	case KindFixed:
		return StoredFixed
	case KindEntropy:
		return StoredEntropy
	}
	return StoredRaw
}

// RawSlice returns where the raw bytes of tensor t of shard sh (whose file
// is at path now) are read from: the source slice when the shard is there
// (and unchanged), else the tensor's raw copy in the cache (its own file,
// or its range of a pack).
// A tensor whose bytes are only in an absent source is ErrSourceMissing;
// an entropy payload's tensor with its source absent, ErrHostDecode.
func (c *Cache) RawSlice(sh *Shard, path string, t *Tensor) (string, uint64, error) {
	present, err := c.SourcePresent(sh, path)
	switch {
	case err != nil:
		return "", 0, err
	case present:
		return path, t.Offset, nil
	}
	return c.CopySlice(sh, path, t)
}

// CopySlice is RawSlice for a shard whose source is absent (the caller
// checked once for the shard rather than a stat a tensor): the tensor's
// raw copy in the cache.
func (c *Cache) CopySlice(sh *Shard, path string, t *Tensor) (string, uint64, error) {
	switch {
	case t.Stored == StoredRaw && t.CopyStored:
		loc, _, err := c.Locate(t.Key)
		return loc.Path, loc.Offset, err
	case t.Stored == StoredEntropy:
		return "", 0, fmt.Errorf("%s: tensor %q: %w", path, t.Name, ErrHostDecode)
	}
	return "", 0, &TensorError{Tensor: t.Name, File: path, Err: ErrSourceMissing}
}

// SourcePresent is SourceState for the cache's own sources: a remote
// cache's (OpenRemote) are another machine's files, never read here, so
// that a file of the same path on this one is not taken for its source.
func (c *Cache) SourcePresent(sh *Shard, path string) (bool, error) {
	if c.remote != nil {
		return false, nil
	}
	return SourceState(sh, path)
}

// CheckShard reports whether the source file of shard sh at path is
// there (SourcePresent) and checks that a load can serve the shard: a
// present file unchanged, an absent one's every tensor in the cache
// (CheckAbsent). Loads and plans ask it of every shard first.
func (c *Cache) CheckShard(sh *Shard, path string) (present bool, err error) {
	present, err = c.SourcePresent(sh, path)
	if err == nil && !present {
		err = c.CheckAbsent(sh, path)
	}
	return present, err
}

// CheckAbsent checks that every tensor of a shard whose source file is
// absent has its bytes in the cache, in object files (or packs) of the
// recorded sizes, so that sizes from the index are bounded by files
// before anything is allocated for them.
func (c *Cache) CheckAbsent(sh *Shard, path string) error {
	seen := map[string]bool{} // files checked: a pack holds many tensors
	for i := range sh.Tensors {
		t := &sh.Tensors[i]
		if !t.InCache() {
			return &TensorError{Tensor: t.Name, File: path, Err: ErrSourceMissing}
		}
		loc, o, err := c.Locate(t.Key)
		if err != nil {
			return err
		}
		size := o.Size
		if o.Pack != "" {
			size = c.ix.Objects[o.Pack].Size
		}
		if c.remote != nil || seen[loc.Path] {
			continue // a remote's sizes were checked when it was opened; a file seen, for an earlier tensor
		}
		seen[loc.Path] = true
		st, err := os.Stat(loc.Path)
		if errors.Is(err, fs.ErrNotExist) {
			// The index names it: a cache that lost a file is damaged
			// (unless the whole cache went).
			return &TensorError{Tensor: t.Name, File: loc.Path, Err: MissingObject(loc.Path)}
		}
		if err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if uint64(st.Size()) != size {
			return &TensorError{Tensor: t.Name, File: loc.Path, Err: fmt.Errorf("%w: %d bytes, index says %d", ErrObjectCorrupt, st.Size(), size)}
		}
	}
	return nil
}

// TensorError is an error of a tensor's bytes in a file: its cache
// object's (lost, cut short, damaged) or its source shard's. Its fields
// name both, for callers that report them apart from the text.
type TensorError struct {
	Tensor, File string
	// At says where in the message, where that is not File: a pack
	// member's range ("path[offset:+size]"). Named says Err's text
	// names the file already.
	At    string
	Named bool
	Err   error
}

// Error says the tensor, the file (or At) and what is wrong.
func (e *TensorError) Error() string {
	switch {
	case e.Named, e.File == "" && e.At == "":
		return fmt.Sprintf("tensor %q: %v", e.Tensor, e.Err)
	case e.At != "":
		return fmt.Sprintf("tensor %q: %s: %v", e.Tensor, e.At, e.Err)
	}
	return fmt.Sprintf("tensor %q: %s: %v", e.Tensor, e.File, e.Err)
}

// Unwrap returns what is wrong.
func (e *TensorError) Unwrap() error { return e.Err }

// FileError is an error about a file or folder (a source shard that
// changed, a folder that is no cache): its field names it for callers
// that report it apart from the text.
type FileError struct {
	File string
	Err  error
}

// Error says the file and what is wrong with it.
func (e *FileError) Error() string { return e.File + ": " + e.Err.Error() }

// Unwrap returns what is wrong.
func (e *FileError) Unwrap() error { return e.Err }

package shardcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/splitzip/splitzip/checkpoint"
)

// ErrInsideCache reports a folder given for files outside the cache
// (decompress's output, the place a source moved to) that is the cache's
// folder or inside it.
var ErrInsideCache = errors.New("is inside the cache")

// ErrSourceRecorded reports a checkpoint moved (Writer.Relocate) to where
// another checkpoint of the same path is recorded.
var ErrSourceRecorded = errors.New("another checkpoint of this path is recorded in the cache; forget it first")

// ErrNoCheckpoint reports a cache that holds no checkpoint: none was
// compressed into it yet, or every one was forgotten.
var ErrNoCheckpoint = errors.New("the cache holds no checkpoint")

// RequireCheckpoint returns ErrNoCheckpoint, naming the cache, when it
// holds no checkpoint: there is nothing to verify, inspect, restore or
// load.
func (c *Cache) RequireCheckpoint() error {
	if len(c.ix.Sources) == 0 {
		return c.noCheckpoint()
	}
	return nil
}

// noCheckpoint is ErrNoCheckpoint naming the cache and, in a local
// cache, the unfinished pulls whose run again would bring a checkpoint.
func (c *Cache) noCheckpoint() error {
	if c.remote == nil {
		if pins, err := readPins(c.dir); err == nil && len(pins) > 0 {
			// Not "compress one into it first": the pull is what to finish.
			return fmt.Errorf("%s: %w yet, only %s: run the pull again to finish it", c.dir, ErrNoCheckpoint, pins[0].Note)
		}
	}
	return fmt.Errorf("%s: %w; compress one into it first", c.dir, ErrNoCheckpoint)
}

// CheckOutside returns ErrInsideCache, naming both, when path is the cache
// folder dir or inside it. path is taken as the shell gave it (relative
// to the working directory, symlinks of what exists of it followed);
// what says what it is for the message ("the output folder").
func CheckOutside(dir, path, what string) error {
	root, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	if checkpoint.Contains(root, path) {
		return fmt.Errorf("%s: %s %w %s; choose a folder outside it", path, what, ErrInsideCache, root)
	}
	return nil
}

// Cache is an open cache, read-only.
type Cache struct {
	dir    string
	ix     *Index
	remote *remote // a cache read through Files (OpenRemote), or nil
	// packPaths is each pack's file, found once: a pack member is located
	// with no formatting or allocation (a load locates every payload).
	packPaths map[Key]string
	// shards holds the index's shard records, which tell a SliceHit of
	// this cache from another's (holds).
	shards map[*Shard]struct{}
	slices map[sliceKey][]SliceHit
	byName map[string][]SliceHit
	// rlock holds the readers lock of a local cache from Open to Close.
	rlock *os.File
	// damaged is the index's error where the cache was read from the
	// index's backup (BackupName) instead.
	damaged error
}

type sliceKey struct {
	shard        string // file name, without directories
	offset, size uint64
}

// SliceHit is a tensor found by its source slice or name.
type SliceHit struct {
	Source *Source
	Shard  *Shard
	Tensor *Tensor
	// at is the tensor's object, located once by Cache.Resolve so that
	// a load does not look its key up again for every fault.
	at *located
}

// located is a resolved Cache.Locate.
type located struct {
	loc Location
	o   *Object
}

// Resolve locates the object of h's tensor now, for LocateHit; a hit
// whose object is not found is left as it is (LocateHit reports it).
func (c *Cache) Resolve(h *SliceHit) {
	if loc, o, err := c.Locate(h.Tensor.Key); err == nil {
		h.at = &located{loc, o}
	}
}

// LocateHit is Locate of h's tensor's key, without a lookup when h was
// resolved.
func (c *Cache) LocateHit(h SliceHit) (Location, *Object, error) {
	if h.at != nil {
		return h.at.loc, h.at.o, nil
	}
	return c.Locate(h.Tensor.Key)
}

// Path returns the shard file's path.
func (h SliceHit) Path() string { return filepath.Join(h.Source.Root, h.Shard.Name) }

// holds reports whether h is a record of this cache's index (a hit
// another open cache returned is not). Its shard decides: the source may
// be a copy (PickSource's of a moved checkpoint) sharing the index's
// shards.
func (c *Cache) holds(h *SliceHit) bool {
	_, ok := c.shards[h.Shard]
	return ok
}

// LookupSpec finds the tensor a spec names: its record when the spec
// carries one of this cache (ref, a *SliceHit), else by its source slice
// (LookupSlice).
func (c *Cache) LookupSpec(ref any, shard string, offset, size uint64) (SliceHit, error) {
	if h, ok := ref.(*SliceHit); ok && h != nil && c.holds(h) {
		return *h, nil
	}
	return c.LookupSlice(shard, offset, size)
}

// Open opens the cache in dir for reading and checks its index. It holds
// the cache's readers lock shared until Close, so that gc removes nothing
// meanwhile; while a gc runs it waits for it to finish (up to two
// minutes, then ErrLocked).
func Open(dir string) (*Cache, error) {
	return OpenContext(context.Background(), dir)
}

// OpenContext is Open, giving up its wait for a gc when ctx ends.
func OpenContext(ctx context.Context, dir string) (*Cache, error) {
	path := filepath.Join(dir, IndexName)
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return nil, derr
		}
		if err := lostIndex(dir); err != nil {
			return nil, err
		}
		if _, merr := os.Stat(filepath.Join(dir, MarkerName)); merr == nil {
			return nil, &FileError{File: dir, Err: fmt.Errorf("%w: no committed index (was compress or pull interrupted? run it again)", ErrNotCache)}
		}
		if ents, rerr := os.ReadDir(dir); rerr == nil && len(ents) == 0 {
			return nil, &FileError{File: dir, Err: fmt.Errorf("%w: the folder is empty", ErrNotCache)}
		}
		return nil, &FileError{File: dir, Err: fmt.Errorf("%w: no %s (the index a cache holds)", ErrNotCache, IndexName)}
	}
	if ds, derr := os.Stat(dir); err != nil && derr == nil && !ds.IsDir() {
		return nil, &FileError{File: dir, Err: fmt.Errorf("%w: a file, where a cache is a folder (splitzip compress makes one)", ErrNotCache)}
	}
	if err != nil {
		return nil, err
	}
	// The lock before the index: a gc that ran between reading the
	// index and locking could have removed what it names.
	lock, err := readLock(ctx, dir)
	if err != nil {
		return nil, err
	}
	var ix *Index
	if st.Size() > maxIndexSize {
		err = fmt.Errorf("%s: %w: %d bytes", path, ErrIndexCorrupt, st.Size())
	} else {
		ix, err = readIndex(path)
	}
	var damaged error
	if errors.Is(err, ErrIndexCorrupt) {
		if bix, berr := readBackup(dir, path); berr == nil {
			ix, damaged, err = bix, err, nil
		}
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	c := newCache(dir, ix)
	c.rlock, c.damaged = lock, damaged
	return c, nil
}

// lostIndex is ErrIndexLost, saying how to restore the index, where the
// cache in dir has no index but has the backup a commit writes after it;
// nil where it has no backup.
func lostIndex(dir string) error {
	backup := filepath.Join(dir, BackupName)
	if st, err := os.Stat(backup); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: %w (a commit writes it after the index): if %s was moved or deleted, cp %s %s restores the last commit's, then splitzip verify %s checks it; to start the cache anew, remove the folder",
		dir, ErrIndexLost, IndexName, shellQuote(backup), shellQuote(filepath.Join(dir, IndexName)), shellQuote(dir))
}

// shellQuote is s as one word of a POSIX shell command line.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Damaged is the error of the cache's index where Open read the cache
// from the index's backup instead (nil where the index was whole): the
// next commit of a Writer (compress, gc, relocate) writes the index
// again from what it read.
func (c *Cache) Damaged() error { return c.damaged }

// readBackup reads and checks the index's backup in dir, where it is of
// the same commit as the index at path: its 64-byte header (magic,
// version, flags, the body's length and BLAKE3) is the index's, byte for
// byte, so the damage lies past the header and the backup holds the body
// the index was written with. A backup of another commit (one killed
// before it wrote its backup, or an older build's, which writes none)
// names another set of objects, and a gc by it would remove a later
// commit's; one whose header differs is not read. Its statistics must be
// whole too (loads never read them; writers and inspect do).
func readBackup(dir, path string) (*Index, error) {
	backup := filepath.Join(dir, BackupName)
	head := func(p string) ([]byte, error) {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b := make([]byte, indexHeaderSize)
		_, err = io.ReadFull(f, b)
		return b, err
	}
	a, err := head(path)
	if err != nil {
		return nil, err
	}
	b, err := head(backup)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(a, []byte(indexMagic)) || !bytes.Equal(a, b) {
		return nil, fmt.Errorf("%s: %w: not the backup of the index's commit", backup, ErrIndexCorrupt)
	}
	if st, err := os.Stat(backup); err != nil || st.Size() > maxIndexSize {
		return nil, fmt.Errorf("%s: %w: too large", backup, ErrIndexCorrupt)
	}
	ix, err := readIndex(backup)
	if err != nil {
		return nil, err
	}
	if err := ix.LoadStats(); err != nil {
		return nil, err
	}
	return ix, nil
}

// readIndex reads and checks the index file at path.
func readIndex(path string) (*Index, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return unmarshalIndex(b, path)
}

func newCache(dir string, ix *Index) *Cache { return newCacheAt(dir, ix, nil) }

// newCacheAt is newCache of a local cache in dir (r nil) or of a remote
// one (dir its name).
func newCacheAt(dir string, ix *Index, r *remote) *Cache {
	c := &Cache{dir: dir, ix: ix, remote: r, slices: map[sliceKey][]SliceHit{}, byName: map[string][]SliceHit{}, packPaths: map[Key]string{}, shards: map[*Shard]struct{}{}}
	for k, o := range ix.Objects {
		if o.Kind == KindPack {
			if p, err := c.path(k); err == nil { // else Locate reports it
				c.packPaths[k] = p
			}
		}
	}
	for si := range ix.Sources {
		s := &ix.Sources[si]
		for hi := range s.Shards {
			sh := &s.Shards[hi]
			c.shards[sh] = struct{}{}
			for ti := range sh.Tensors {
				t := &sh.Tensors[ti]
				hit := SliceHit{Source: s, Shard: sh, Tensor: t}
				k := sliceKey{filepath.Base(sh.Name), t.Offset, t.Size}
				c.slices[k] = append(c.slices[k], hit)
				c.byName[t.Name] = append(c.byName[t.Name], hit)
			}
		}
	}
	return c
}

// Dir returns the cache directory.
func (c *Cache) Dir() string { return c.dir }

// Holds reports whether path is a file of the cache's objects/ folder (a
// loose object or a pack), by name: a read of it that finds it missing or
// short finds the cache damaged (ErrObjectCorrupt), not an input missing.
func (c *Cache) Holds(path string) bool {
	if c == nil || c.remote != nil {
		return false
	}
	objects, err := filepath.Abs(filepath.Join(c.dir, "objects"))
	if err != nil {
		return false
	}
	if path, err = filepath.Abs(path); err != nil {
		return false
	}
	rel, err := filepath.Rel(objects, path)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// Index returns the cache's index. Callers must not modify it but by
// its LoadStats.
func (c *Cache) Index() *Index { return c.ix }

// Lookup returns the object stored under key.
func (c *Cache) Lookup(key Key) (*Object, error) {
	o, ok := c.ix.Objects[key]
	if !ok {
		return nil, fmt.Errorf("%s: object %s: %w", c.dir, key, ErrNotFound)
	}
	return o, nil
}

// LookupSlice finds the tensor compressed from bytes [offset, offset+size)
// of the shard file shard. shard may be a bare file name or a path; when
// several sources hold a slice of that name, a path selects among them.
func (c *Cache) LookupSlice(shard string, offset, size uint64) (SliceHit, error) {
	hits := c.slices[sliceKey{filepath.Base(shard), offset, size}]
	if len(hits) == 1 { // the common case, without formatting a description
		return hits[0], nil
	}
	return c.pick(hits, shard, fmt.Sprintf("slice %s[%d:+%d]", shard, offset, size))
}

// LookupName finds a tensor by name; shard, if not empty, selects among
// sources as in LookupSlice.
func (c *Cache) LookupName(name, shard string) (SliceHit, error) {
	var hits []SliceHit
	for _, h := range c.byName[name] {
		if shard == "" || filepath.Base(shard) == filepath.Base(h.Shard.Name) {
			hits = append(hits, h)
		}
	}
	return c.pick(hits, shard, fmt.Sprintf("tensor %q", name))
}

func (c *Cache) pick(hits []SliceHit, shard, what string) (SliceHit, error) {
	switch {
	case len(hits) == 0:
		return SliceHit{}, fmt.Errorf("%s: %s: %w", c.dir, what, ErrNotFound)
	case len(hits) == 1:
		return hits[0], nil
	}
	if abs, err := filepath.Abs(shard); err == nil {
		for _, h := range hits {
			if h.Path() == abs {
				return h, nil
			}
		}
	}
	// Identical content under several sources is not ambiguous.
	for _, h := range hits[1:] {
		if h.Tensor.Key != hits[0].Tensor.Key {
			return SliceHit{}, fmt.Errorf("%s: %w: %s is in %d of them; name the shard by its path", c.dir, ErrAmbiguousSource, what, len(hits))
		}
	}
	return hits[0], nil
}

// path is the file of the object or pack with key: in the cache's
// folder, or a remote cache's name for it.
func (c *Cache) path(key Key) (string, error) {
	if c.remote != nil {
		return c.remote.path(key), nil
	}
	return objectPath(c.dir, key)
}

func objectPath(dir string, key Key) (string, error) {
	h, err := key.hexPart()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "objects", h[:2], h), nil
}

// ReadObject reads a whole object into memory and, for raw objects and
// packs, checks its hash.
func (c *Cache) ReadObject(key Key) ([]byte, *Object, error) {
	f, o, err := c.OpenObject(key)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b := make([]byte, o.Size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	if o.Kind == KindRaw && KeyOf(b) != key || o.Kind == KindPack && packKeyOf(b) != key {
		return nil, nil, fmt.Errorf("%s: %w: content hash mismatch", f.Name(), ErrObjectCorrupt)
	}
	return b, o, nil
}

// Fingerprint hashes a shard's layout: its size and the offset, size and
// content key of every region in file order. Content keys are collision
// resistant hashes, so this is a hash of the whole file that costs no
// extra pass.
func Fingerprint(sh *Shard) string {
	type reg struct {
		off, size uint64
		key       Key
	}
	regs := []reg{{sh.Header.Offset, sh.Header.Size, sh.Header.Key}}
	for _, t := range sh.Tensors {
		regs = append(regs, reg{t.Offset, t.Size, t.Key})
	}
	for _, g := range sh.Gaps {
		regs = append(regs, reg{g.Offset, g.Size, g.Key})
	}
	sort.Slice(regs, func(i, j int) bool {
		if regs[i].off != regs[j].off {
			return regs[i].off < regs[j].off
		}
		return regs[i].size < regs[j].size
	})
	h := NewHasher()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], sh.Size)
	h.Write(b[:8])
	for _, r := range regs {
		binary.LittleEndian.PutUint64(b[:8], r.off)
		binary.LittleEndian.PutUint64(b[8:], r.size)
		h.Write(b[:])
		h.Write([]byte(r.key))
	}
	return fmt.Sprintf("%s%x", KeyPrefix, h.Sum(nil))
}

// CheckStat reports ErrSourceChanged when a shard file's size or
// modification time differs from the recorded ones: a cheap check before
// serving slices of it. Content changes that keep both are caught by the
// content keys where the bytes are hashed (verify, load --check,
// decompress), not by a load, which reads raw slices unhashed.
func CheckStat(sh *Shard, path string) error {
	st, err := os.Stat(path)
	return checkInfo(sh, path, st, err)
}

// checkInfo is CheckStat of what a stat of path returned.
func checkInfo(sh *Shard, path string, st fs.FileInfo, err error) error {
	if err != nil {
		return fmt.Errorf("source shard: %w", err) // the error names path
	}
	if uint64(st.Size()) != sh.Size || !st.ModTime().Equal(sh.ModTime) {
		sentinel := ErrSourceChanged
		if uint64(st.Size()) == sh.Size {
			sentinel = ErrSourceTime
		}
		return &FileError{File: path, Err: fmt.Errorf("%w (size %d, mtime %s; compressed from size %d, mtime %s)",
			sentinel, st.Size(), st.ModTime().UTC().Format("2006-01-02T15:04:05.000000000Z"), sh.Size, sh.ModTime.UTC().Format("2006-01-02T15:04:05.000000000Z"))}
	}
	return nil
}

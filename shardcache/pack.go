package shardcache

// Pack objects: small objects stored together in one file, so that a
// checkpoint of thousands of norms, biases and small matrices is a few
// files, each read with one open and one read (index version 2).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/splitzip/splitzip/atomicfile"

	"lukechampine.com/blake3"
)

// KindPack is an object that holds other objects (its members) one after
// another, each at a 16-byte aligned offset, with zero padding between.
const KindPack = "pack"

// DefaultPackMax is the stored size at or below which compress puts an
// object into a pack: the loaders' packing threshold before 2026-12-06
// (transport.DefaultSmallBytes; local loads now pack up to 2 MiB), so
// that the tensors a loader packs into one staging buffer are read from
// one file.
const DefaultPackMax = 256 << 10

// MaxPackMax is the largest pack size threshold (SetPackMax): half a pack,
// so a pack holds two objects or more.
const MaxPackMax = packTarget / 2

// packTarget is the size at which a pack is closed and the next begun. A
// pack costs one open per load of any of its members; larger packs mean
// fewer files but keep more dead bytes when gc drops some members.
const packTarget = 8 << 20

// PackAlign is the alignment of members in a pack: the scatter kernel's,
// so a run of members is staged with one read.
const PackAlign = 16

// packHashKey keys the hash that names packs, so that a pack's key never
// equals the content key of bytes that happen to equal the pack's (a
// pack of one member, or a fused tensor stored beside its parts).
var packHashKey = blake3.Sum256([]byte("splitzip pack object, index version 2"))

// newPackHasher returns the hasher of pack keys: BLAKE3-256 keyed with
// packHashKey.
func newPackHasher() hash.Hash { return blake3.New(32, packHashKey[:]) }

// Location is where an object's bytes lie on disk.
type Location struct {
	Path   string // the object's own file, or its pack's
	Offset uint64 // where its bytes start in Path
	Size   uint64 // the object's bytes
	Packed bool   // a member of a pack
	Pack   Key    // for a member, its pack's key (ObjectFiles checks the pack's size by it)
}

// Name describes the object's bytes for errors: Path, and for a pack
// member its range. It is formatted when asked for, so that locating an
// object costs no formatting.
func (l Location) Name() string {
	if !l.Packed {
		return l.Path
	}
	return fmt.Sprintf("%s[%d:+%d]", l.Path, l.Offset, l.Size)
}

// PackSpan says where a pack member's bytes lie in its pack, for errors
// that name the pack's file: "bytes [offset:+size] of the pack".
func PackSpan(offset, size uint64) string {
	return fmt.Sprintf("bytes [%d:+%d] of the pack", offset, size)
}

// Locate returns where the object with key is stored, and its record.
func (c *Cache) Locate(key Key) (Location, *Object, error) {
	o, err := c.Lookup(key)
	if err != nil {
		return Location{}, nil, err
	}
	if o.Pack == "" {
		p, err := c.path(key)
		return Location{Path: p, Size: o.Size}, o, err
	}
	p, ok := c.packPaths[o.Pack]
	if !ok {
		if p, err = c.path(o.Pack); err != nil {
			return Location{}, o, err
		}
	}
	return Location{Path: p, Offset: o.Offset, Size: o.Size, Packed: true, Pack: o.Pack}, o, nil
}

// ObjectReader reads one object's bytes, from its own file or from its
// range of a pack.
type ObjectReader struct {
	*io.SectionReader
	f    *os.File
	name string
}

// Name describes the object's bytes for errors: its file, and for a pack
// member its range.
func (r *ObjectReader) Name() string { return r.name }

// Path is the file that holds the object's bytes (its pack's for a
// member), or for a remote cache's object its Name.
func (r *ObjectReader) Path() string {
	if r.f == nil {
		return r.name
	}
	return r.f.Name()
}

// Close closes the file.
func (r *ObjectReader) Close() error {
	if r.f == nil { // a remote cache's
		return nil
	}
	return r.f.Close()
}

// OpenObject opens the object with key and checks the size of its file
// (for a pack member, its pack's).
func (c *Cache) OpenObject(key Key) (*ObjectReader, *Object, error) {
	loc, o, err := c.Locate(key)
	if err != nil {
		return nil, nil, err
	}
	want := o.Size
	if o.Pack != "" {
		want = c.ix.Objects[o.Pack].Size // check ensured the pack is there
	}
	if c.remote != nil { // sizes checked when it was opened
		at := remoteAt{c.remote, loc.Path}
		return &ObjectReader{SectionReader: io.NewSectionReader(at, int64(loc.Offset), int64(o.Size)), name: loc.Name()}, o, nil
	}
	f, err := openSized(loc.Path, key, want)
	if err != nil {
		return nil, nil, err
	}
	return &ObjectReader{SectionReader: io.NewSectionReader(f, int64(loc.Offset), int64(o.Size)), f: f, name: loc.Name()}, o, nil
}

// MissingObject is why a file of the cache (an object, a pack, a raw
// copy) that the index names is not at path: the cache is damaged
// (ErrObjectCorrupt), unless the cache's index or objects folder is gone
// too, when the cache was removed or moved while it was open
// (ErrCacheGone, a missing file: nothing of it is damaged). Either wraps
// fs.ErrNotExist; the text does not name path (the caller's does).
func MissingObject(path string) error {
	objects := filepath.Dir(filepath.Dir(path)) // objects/xx/file
	if filepath.Base(objects) == "objects" {
		_, errObjects := os.Stat(objects)
		_, errIndex := os.Stat(filepath.Join(filepath.Dir(objects), IndexName))
		if errors.Is(errObjects, fs.ErrNotExist) || errors.Is(errIndex, fs.ErrNotExist) {
			return fmt.Errorf("%w (%s): %w", ErrCacheGone, filepath.Dir(objects), syscall.ENOENT)
		}
	}
	return fmt.Errorf("%w: %w", ErrObjectCorrupt, fs.ErrNotExist)
}

// openSized opens the file at path that holds the object of key (its
// own, or its pack's) and checks that it has want bytes: one that is
// missing or of another size is ErrObjectCorrupt (the index names it).
func openSized(path string, key Key, want uint64) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: object %s: %w", path, key, MissingObject(path))
	}
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", key, err) // the error names path
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w: not a file (%s)", path, ErrObjectCorrupt, st.Mode().Type())
	}
	if uint64(st.Size()) != want {
		f.Close()
		return nil, fmt.Errorf("%s: %w: %d bytes, index says %d", path, ErrObjectCorrupt, st.Size(), want)
	}
	return f, nil
}

// CheckPacks hashes each pack of keys whole, the padding between its
// members included, against its key, jobs at a time: damage no member's
// own check sees (in the padding) is ErrObjectCorrupt. errs[i] is that of
// keys[i] (nil: whole, or not hashed). Members' bytes are each checked on
// their own elsewhere (content keys, payload checksums). A pack with bytes
// no member covers (one whose damaged member a later run stored anew
// elsewhere, until gc rewrites it) no longer hashes to its key, and is
// not hashed. A mismatch's error does not name the pack's file (FilePath
// does); errors of opening it do. done, where not nil, is called with
// each pack's size once it is hashed or passed over, from the goroutine
// that did (for a progress bar).
func (c *Cache) CheckPacks(ctx context.Context, keys []Key, jobs int, done func(size uint64)) []error {
	dead := c.ix.deadBytes()
	errs := make([]error, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(jobs, len(keys))) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) || ctx.Err() != nil {
					return
				}
				if dead[keys[i]] == 0 {
					errs[i] = c.checkPack(keys[i])
				}
				if o := c.ix.Objects[keys[i]]; done != nil && o != nil {
					done(o.Size)
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// checkPack hashes the pack of key whole against key.
func (c *Cache) checkPack(key Key) error {
	r, o, err := c.OpenObject(key)
	if err != nil {
		return err
	}
	defer r.Close()
	if o.Kind != KindPack {
		return fmt.Errorf("object %s is no pack (%s)", key, o.Kind)
	}
	h := newPackHasher()
	if _, err := io.Copy(h, r); err != nil {
		return err
	}
	if got := KeyFromSum([32]byte(h.Sum(nil))); got != key {
		return fmt.Errorf("%w: its hash is %s, not its key (bytes between or in its members changed)", ErrObjectCorrupt, got)
	}
	return nil
}

// SetPackMax sets the stored size at or below which committed objects go
// into packs (0: none are packed; at most MaxPackMax). The default is
// DefaultPackMax.
func (w *Writer) SetPackMax(n uint64) {
	n = min(n, MaxPackMax)
	w.mu.Lock()
	w.packMax = n
	w.mu.Unlock()
}

// pendingObject is a small object waiting for Commit to put it into a
// pack: a file in tmp/ (path), or meta.Size bytes at off in the writer's
// spill file seg.
type pendingObject struct {
	path string
	seg  int
	off  int64
	meta *Object
}

// packOrder returns the pending keys in the order their packs should hold
// them (w.mu held): the sources' bytes in file order, so a layer's small
// tensors lie side by side, then the rest in the order they were put.
func (w *Writer) packOrder() []Key {
	return w.sourceOrder(func(k Key) bool { _, ok := w.pending[k]; return ok }, w.pendingOrder)
}

// sourceOrder returns the keys that has accepts in the sources' file
// order, then those of rest not among them, in rest's order (w.mu held).
func (w *Writer) sourceOrder(has func(Key) bool, rest []Key) []Key {
	var order []Key
	seen := map[Key]bool{}
	add := func(k Key) {
		if has(k) && !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	for _, s := range w.ix.Sources {
		if s.Index != nil {
			add(s.Index.Key)
		}
		for _, sh := range s.Shards {
			for _, r := range fileOrder(&sh) {
				add(r.Key)
			}
		}
	}
	for _, k := range rest {
		add(k)
	}
	return order
}

// fileOrder returns a shard's regions and tensors by offset.
func fileOrder(sh *Shard) []Region {
	regs := make([]Region, 0, 1+len(sh.Tensors)+len(sh.Gaps))
	regs = append(regs, sh.Header)
	ti, gi := 0, 0
	for ti < len(sh.Tensors) || gi < len(sh.Gaps) {
		if gi == len(sh.Gaps) || ti < len(sh.Tensors) && sh.Tensors[ti].Offset <= sh.Gaps[gi].Offset {
			t := &sh.Tensors[ti]
			regs = append(regs, Region{Offset: t.Offset, Size: t.Size, Key: t.Key})
			ti++
			continue
		}
		regs = append(regs, sh.Gaps[gi])
		gi++
	}
	return regs
}

// packPending writes the pending objects into packs, moves the packs into
// place and records them and their members (w.mu held). The bytes of a
// pack's members are let go once it is in place (their files in tmp/,
// their spill files once every member of those is packed), so the run
// needs about one pack of disk beyond its pending bytes, not twice them;
// after an error the members still pending are those not yet packed.
func (w *Writer) packPending(ctx context.Context) error {
	if len(w.pending) == 0 {
		w.spill.drop() // a file whose write failed, if any
		return nil
	}
	order := w.packOrder()
	var pw *packWriter
	finish := func() error {
		if pw == nil {
			return nil
		}
		err := pw.finish(w)
		if err == nil {
			for _, k := range pw.members {
				w.dropPending(k)
			}
		}
		pw = nil
		return err
	}
	for _, k := range order {
		if err := ctx.Err(); err != nil {
			if pw != nil {
				pw.abort()
			}
			return err
		}
		p := w.pending[k]
		if pw != nil && pw.size+PackAlign+p.meta.Size > packTarget {
			if err := finish(); err != nil {
				return err
			}
		}
		if pw == nil {
			var err error
			if pw, err = newPackWriter(w.dir); err != nil {
				return err
			}
		}
		if err := pw.add(k, p, &w.spill); err != nil {
			pw.abort()
			return err
		}
	}
	if err := finish(); err != nil {
		return err
	}
	w.spill.drop()
	w.pendingOrder = w.pendingOrder[:0]
	return nil
}

// dropPending forgets the pending object k, now packed, and lets its
// bytes go (w.mu held).
func (w *Writer) dropPending(k Key) {
	p, ok := w.pending[k]
	if !ok {
		return
	}
	delete(w.pending, k)
	if p.path != "" {
		os.Remove(p.path)
	} else {
		w.spill.packed(p.seg)
	}
}

// packWriteBytes is the size of a pack writer's buffer. The members are
// small, and a file written a member at a time is cached by the kernel
// in pages as small as the writes: read back from the page cache (every
// load of packed tensors), a pack written in 2 KiB writes copied at 27-30
// GB/s on dev where one written in writes of 64 KiB or more copied at
// 44-48.
const packWriteBytes = 1 << 20

// packWriter builds one pack in a temporary file.
type packWriter struct {
	f       *os.File
	w       *bufio.Writer // over f
	h       hash.Hash
	size    uint64
	members []Key
	metas   []*Object
	buf     []byte
}

func newPackWriter(dir string) (*packWriter, error) {
	f, err := atomicfile.CreateTemp(filepath.Join(dir, "tmp"), "pack")
	if err != nil {
		return nil, err
	}
	return &packWriter{f: f, w: bufio.NewWriterSize(f, packWriteBytes), h: newPackHasher()}, nil
}

// add appends a pending object at the next aligned offset, reading it
// from its file or from sp.
func (pw *packWriter) add(k Key, p pendingObject, sp *spill) error {
	pad := alignPack(pw.size) - pw.size
	n := int(pad + p.meta.Size)
	pw.buf = slices.Grow(pw.buf[:0], n)[:n]
	clear(pw.buf[:pad])
	b := pw.buf[pad:]
	var err error
	if p.path != "" {
		var got []byte
		if got, err = os.ReadFile(p.path); err == nil && len(got) != len(b) {
			err = fmt.Errorf("shardcache: object %s is %d bytes, meta says %d", k, len(got), p.meta.Size)
		}
		copy(b, got)
	} else {
		err = sp.read(k, b, p.seg, p.off)
	}
	if err != nil {
		return err
	}
	if _, err := pw.w.Write(pw.buf); err != nil {
		return err
	}
	pw.h.Write(pw.buf)
	m := *p.meta
	m.Offset = pw.size + pad
	pw.size += pad + p.meta.Size
	pw.members = append(pw.members, k)
	pw.metas = append(pw.metas, &m)
	return nil
}

// finish moves the pack into place under its content key and records it
// and its members.
func (pw *packWriter) finish(w *Writer) error {
	defer pw.abort()
	if err := pw.w.Flush(); err != nil {
		return err
	}
	if err := pw.f.Close(); err != nil {
		return err
	}
	key := KeyFromSum([32]byte(pw.h.Sum(nil)))
	p, err := objectPath(w.dir, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), atomicfile.DirPerm); err != nil {
		return err
	}
	if err := os.Rename(pw.f.Name(), p); err != nil {
		return err
	}
	w.record(key, &Object{Kind: KindPack, Size: pw.size, RawSize: pw.size})
	for i, k := range pw.members {
		pw.metas[i].Pack = key
		w.record(k, pw.metas[i])
	}
	return nil
}

// abort removes the temporary file of a pack not moved into place.
func (pw *packWriter) abort() {
	pw.f.Close()
	os.Remove(pw.f.Name())
}

// record adds an object to the index (w.mu held), remembering it as added
// by this run if it is new.
func (w *Writer) record(key Key, meta *Object) {
	if _, ok := w.ix.Objects[key]; !ok {
		w.added[key] = true
	} else {
		w.replaced[key] = true
	}
	w.ix.Objects[key] = meta
	w.checked[key] = true // written by this writer: a damaged one replaced
}

// PackStats counts a cache's packs.
type PackStats struct {
	Packs     int    `json:"packs"`
	PackBytes uint64 `json:"pack_bytes"`
	Members   int    `json:"packed_objects"`
	// DeadBytes are bytes of packs that no recorded member covers (members
	// gc dropped while others in the same pack are still used).
	DeadBytes uint64 `json:"pack_dead_bytes"`
}

// Packs counts the index's packs and their members.
func (ix *Index) Packs() PackStats {
	var s PackStats
	for _, o := range ix.Objects {
		switch {
		case o.Kind == KindPack:
			s.Packs++
			s.PackBytes += o.Size
		case o.Pack != "":
			s.Members++
		}
	}
	for _, d := range ix.deadBytes() {
		s.DeadBytes += d
	}
	return s
}

// deadBytes returns the bytes of each pack that no recorded member covers
// (0 for a pack its members cover whole).
func (ix *Index) deadBytes() map[Key]uint64 {
	members := map[Key][]*Object{}
	for _, o := range ix.Objects {
		if o.Pack != "" {
			members[o.Pack] = append(members[o.Pack], o)
		}
	}
	dead := map[Key]uint64{}
	for k, o := range ix.Objects {
		if o.Kind != KindPack {
			continue
		}
		ms := members[k]
		sort.Slice(ms, func(i, j int) bool { return ms[i].Offset < ms[j].Offset })
		pos, d := uint64(0), uint64(0) // end of the last live member, aligned
		for _, m := range ms {
			if m.Offset > pos {
				d += m.Offset - pos
			}
			pos = max(pos, alignPack(m.Offset+m.Size))
		}
		if o.Size > pos {
			d += o.Size - pos
		}
		dead[k] = d
	}
	return dead
}

func alignPack(n uint64) uint64 { return (n + PackAlign - 1) &^ (PackAlign - 1) }

// packKeyOf returns the key a pack of bytes b has.
func packKeyOf(b []byte) Key {
	h := newPackHasher()
	h.Write(b)
	return KeyFromSum([32]byte(h.Sum(nil)))
}

package shardcache

// Objects being written (ObjectFile) and the pending objects they leave
// for Commit's packs (spill).

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/splitzip/splitzip/atomicfile"

	"golang.org/x/sys/unix"
)

// BufferedObjectBytes is the most bytes of an object being written that
// an ObjectFile holds in memory (and no more than the writer's pack
// limit): an object that grows past it is moved into a temporary file.
// An object bound for a pack thus costs no file of its own: a checkpoint
// of 100,000 small tensors no longer creates, reads back and removes
// 100,000 temporary files.
const BufferedObjectBytes = 1 << 20

// ObjectFile is an object being written: in memory while it is small
// enough to go into a pack (BufferedObjectBytes), else a temporary file
// in tmp/, until Commit.
type ObjectFile struct {
	w *Writer
	// f is the temporary file, nil while the bytes are in mem; pos is
	// Write's offset into mem; max, the most bytes mem takes (0: a file
	// from the start).
	f   *os.File
	mem *[]byte
	pos int64
	max int64
	// pending says Commit left the object for a pack; done, that Commit
	// finished with it (Abort then does nothing).
	pending, done bool
	// written counts the bytes Write wrote; hinted, those of them whose
	// writeback startWriteback has asked for.
	written, hinted int64
	// crc is the CRC-32C of what Write wrote, in order; scattered says
	// WriteAt, Seek or Truncate wrote too, so crc is not the object's.
	crc       uint32
	scattered bool
}

// castagnoli is the CRC-32C table: raw objects' checksums are CRC-32C, as
// payloads' are (package codec).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// writebackStep is how many bytes Write lets pile up in the page cache
// before it asks the kernel to start writing them to disk (WriteAt, the
// fixed codec's, does not: its objects are hinted whole at Commit).
const writebackStep = 8 << 20

// memPool recycles the buffers of objects kept in memory.
var memPool = sync.Pool{New: func() any { return new([]byte) }}

// NewObject starts a new object: in memory where the writer packs
// objects, else in a temporary file.
func (w *Writer) NewObject() (*ObjectFile, error) {
	w.mu.Lock()
	limit := int64(min(w.packMax, BufferedObjectBytes))
	w.mu.Unlock()
	o := &ObjectFile{w: w, max: limit}
	if limit == 0 {
		if err := o.toFile(); err != nil {
			return nil, err
		}
		return o, nil
	}
	o.mem = memPool.Get().(*[]byte)
	*o.mem = (*o.mem)[:0]
	return o, nil
}

// Name is the object's temporary file, or "" while it is in memory.
func (o *ObjectFile) Name() string {
	if o.f == nil {
		return ""
	}
	return o.f.Name()
}

// toFile moves the object's bytes from memory into a temporary file, or
// starts one, for an object that is not to stay in memory.
func (o *ObjectFile) toFile() error {
	f, err := atomicfile.CreateTemp(filepath.Join(o.w.dir, "tmp"), "object")
	if err != nil {
		return o.w.cacheError(err)
	}
	if o.mem != nil {
		_, err = f.Write(*o.mem)
		if err == nil {
			_, err = f.Seek(o.pos, io.SeekStart)
		}
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			return o.w.cacheError(err)
		}
		o.freeMem()
	}
	o.f = f
	return nil
}

// fits reports whether bytes up to end stay in memory, moving the object
// into a file when they do not.
func (o *ObjectFile) fits(end int64) (bool, error) {
	if o.f != nil {
		return false, nil
	}
	if end <= o.max {
		return true, nil
	}
	return false, o.toFile()
}

// freeMem gives the memory back to the pool.
func (o *ObjectFile) freeMem() {
	if o.mem != nil {
		*o.mem = (*o.mem)[:0]
		memPool.Put(o.mem)
		o.mem = nil
	}
}

// writeMem writes b at off into memory (which fits it), zero-filling any
// hole before it.
func (o *ObjectFile) writeMem(b []byte, off int64) {
	m := *o.mem
	if end, n := off+int64(len(b)), int64(len(m)); end > n {
		m = slices.Grow(m, int(end-n))[:end]
		if off > n {
			clear(m[n:off]) // a pooled buffer's old bytes
		}
	}
	copy(m[off:], b)
	*o.mem = m
}

// Write writes to the object; an error names the cache, not the
// temporary file.
func (o *ObjectFile) Write(b []byte) (int, error) {
	in, err := o.fits(o.pos + int64(len(b)))
	if err != nil {
		return 0, err
	}
	n := len(b)
	if in {
		o.writeMem(b, o.pos)
		o.pos += int64(n)
	} else {
		n, err = o.f.Write(b)
	}
	o.crc = crc32.Update(o.crc, castagnoli, b[:n])
	o.written += int64(n)
	if o.f != nil && !o.w.noSync && o.written-o.hinted >= writebackStep {
		startWriteback(o.f, o.hinted, o.written-o.hinted)
		o.hinted = o.written
	}
	return n, o.w.cacheError(err)
}

// ReadFrom writes what r reads through Write (not around it, as
// *os.File's would), so that the CRC-32C and the writeback hints see it.
func (o *ObjectFile) ReadFrom(r io.Reader) (int64, error) {
	bp := readFromBufs.Get().(*[]byte)
	defer readFromBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{o}, r, *bp)
}

// readFromBufs hold ReadFrom's buffers: 1 MiB, for few write calls.
var readFromBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// WriteString is Write of s.
func (o *ObjectFile) WriteString(s string) (int, error) { return o.Write([]byte(s)) }

// Seek moves the object's offset: what Write writes next is no longer the
// object's bytes in order, so no CRC-32C is recorded for it.
func (o *ObjectFile) Seek(off int64, whence int) (int64, error) {
	o.scattered = true
	if o.f != nil {
		return o.f.Seek(off, whence)
	}
	switch whence {
	case io.SeekCurrent:
		off += o.pos
	case io.SeekEnd:
		off += int64(len(*o.mem))
	}
	if off < 0 {
		return o.pos, fmt.Errorf("shardcache: seek to %d: negative offset", off)
	}
	o.pos = off
	return off, nil
}

// Truncate changes the object's size; no CRC-32C is recorded for it then.
func (o *ObjectFile) Truncate(size int64) error {
	o.scattered = true
	in, err := o.fits(size)
	switch {
	case err != nil:
		return err
	case !in:
		return o.w.cacheError(o.f.Truncate(size))
	case size < 0:
		return fmt.Errorf("shardcache: truncate to %d: negative size", size)
	case size <= int64(len(*o.mem)):
		*o.mem = (*o.mem)[:size]
	default:
		o.writeMem(nil, size)
	}
	return nil
}

// WriteAt writes to the object at off; an error names the cache, not the
// temporary file.
func (o *ObjectFile) WriteAt(b []byte, off int64) (int, error) {
	o.scattered = true
	if off < 0 {
		return 0, fmt.Errorf("shardcache: write at %d: negative offset", off)
	}
	in, err := o.fits(off + int64(len(b)))
	if err != nil {
		return 0, err
	}
	if in {
		o.writeMem(b, off)
		return len(b), nil
	}
	n, err := o.f.WriteAt(b, off)
	return n, o.w.cacheError(err)
}

// ReadAt reads what the object holds at off.
func (o *ObjectFile) ReadAt(b []byte, off int64) (int, error) {
	if o.f != nil {
		return o.f.ReadAt(b, off)
	}
	if off < 0 {
		return 0, fmt.Errorf("shardcache: read at %d: negative offset", off)
	}
	m := *o.mem
	if off >= int64(len(m)) {
		return 0, io.EOF
	}
	n := copy(b, m[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// size is the object's size so far.
func (o *ObjectFile) size() (int64, error) {
	if o.f == nil {
		return int64(len(*o.mem)), nil
	}
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// cacheError is err, from writing into the cache, naming the cache folder
// in place of a temporary file (whose name means nothing to a user); other
// errors it returns as they are.
func (w *Writer) cacheError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && atomicfile.IsTemp(filepath.Base(pe.Path)) {
		return &fs.PathError{Op: pe.Op, Path: w.dir, Err: pe.Err}
	}
	var le *os.LinkError
	if errors.As(err, &le) && atomicfile.IsTemp(filepath.Base(le.Old)) {
		return &fs.PathError{Op: le.Op, Path: w.dir, Err: le.Err}
	}
	return err
}

// Commit moves the object into place under key and records it with meta,
// or, when it is small enough for a pack (SetPackMax), leaves it pending
// for Writer.Commit to write into one. A raw object written in order gets
// its bytes' CRC-32C as its checksum: a meta that names another fails.
func (o *ObjectFile) Commit(key Key, meta *Object) (err error) {
	defer func() { err = o.w.cacheError(err) }()
	size, err := o.size()
	if err != nil {
		o.Abort()
		return err
	}
	if uint64(size) != meta.Size {
		o.Abort()
		return fmt.Errorf("shardcache: object %s is %d bytes, meta says %d", key, size, meta.Size)
	}
	if meta.Kind == KindRaw && !o.scattered && o.written == size {
		if meta.Checksum != 0 && meta.Checksum != o.crc {
			o.Abort()
			return fmt.Errorf("shardcache: raw object %s: %w: its bytes' CRC-32C is %08x, its record says %08x", key, ErrObjectCorrupt, o.crc, meta.Checksum)
		}
		meta.Checksum = o.crc
	}
	w := o.w
	w.mu.Lock()
	packed := meta.Size <= w.packMax && meta.Kind != KindPack
	if packed && o.f == nil {
		// Into the spill file, under the writer's lock, so that Commit's
		// packs never miss bytes a pending record names.
		defer w.mu.Unlock()
		defer o.Abort()
		if _, ok := w.pending[key]; ok {
			return nil // put twice by concurrent writers
		}
		seg, off, err := w.spill.put(w.dir, *o.mem)
		if err != nil {
			return err
		}
		w.addPending(key, pendingObject{seg: seg, off: off, meta: meta})
		return nil
	}
	w.mu.Unlock()
	if o.f == nil {
		if err := o.toFile(); err != nil {
			return err
		}
	}
	// An object bound for a pack is copied into it and removed: only
	// the others are worth writing back now.
	if !w.noSync && !packed {
		startWriteback(o.f, 0, 0)
	}
	if err := o.f.Close(); err != nil {
		o.Abort()
		return err
	}
	w.mu.Lock()
	if packed {
		defer w.mu.Unlock()
		if _, ok := w.pending[key]; ok {
			os.Remove(o.f.Name()) // put twice by concurrent writers
			o.done = true
			return nil
		}
		w.addPending(key, pendingObject{path: o.f.Name(), meta: meta})
		o.pending, o.done = true, true
		return nil
	}
	w.mu.Unlock()
	defer o.Abort()
	p, err := objectPath(o.w.dir, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), atomicfile.DirPerm); err != nil {
		return err
	}
	if err := os.Rename(o.f.Name(), p); err != nil {
		return err
	}
	o.done = true
	w.mu.Lock()
	w.record(key, meta)
	w.mu.Unlock()
	return nil
}

// startWriteback asks the kernel to start writing n bytes of f's dirty
// pages from off (n 0: to the end) to disk now, without waiting for them,
// so that Commit's flush (syncfs) finds most of a run's objects written
// already: writeback overlaps the rest of the run instead of following
// it. Only a hint; Commit's flush is what makes objects durable, so an
// error (a filesystem without it) is ignored.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// Abort discards an object not committed; after Commit it does nothing.
func (o *ObjectFile) Abort() {
	o.freeMem()
	if o.f == nil || o.done && o.pending {
		return
	}
	o.f.Close()
	if !o.done {
		os.Remove(o.f.Name())
	}
}

// addPending records a pending object (w.mu held).
func (w *Writer) addPending(key Key, p pendingObject) {
	w.pending[key] = p
	w.pendingOrder = append(w.pendingOrder, key)
}

// spill holds the pending objects written in memory, from their Commit
// to the writer's, which copies them into packs: one write and one read
// an object, where a temporary file of its own costs a creation, a close,
// an open and a removal. Its bytes go into files in tmp/ of at most
// spillBytes each (unless one object is larger), so that no file there
// outgrows a pack (a limit on file sizes, RLIMIT_FSIZE or a filesystem's,
// is met as before), and each file goes once its objects are all packed.
// Guarded by the writer's lock.
type spill struct {
	files []spillFile
	w     *os.File // the last of files, being appended to; nil once full or gone
	size  int64    // its bytes
	r     *os.File // the file read last, files[rseg]
	rseg  int
}

// spillFile is one file of a spill: its name ("" once removed) and how
// many of its objects are not packed yet.
type spillFile struct {
	name string
	left int
}

// spillBytes is the most bytes of a spill file: a pack's.
const spillBytes = packTarget

// put appends b to the spill, in a new file in dir's tmp/ where the last
// is full or there is none, and returns where it lies.
func (s *spill) put(dir string, b []byte) (seg int, off int64, err error) {
	if s.w != nil && s.size > 0 && s.size+int64(len(b)) > spillBytes {
		s.w.Close()
		s.w = nil
	}
	if s.w == nil {
		f, err := atomicfile.CreateTemp(filepath.Join(dir, "tmp"), "pending")
		if err != nil {
			return 0, 0, err
		}
		s.files = append(s.files, spillFile{name: f.Name()})
		s.w, s.size = f, 0
	}
	if _, err := s.w.WriteAt(b, s.size); err != nil {
		return 0, 0, err
	}
	seg, off = len(s.files)-1, s.size
	s.size += int64(len(b))
	s.files[seg].left++
	return seg, off, nil
}

// read reads len(b) bytes at off of spill file seg.
func (s *spill) read(b []byte, seg int, off int64) error {
	if seg < 0 || seg >= len(s.files) || s.files[seg].name == "" {
		return fmt.Errorf("shardcache: pending object in spill file %d, which is gone", seg)
	}
	if s.r == nil || s.rseg != seg {
		if s.r != nil {
			s.r.Close()
		}
		f, err := os.Open(s.files[seg].name)
		if err != nil {
			s.r = nil
			return err
		}
		s.r, s.rseg = f, seg
	}
	_, err := s.r.ReadAt(b, off)
	return err
}

// packed counts one object of spill file seg as packed, and removes the
// file once none of its objects is left.
func (s *spill) packed(seg int) {
	f := &s.files[seg]
	if f.left--; f.left > 0 || f.name == "" {
		return
	}
	if s.r != nil && s.rseg == seg {
		s.r.Close()
		s.r = nil
	}
	if s.w != nil && seg == len(s.files)-1 {
		s.w.Close()
		s.w = nil
	}
	os.Remove(f.name)
	f.name = ""
}

// drop closes and removes the spill's files: nothing pending is in them.
func (s *spill) drop() {
	for _, f := range []*os.File{s.w, s.r} {
		if f != nil {
			f.Close()
		}
	}
	for _, f := range s.files {
		if f.name != "" {
			os.Remove(f.name)
		}
	}
	*s = spill{}
}

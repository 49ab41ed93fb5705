package shardcache

// Objects being written: in memory while small enough for a pack, else in
// a temporary file in tmp/.

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
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
// in tmp/, until Commit. Its methods behave as a file's would, in either
// place; after Commit or Abort they return os.ErrClosed. One goroutine
// uses it.
type ObjectFile struct {
	w *Writer
	// f is the temporary file, nil while the bytes are in mem; pos is
	// Write's offset into mem; max, the most bytes mem takes (0: a file
	// from the start).
	f   *os.File
	mem *[]byte
	pos int64
	max int64
	// done says Commit or Abort finished with the object.
	done bool
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

// name is the object's temporary file, or "" while it is in memory.
func (o *ObjectFile) name() string {
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

// fits reports whether n bytes at off stay in memory, moving the object
// into a file when they do not; os.ErrClosed after Commit or Abort.
func (o *ObjectFile) fits(off, n int64) (bool, error) {
	switch {
	case o.done:
		return false, os.ErrClosed
	case o.f != nil:
		return false, nil
	case off <= o.max && n <= o.max-off: // off+n, without overflowing
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

// resize makes the object in memory size bytes long (at most o.max),
// zero-filling what it adds: a pooled buffer holds old bytes. It grows
// the buffer's capacity no further than o.max, what the writer's memory
// budget counts.
func (o *ObjectFile) resize(size int64) {
	m := *o.mem
	n := int64(len(m))
	switch {
	case size <= n:
		*o.mem = m[:size]
		return
	case size > int64(cap(m)):
		grown := make([]byte, n, min(max(size, 2*int64(cap(m))), o.max))
		copy(grown, m)
		m = grown
	}
	m = m[:size]
	clear(m[n:])
	*o.mem = m
}

// writeMem writes b at off into memory, which fits it.
func (o *ObjectFile) writeMem(b []byte, off int64) {
	if len(b) == 0 {
		return // as a file: an empty write extends nothing
	}
	if end := off + int64(len(b)); end > int64(len(*o.mem)) {
		o.resize(end)
	}
	copy((*o.mem)[off:], b)
}

// Write writes to the object; an error names the cache, not the
// temporary file.
func (o *ObjectFile) Write(b []byte) (int, error) {
	in, err := o.fits(o.pos, int64(len(b)))
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
	switch {
	case o.done:
		return 0, os.ErrClosed
	case o.f != nil:
		return o.f.Seek(off, whence)
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += o.pos
	case io.SeekEnd:
		off += int64(len(*o.mem))
	default:
		return o.pos, fmt.Errorf("shardcache: seek: invalid whence %d", whence)
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
	if size < 0 {
		return fmt.Errorf("shardcache: truncate to %d: negative size", size)
	}
	in, err := o.fits(0, size)
	switch {
	case err != nil:
		return err
	case !in:
		return o.w.cacheError(o.f.Truncate(size))
	}
	o.resize(size)
	return nil
}

// WriteAt writes to the object at off; an error names the cache, not the
// temporary file.
func (o *ObjectFile) WriteAt(b []byte, off int64) (int, error) {
	o.scattered = true
	if off < 0 {
		return 0, fmt.Errorf("shardcache: write at %d: negative offset", off)
	}
	in, err := o.fits(off, int64(len(b)))
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
	switch {
	case o.done:
		return 0, os.ErrClosed
	case o.f != nil:
		return o.f.ReadAt(b, off)
	case off < 0:
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
	switch {
	case o.done:
		return 0, os.ErrClosed
	case o.f == nil:
		return int64(len(*o.mem)), nil
	}
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Commit moves the object into place under key and records it with meta,
// whose Size must be the object's, or, when it is small enough for a pack
// (SetPackMax), leaves it pending for Writer.Commit to write into one. A
// raw object written in order gets its bytes' CRC-32C as its checksum: a
// meta that names another fails. A failed Commit discards the object.
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
		// Into the spill, under the writer's lock, so that Commit's packs
		// never miss bytes a pending record names.
		defer w.mu.Unlock()
		defer o.Abort()
		if w.putBefore(key, meta) {
			return nil // put twice by concurrent writers: the first stays
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
			o.Abort()
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
	defer o.Abort() // the file's name is gone or pending by then
	if packed {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.putBefore(key, meta) {
			return nil // put twice by concurrent writers: Abort removes it
		}
		w.addPending(key, pendingObject{path: o.f.Name(), meta: meta})
		o.done = true
		return nil
	}
	p, err := objectPath(o.w.dir, key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), atomicfile.DirPerm); err != nil {
		return err
	}
	// Under the lock from the check to the record, so that of two
	// writers of one key the first's file and record stay.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.putBefore(key, meta) {
		return nil // put twice by concurrent writers: Abort removes it
	}
	if err := os.Rename(o.f.Name(), p); err != nil {
		return err
	}
	o.done = true
	w.record(key, meta)
	return nil
}

// putBefore reports whether this writer stored key already (pending for a
// pack or recorded) or the index records it in another form than meta's:
// a second object of the same bytes, perhaps in another form (a payload
// and a raw copy of one key: tensors of two dtypes with the same bytes),
// is dropped, and its tensor takes the first's form (Writer.Has). An
// object of an earlier run that Has found damaged is replaced by one of
// its own form only: the index's other records name that form (review
// 70b); one of another form leaves it damaged, for verify to report.
// Called with w.mu held.
func (w *Writer) putBefore(key Key, meta *Object) bool {
	if _, ok := w.pending[key]; ok || w.added[key] {
		return true
	}
	o, ok := w.ix.Objects[key]
	return ok && o.Kind != meta.Kind
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
	if o.done {
		return
	}
	o.done = true
	if o.f != nil {
		o.f.Close()
		os.Remove(o.f.Name())
	}
}

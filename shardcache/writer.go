package shardcache

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/splitzip/splitzip/atomicfile"

	"golang.org/x/sys/unix"
)

// Writer adds checkpoints to a cache. It holds the cache's lock until Close.
// Its methods are safe for concurrent use.
type Writer struct {
	dir         string
	lock        *os.File
	mu          sync.Mutex
	ix          *Index
	noSync      bool
	indexMended error // the damaged index's error, where Create wrote it again from its backup
	// added holds the objects moved into place since the last Commit; Close
	// removes them when no Commit followed, so a failed run leaves nothing
	// behind that gc would have to find.
	added map[Key]bool
	// packMax is the stored size at or below which an object waits in
	// pending (in tmp/) for Commit to write it into a pack.
	packMax      uint64
	pending      map[Key]pendingObject
	pendingOrder []Key
	spill        spill // the pending objects that have no file of their own
	// leftFiles and leftBytes count the files killed writers left in
	// tmp/, which Create removed (GC reports them).
	leftFiles int
	leftBytes uint64
	// checked holds the objects of earlier runs Has found intact;
	// damaged, those it found missing, cut short or damaged (for a
	// caller to store again), with what was wrong; check, the check of
	// payloads' bytes (SetPayloadCheck).
	checked map[Key]bool
	// replaced holds the keys of earlier objects this writer recorded
	// anew (a damaged one mended): what Mended reports.
	replaced map[Key]bool
	damaged  map[Key]error
	// checkErr is the first error of a check that could not read an
	// object (not a damaged one): Commit returns it.
	checkErr error
	check    PayloadCheck
}

// SetNoSync makes Commit skip flushing objects and the index to disk. A
// power loss may then leave an index naming objects whose bytes were
// lost; verify rejects such a cache and loaders check every payload's
// checksum, so nothing wrong is served, but the cache must be rebuilt.
func (w *Writer) SetNoSync(b bool) { w.noSync = b }

// ErrOccupied reports an output folder for a cache that holds other
// files, or is a file: a usage error, as for any output that exists.
var ErrOccupied = errors.New("refusing to write a cache there")

// MarkerName is the file that marks a directory as a splitzip cache from
// its creation on, before any index is committed.
const MarkerName = "SPLITZIP-CACHE"

// LockName is the file writers hold an exclusive lock on (flock), and a
// dry run of gc a shared one.
const LockName = "lock"

const markerText = "This directory is a splitzip cache. Its index is " + IndexName + ".\n"

// Create opens the cache in dir for writing, making it if dir does not
// exist or is empty. A non-empty dir that is not a cache is refused with
// ErrNotCache; a cache another writer holds, with ErrLocked. A cache whose
// earlier writer was interrupted before its first commit is reused, and
// the temporary files of writers that were killed are removed.
func Create(dir string) (*Writer, error) {
	dir = filepath.Clean(dir) // "cache/" names the folder, not a parent of it
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, syscall.ENOTDIR):
		if f := fileAbove(dir); f != dir {
			return nil, fmt.Errorf("%s: %s is a file, not a folder: %w (choose another folder)", dir, f, ErrOccupied)
		}
		return nil, fmt.Errorf("%s: a file, not a folder: %w (choose another folder)", dir, ErrOccupied)
	case err != nil:
		return nil, err
	case len(ents) > 0:
		if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil && !bareCreate(dir, ents) {
			return nil, fmt.Errorf("%s: %w, and not empty: %w (choose another folder)", dir, ErrNotCache, ErrOccupied)
		}
	}
	if err := makeMarked(dir); err != nil {
		return nil, err
	}
	// The marker first, so that a writer killed at any point after it
	// leaves a directory the next one knows as a cache. It is written
	// once: rewriting it on every open would change a cache that nothing
	// else changes, and a full disk could truncate it.
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); errors.Is(err, fs.ErrNotExist) {
		if err := os.WriteFile(filepath.Join(dir, MarkerName), []byte(markerText), atomicfile.Perm); err != nil {
			return nil, atomicfile.Created(err)
		}
	}
	for _, d := range []string{filepath.Join(dir, "objects"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, atomicfile.DirPerm); err != nil {
			return nil, err
		}
	}
	lock, err := os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, atomicfile.Perm)
	if err != nil {
		return nil, atomicfile.Created(err)
	}
	if err := flockWait(context.Background(), lock, unix.LOCK_EX, lockWait); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: %w by another writer", dir, ErrLocked)
	}
	// A lock file a Discard removed after this one opened it is no lock
	// (a writer that opens the path now makes a new one): locked by the
	// writer that removed it, as far as this one can tell.
	if !sameFile(lock, filepath.Join(dir, LockName)) {
		lock.Close()
		return nil, fmt.Errorf("%s: %w by another writer", dir, ErrLocked)
	}
	ix := &Index{Objects: map[Key]*Object{}}
	var damaged error
	if _, err := os.Stat(filepath.Join(dir, IndexName)); errors.Is(err, fs.ErrNotExist) {
		// A new index would replace the backup of the lost one.
		if err := lostIndex(dir); err != nil {
			lock.Close()
			return nil, err
		}
	} else if err != nil {
		// Not a missing index (a loop of links, an I/O error): no empty
		// index may be committed over it and its backup.
		lock.Close()
		return nil, err
	} else {
		c, err := Open(dir)
		if err != nil {
			lock.Close()
			return nil, err
		}
		damaged = c.damaged
		c.Close() // a writer only adds files: readers may come and go
		ix = c.ix
		// The statistics before anything changes the index, which
		// Commit writes with them. Damaged there (which readers never
		// read), the index is mended from its backup as a damaged body is.
		if err := ix.LoadStats(); err != nil {
			var bix *Index
			berr := err
			if damaged == nil && errors.Is(err, ErrIndexCorrupt) {
				bix, berr = readBackup(dir, filepath.Join(dir, IndexName))
			}
			if berr != nil || bix == nil {
				lock.Close()
				return nil, err
			}
			ix, damaged = bix, err
		}
	}
	w := &Writer{dir: dir, lock: lock, ix: ix, added: map[Key]bool{}, replaced: map[Key]bool{}, checked: map[Key]bool{}, packMax: DefaultPackMax, pending: map[Key]pendingObject{}}
	w.leftFiles, w.leftBytes = removeTemps(filepath.Join(dir, "tmp"))
	if damaged != nil {
		// Read from the backup: the index is mended from it now, under
		// this writer's lock, whatever the writer goes on to do.
		b, err := os.ReadFile(filepath.Join(dir, BackupName))
		if err == nil {
			err = w.placeFile(IndexName, "index", b, func() error { return nil })
		}
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("%s: mending the damaged index from its backup: %w (the index: %v)", dir, err, damaged)
		}
		w.indexMended = damaged
	}
	return w, nil
}

// IndexMended is the error of the index that Create found damaged and wrote
// again from its backup (nil where it was whole).
func (w *Writer) IndexMended() error { return w.indexMended }

// lockWait is how long Create tries for the writer lock before
// ErrLocked: a writer killed a moment ago may still hold it (a new writer
// found it held 2 times in 3 straight after kill -9 of the last, free a
// second later).
const lockWait = time.Second

// fileAbove returns the path of dir itself or of the folder above it
// that is a file (what makes reading dir ENOTDIR), or dir when none is.
func fileAbove(dir string) string {
	for p := dir; ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
		if filepath.Dir(p) == p {
			return dir
		}
	}
}

// makeMarked makes dir, when it does not exist, as a folder holding the
// marker: made beside it under a temporary name and renamed into place,
// so that a writer killed meanwhile leaves no folder at dir that is
// neither absent nor a cache (at most the temporary one, a dot folder
// beside it). A folder another writer makes at dir meanwhile is taken
// as it is.
func makeMarked(dir string) error {
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, atomicfile.DirPerm); err != nil {
		return err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(parent, fmt.Sprintf(".%s.splitzip-new-%d-%x", filepath.Base(dir), os.Getpid(), rnd))
	err := os.Mkdir(tmp, atomicfile.DirPerm) // the umask applies, as to every folder of a cache
	if err == nil {
		if err = os.WriteFile(filepath.Join(tmp, MarkerName), []byte(markerText), atomicfile.Perm); err == nil {
			err = os.Rename(tmp, dir)
		}
		os.RemoveAll(tmp) // gone after the rename
	}
	if _, serr := os.Stat(dir); err != nil && serr == nil {
		return nil // made meanwhile by another writer
	}
	if err != nil {
		// The error is of dir: its temporary name is no concern of the user.
		return fmt.Errorf("making the cache folder: %w", atomicfile.Named(err, dir))
	}
	return nil
}

// bareCreate reports whether ents, dir's entries, are only what an
// interrupted Create of a build that made them before the marker left:
// empty objects and tmp folders.
func bareCreate(dir string, ents []fs.DirEntry) bool {
	for _, e := range ents {
		if !e.IsDir() || e.Name() != "objects" && e.Name() != "tmp" {
			return false
		}
		if sub, err := os.ReadDir(filepath.Join(dir, e.Name())); err != nil || len(sub) > 0 {
			return false
		}
	}
	return true
}

// removeTemps removes every file in a cache's tmp/ (the cache's lock
// held: every writer holds it, so they are what killed writers left) and
// returns how many it removed and their bytes.
func removeTemps(tmp string) (files int, bytes uint64) {
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || info.IsDir() {
			continue
		}
		if os.Remove(filepath.Join(tmp, e.Name())) == nil {
			files++
			bytes += uint64(info.Size())
		}
	}
	return files, bytes
}

// Dir returns the cache directory.
func (w *Writer) Dir() string { return w.dir }

// Earlier reports whether the object of key was stored before this
// writer's last Commit, or before it was opened: by an earlier run.
func (w *Writer) Earlier(key Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pending[key]; ok {
		return false
	}
	_, ok := w.ix.Objects[key]
	return ok && !w.added[key]
}

// Recorded returns the object this writer's index records for key, or
// the one pending for a pack, without checking it (Has checks): what form
// a tensor of those bytes takes in the cache, damaged or not.
func (w *Writer) Recorded(key Key) (*Object, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p, ok := w.pending[key]; ok {
		return p.meta, true
	}
	o, ok := w.ix.Objects[key]
	return o, ok
}

// EarlierKind returns the kind the index records for the object of key an
// earlier run stored (Earlier), unchecked, or "" for none.
func (w *Writer) EarlierKind(key Key) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.pending[key]; ok || w.added[key] {
		return ""
	}
	if o, ok := w.ix.Objects[key]; ok {
		return o.Kind
	}
	return ""
}

// Has reports whether the object with key is stored, so it need not be
// written again. An object an earlier run stored (Earlier) is checked
// once before it is trusted (Writer.checkEarlier): one that is missing,
// cut short or damaged is not stored, so the caller writes it again and
// its Commit replaces the damaged one (Mended lists them). One the check
// could not read (an I/O error, too many open files) is not stored either,
// and Commit fails with that error.
func (w *Writer) Has(key Key) (*Object, bool) {
	w.mu.Lock()
	if p, ok := w.pending[key]; ok {
		w.mu.Unlock()
		return p.meta, true
	}
	o, ok := w.ix.Objects[key]
	trusted := w.added[key] || w.checked[key]
	w.mu.Unlock()
	if !ok {
		return nil, false
	}
	if trusted {
		return o, true
	}
	if err := w.checkEarlier(key, o); err != nil {
		w.mu.Lock()
		switch {
		case errors.Is(err, ErrObjectCorrupt):
			if w.damaged == nil {
				w.damaged = map[Key]error{}
			}
			w.damaged[key] = err
		case w.checkErr == nil:
			// Not known to be damaged, nor known to be whole: stored
			// again, and the run fails at Commit with what happened.
			w.checkErr = fmt.Errorf("checking object %s stored before: %w", key, err)
		}
		w.mu.Unlock()
		return nil, false
	}
	w.mu.Lock()
	w.checked[key] = true
	w.mu.Unlock()
	return o, true
}

// PutBytes stores b as a raw object, unless it is stored already, and
// returns its key.
func (w *Writer) PutBytes(b []byte) (Key, error) {
	key := KeyOf(b)
	if _, ok := w.Has(key); ok {
		return w.rawKey(key)
	}
	o, err := w.NewObject()
	if err != nil {
		return "", err
	}
	if _, err := o.Write(b); err != nil {
		o.Abort()
		return "", err
	}
	if err := o.Commit(key, &Object{Kind: KindRaw, Size: uint64(len(b)), RawSize: uint64(len(b))}); err != nil {
		return "", err
	}
	return w.rawKey(key)
}

// rawKey returns key, stored, unless the cache holds its bytes as a
// payload (a tensor's of the same bytes, stored first): a shard header,
// gap or index file is read raw, and a key names one object in a cache,
// so that is ErrOtherForm.
func (w *Writer) rawKey(key Key) (Key, error) {
	// Recorded, not Has: a payload found damaged is the form still.
	if o, ok := w.Recorded(key); ok && o.Kind != KindRaw {
		return "", fmt.Errorf("%w: %s as %s, where a shard header, gap or index file must be raw (%s); compress this checkpoint into another cache", ErrOtherForm, "it holds these bytes", KindWords(o.Kind), key)
	}
	return key, nil
}

// KindWords names an object kind for a message: "a fixed payload", "an
// entropy payload", "a raw copy".
func KindWords(kind string) string {
	switch kind {
	case KindFixed:
		return "a fixed payload"
	case KindEntropy:
		return "an entropy payload"
	case KindRaw:
		return "a raw copy"
	}
	return "a " + kind
}

// PutFrom stores bytes [off, off+n) of r as a raw object, unless it is
// stored already, and returns its key. It streams them through buf, so
// a region of any size costs len(buf) bytes of memory.
func (w *Writer) PutFrom(r io.ReaderAt, off, n uint64, buf []byte) (Key, error) {
	o, err := w.NewObject()
	if err != nil {
		return "", err
	}
	defer o.Abort()
	h := NewHasher()
	for pos := uint64(0); pos < n; pos += uint64(len(buf)) {
		b := buf[:min(uint64(len(buf)), n-pos)]
		if _, err := r.ReadAt(b, int64(off+pos)); err != nil {
			if err == io.EOF {
				err = fmt.Errorf("short read at offset %d: file truncated", off+pos)
			}
			return "", err
		}
		h.Write(b)
		if _, err := o.Write(b); err != nil {
			return "", err
		}
	}
	key := KeyFromSum([32]byte(h.Sum(nil)))
	if _, ok := w.Has(key); ok {
		return w.rawKey(key)
	}
	if err := o.Commit(key, &Object{Kind: KindRaw, Size: n, RawSize: n}); err != nil {
		return "", err
	}
	return w.rawKey(key)
}

// SetSource records a compressed checkpoint, replacing the earlier record
// of the same checkpoint (the same Source.Path) and no other: several
// checkpoints may share a root, as single files of one folder do. It
// takes effect with Commit.
func (w *Writer) SetSource(s Source) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := s.Path()
	for i := range w.ix.Sources {
		if w.ix.Sources[i].Path() == id {
			w.ix.Sources[i] = s
			return
		}
	}
	w.ix.Sources = append(w.ix.Sources, s)
}

// Commit makes everything recorded so far durable and visible: it flushes
// the objects to disk, then writes the index to a temporary file and
// renames it over the old one. Where Has could not check an object an
// earlier run stored (not a damaged one: an error reading it) it commits
// nothing and returns that error.
func (w *Writer) Commit() error { return w.commit(context.Background()) }

// commit is Commit, given up when ctx ends before the index is written
// (the packs it wrote by then are this writer's additions, which Close
// removes).
func (w *Writer) commit(ctx context.Context) (err error) {
	defer func() { err = w.cacheError(err) }()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checkErr != nil {
		return w.checkErr
	}
	if err := w.packPending(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.ix.check(); err != nil {
		return fmt.Errorf("shardcache: refusing to write an inconsistent index: %v", err)
	}
	b, err := marshalIndex(w.ix)
	if err != nil {
		return err
	}
	// Objects first: the index must never name bytes a crash could lose.
	if !w.noSync {
		if err := unix.Syncfs(int(w.lock.Fd())); err != nil {
			return fmt.Errorf("%s: flushing the cache to disk: %w", w.dir, err)
		}
	}
	// A cache with an index has readers, and their lock (a cache of an
	// older build gets it here), before the index that lets them in.
	if err := w.placeFile(IndexName, "index", b, func() error { return makeReaders(w.dir) }); err != nil {
		return err
	}
	clear(w.added)
	if !w.noSync {
		d, err := os.Open(w.dir)
		if err != nil {
			return err
		}
		err = d.Sync()
		d.Close()
		if err != nil {
			return err
		}
	}
	// The backup after the index: at any moment one of the two is this
	// commit's or the last one's, whole. A backup that cannot be written
	// is removed rather than left behind the index (the commit stands).
	if err := w.writeBackup(b); err != nil {
		os.Remove(filepath.Join(w.dir, BackupName))
		return nil
	}
	if !w.noSync {
		// The backup's rename reaches the disk too: one a power loss
		// undid would be older than the index, and not read.
		if d, err := os.Open(w.dir); err == nil {
			d.Sync()
			d.Close()
		}
	}
	return nil
}

// writeBackup writes b, the index just committed, to BackupName.
func (w *Writer) writeBackup(b []byte) error {
	return w.placeFile(BackupName, "backup", b, func() error { return nil })
}

// placeFile writes b to the cache's file name through a temporary file
// in tmp/ (labelled label; synced first unless noSync) renamed over it,
// after before. The file keeps the mode of the index it replaces: a
// writer with a narrower umask must not lock the cache's other users out.
func (w *Writer) placeFile(name, label string, b []byte, before func() error) error {
	f, err := atomicfile.CreateTemp(filepath.Join(w.dir, "tmp"), label)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if !w.noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if st, err := os.Stat(filepath.Join(w.dir, IndexName)); err == nil {
		if err := os.Chmod(f.Name(), st.Mode().Perm()); err != nil {
			return err
		}
	}
	if err := before(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(w.dir, name))
}

// Cache returns a read view of what the writer has recorded.
func (w *Writer) Cache() *Cache {
	w.mu.Lock()
	defer w.mu.Unlock()
	return newCache(w.dir, w.ix)
}

// Close releases the lock and removes leftover temporary files, and the
// objects written since the last Commit: no committed index names them.
func (w *Writer) Close() error {
	w.dropUncommitted()
	return w.lock.Close()
}

// dropUncommitted removes leftover temporary files and the objects
// written since the last Commit, and forgets them.
func (w *Writer) dropUncommitted() {
	removeTemps(filepath.Join(w.dir, "tmp"))
	w.mu.Lock()
	for k := range w.added {
		if p, err := objectPath(w.dir, k); err == nil {
			if os.Remove(p) == nil { // nothing for a pack member
				// Its folder (objects/xx) too, where nothing else is in
				// it: an interrupted run left dozens of empty ones.
				os.Remove(filepath.Dir(p))
			}
		}
		delete(w.ix.Objects, k)
	}
	clear(w.added)
	clear(w.pending) // their files were in tmp/
	w.pendingOrder = nil
	w.spill.drop()
	w.mu.Unlock()
}

// Discard is Close for a writer whose run failed into a folder that was
// empty or absent before it: where no index was ever committed, it also
// removes the skeleton Create made (marker, objects/ and tmp/ where they
// hold no file, and the lock file, unlinked while it is still held), so
// the folder is as empty as it was. A folder with an index, or files
// another run put there, keeps them.
func (w *Writer) Discard() error {
	w.dropUncommitted()
	if _, err := os.Stat(filepath.Join(w.dir, IndexName)); errors.Is(err, fs.ErrNotExist) {
		// Empty folders only: os.Remove refuses one that holds a file.
		objects := filepath.Join(w.dir, "objects")
		if ents, err := os.ReadDir(objects); err == nil {
			for _, e := range ents {
				os.Remove(filepath.Join(objects, e.Name()))
			}
		}
		err1, err2 := os.Remove(objects), os.Remove(filepath.Join(w.dir, "tmp"))
		if err1 == nil && err2 == nil {
			os.Remove(filepath.Join(w.dir, MarkerName))
			os.Remove(filepath.Join(w.dir, LockName))
		}
	}
	return w.lock.Close()
}

// sameFile reports whether the open file f is the one at path now.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// IsCache reports whether dir is a splitzip cache: it holds the marker
// file, even if no index was ever committed (a first compress that was
// killed), or an index.
func IsCache(dir string) bool {
	for _, n := range []string{MarkerName, IndexName} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			return true
		}
	}
	return false
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

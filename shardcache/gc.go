package shardcache

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Forget removes the record of the checkpoint that path names, a path as
// the shell gave it (Index.SourceFor): relative to the working directory,
// symlinks allowed. Its objects stay until GC. It takes effect with Commit.
func (w *Writer) Forget(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	i, err := w.ix.SourceFor(path)
	if err != nil {
		return fmt.Errorf("%s: %w", w.dir, err)
	}
	w.ix.Sources = append(w.ix.Sources[:i], w.ix.Sources[i+1:]...)
	return nil
}

// Relocate records that the checkpoint that path names (Index.SourceFor)
// is now in the folder newRoot (absolute, symlinks resolved). Its own
// folder changes nothing; a folder where another checkpoint of the same
// path is recorded is ErrSourceRecorded. It takes effect with Commit.
func (w *Writer) Relocate(path, newRoot string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, err := w.ix.SourceFor(path)
	if err != nil {
		return fmt.Errorf("%s: %w", w.dir, err)
	}
	moved := w.ix.Sources[at]
	moved.Root = newRoot
	for i := range w.ix.Sources {
		if i != at && w.ix.Sources[i].Path() == moved.Path() {
			return fmt.Errorf("%s: %s: %w", w.dir, moved.Path(), ErrSourceRecorded)
		}
	}
	w.ix.Sources[at].Root = newRoot
	return nil
}

// referenced returns the keys the sources of ix use.
func referenced(ix *Index) map[Key]bool {
	used := map[Key]bool{}
	for _, s := range ix.Sources {
		if s.Index != nil {
			used[s.Index.Key] = true
		}
		for _, sh := range s.Shards {
			used[sh.Header.Key] = true
			for _, g := range sh.Gaps {
				used[g.Key] = true
			}
			for _, t := range sh.Tensors {
				if t.InCache() {
					used[t.Key] = true
				}
			}
		}
	}
	return used
}

// GCResult reports what GC removed (or would remove).
type GCResult struct {
	Objects int    `json:"objects"`
	Bytes   uint64 `json:"bytes"`
	Files   int    `json:"stray_files"` // files under objects/ that no index entry names
	// Repacked counts packs rewritten because some of their members were
	// removed and others are still used.
	Repacked int `json:"repacked"`
	// Pinned counts the objects kept only because a pin names them (an
	// unfinished pull's), and Pins lists the pins that kept them; Dropped
	// lists the pins GCOptions.DropPins removed (or would).
	Pinned  int   `json:"pinned_objects,omitempty"`
	Pins    []Pin `json:"pins,omitempty"`
	Dropped []Pin `json:"dropped_pins,omitempty"`
}

// GCOptions say what GC does besides removing what no checkpoint uses.
type GCOptions struct {
	// DryRun only counts (Writer.GC; DryRunGC always does).
	DryRun bool
	// Forget names checkpoints whose records go first (Writer.Forget).
	Forget []string
	// DropPins removes the pins, letting go of what only they kept (an
	// unfinished pull's objects, which a pull run again fetches anew).
	DropPins bool
	// Check checks the payload members a pack being rewritten keeps
	// (nil: the writer's, SetPayloadCheck; raw members are checked
	// against their keys regardless).
	Check PayloadCheck
}

// forgetIn returns a copy of ix without the checkpoints forget names
// (Index.SourceFor); it shares ix's objects, and changes nothing.
func forgetIn(ix *Index, forget []string) (*Index, error) {
	plan := *ix
	plan.Sources = append([]Source(nil), ix.Sources...)
	for _, p := range forget {
		i, err := plan.SourceFor(p)
		if err != nil {
			return nil, err
		}
		plan.Sources = append(plan.Sources[:i], plan.Sources[i+1:]...)
	}
	return &plan, nil
}

// gcPins returns the pins of the cache in dir that GC keeps objects for,
// and those it drops.
func gcPins(dir string, drop bool) (kept, dropped []Pin, err error) {
	pins, err := readPinsAs(dir, drop) // a damaged pin is dropped too
	if drop {
		return nil, pins, err
	}
	return pins, nil, err
}

// gcPlan is what GC removes from an index: the objects no source uses,
// and the packs with both used members and unused ones, which it
// rewrites.
type gcPlan struct {
	used, live, dead map[Key]bool // used objects; packs with used, unused members
	drop             []Key        // records to delete
	res              GCResult     // objects and bytes, stray files not counted
}

// planGC works out what GC removes from ix, keeping what pins name; it
// changes nothing.
func planGC(dir string, ix *Index, pins []Pin) gcPlan {
	pl := gcPlan{used: referenced(ix), live: map[Key]bool{}, dead: map[Key]bool{}}
	for _, p := range pins {
		kept := 0
		for _, k := range p.Keys {
			if o, ok := ix.Objects[k]; ok && !pl.used[k] {
				pl.used[k] = true
				if o.Kind != KindPack {
					kept++
				}
			}
		}
		pl.res.Pinned += kept
		if kept > 0 {
			pl.res.Pins = append(pl.res.Pins, p)
		}
	}
	// A pack is used while a member is; it is rewritten when it also has
	// members that go.
	liveBytes := map[Key]uint64{} // aligned bytes of used members, per pack
	for k, o := range ix.Objects {
		if o.Pack == "" {
			continue
		}
		if pl.used[k] {
			pl.live[o.Pack] = true
			liveBytes[o.Pack] += alignPack(o.Size)
		} else {
			pl.dead[o.Pack] = true
		}
	}
	// A pack with bytes no member covers (a member stored again
	// elsewhere, a damaged one that compress mended) is rewritten too.
	for k, o := range ix.Objects {
		if o.Kind == KindPack && pl.live[k] && o.Size > liveBytes[k] {
			pl.dead[k] = true
		}
	}
	for k, o := range ix.Objects {
		switch {
		case o.Kind == KindPack && pl.live[k] && pl.dead[k]:
			pl.res.Repacked++
			pl.res.Bytes += o.Size - min(o.Size, liveBytes[k])
		case o.Kind == KindPack && pl.live[k], pl.used[k]:
			continue
		case o.Kind == KindPack || o.Pack == "":
			pl.res.Bytes += onDisk(dir, k) // a file of its own
		}
		pl.drop = append(pl.drop, k)
		if o.Kind != KindPack {
			pl.res.Objects++
		}
	}
	return pl
}

// onDisk is the size of the file of key k in the cache at dir: what
// removing it frees (0 where it is gone already, as a pack whose members
// compress stored anew elsewhere).
func onDisk(dir string, k Key) uint64 {
	p, err := objectPath(dir, k)
	if err != nil {
		return 0
	}
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	return uint64(st.Size())
}

// GC removes objects no source references, and files under objects/ and
// tmp/ the index does not know (left by an interrupted writer). A cache
// with no committed index whose objects/ holds files is refused
// (refuseUncommitted), and nothing is removed. A pack
// goes when none of its members is used; one with both used members and
// removed ones is rewritten with the used ones only. The index is
// committed first, so a crash midway leaves only unreferenced files. With
// dryRun it only counts (DryRunGC counts without opening a Writer, which
// writes the marker and the lock file). While another process has the
// cache open for reading (Open) it is ErrInUse and removes nothing.
// Objects a pin names are kept (GCResult.Pinned), unless o.DropPins. A
// member of a pack it would rewrite that is damaged fails it, dry run or
// not, and nothing is removed. When ctx ends before the commit GC returns
// its error and changes nothing; after it, the error also matches
// ErrStraysLeft (the files it had not removed are left for the next gc).
func (w *Writer) GC(ctx context.Context, o GCOptions) (GCResult, error) {
	if err := refuseUncommitted(w.dir); err != nil {
		return GCResult{}, err
	}
	keptPins, dropped, err := gcPins(w.dir, o.DropPins)
	if err != nil {
		return GCResult{}, err
	}
	w.mu.Lock()
	check := o.Check
	if check == nil {
		check = w.check
	}
	// The forgotten checkpoints leave a copy of the index; the writer's
	// changes only when the run goes ahead.
	plan, err := forgetIn(w.ix, o.Forget)
	if err != nil {
		w.mu.Unlock()
		return GCResult{}, fmt.Errorf("%s: %w", w.dir, err)
	}
	pl := planGC(w.dir, plan, keptPins)
	res := pl.res
	res.Dropped = dropped
	// Killed writers' temporary files, which Create removed.
	res.Files += w.leftFiles
	res.Bytes += w.leftBytes
	known := knownFiles(w.dir, w.ix, keptPins)
	if o.DryRun {
		err := checkRepack(ctx, w.dir, w.ix, pl, check)
		w.mu.Unlock()
		if err != nil {
			return res, err
		}
		files, bytes, err := countStrays(w.dir, known)
		res.Files += files
		res.Bytes += bytes
		return res, err
	}
	rlock, err := gcLock(w.dir)
	if err != nil {
		w.mu.Unlock()
		return res, err
	}
	defer rlock.Close()
	if err := w.unpackLive(ctx, pl, check); err != nil {
		w.mu.Unlock()
		return res, err
	}
	w.ix.Sources = plan.Sources
	for _, k := range pl.drop {
		delete(w.ix.Objects, k)
	}
	w.mu.Unlock()
	if err := w.commit(ctx); err != nil {
		return res, err
	}
	for _, p := range dropped {
		if err := w.Unpin(p.Name); err != nil {
			return res, err
		}
	}
	// Files no index entry names: objects of a run that was killed, and
	// its temporary files. They are counted against the index GC began
	// with, and removed against the one it committed (which names the
	// packs this gc wrote).
	w.mu.Lock()
	keep := knownFiles(w.dir, w.ix, keptPins)
	w.mu.Unlock()
	err = walkStrays(w.dir, keep, func(p string, size int64) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrStraysLeft, err)
		}
		if !known[p] {
			res.Files++
			res.Bytes += uint64(size)
		}
		return os.Remove(p)
	})
	if err == nil {
		removeEmptyFolders(filepath.Join(w.dir, "objects"))
	}
	return res, err
}

// removeEmptyFolders removes the folders of objects/ (the fan-out by a
// key's first two hex digits) that removing objects left empty: a gc that
// emptied a cache left 92 of them (trial 69c). GC holds the writer and
// readers locks, so nothing adds a file meanwhile; a folder that holds one
// is not removed (os.Remove refuses it).
func removeEmptyFolders(objects string) {
	ents, err := os.ReadDir(objects)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			os.Remove(filepath.Join(objects, e.Name()))
		}
	}
}

// Strays counts the files under objects/ and tmp/ that the index does not
// name: objects a killed writer moved into place before its index was
// committed (GC removes them). It walks the cache only where Create found
// a killed writer's temporary files (which a writer holds while it works),
// so that a cache no writer was killed in costs nothing.
func (w *Writer) Strays() (files int, bytes uint64, err error) {
	if w.leftFiles == 0 {
		return 0, 0, nil
	}
	pins, err := readPins(w.dir)
	if err != nil {
		return 0, 0, err
	}
	w.mu.Lock()
	known := knownFiles(w.dir, w.ix, pins)
	w.mu.Unlock()
	return countStrays(w.dir, known)
}

// refuseUncommitted is ErrNotCache for a cache in dir with no committed
// index whose objects/ holds files: they are those of a first compress
// that was killed, or those of a cache whose index was lost (the only
// copy of a self-contained cache's tensors), and nothing tells which, so
// GC removes none of them. Without object files (temporary ones at most)
// it is nil.
func refuseUncommitted(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, IndexName)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var files int
	var bytes uint64
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil {
			files++
			bytes += uint64(info.Size())
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if files == 0 {
		return nil
	}
	noun := "files"
	if files == 1 {
		noun = "file"
	}
	if pins, err := readPins(dir); err == nil && len(pins) > 0 {
		return fmt.Errorf("%s: %w: no committed index, and objects/ holds %d %s (%d bytes) that no index names: %s was killed before its first commit; "+
			"gc removes none of them (run the pull again: it keeps the files that arrived whole and fetches the rest; or remove the folder if it is not wanted)",
			dir, ErrNotCache, files, noun, bytes, pins[0].Note)
	}
	return fmt.Errorf("%s: %w: no committed index, and objects/ holds %d %s (%d bytes) that no index names: "+
		"a compress killed before its first commit leaves them, and so does a cache that lost its %s; gc removes none of them "+
		"(run compress again to finish the cache, after which gc removes what its index does not name, or remove the folder if it is not wanted)",
		dir, ErrNotCache, files, noun, bytes, IndexName)
}

// Strays counts the files in a local cache's objects/ and tmp/ that
// neither its index nor a pin names, and their bytes: what killed runs
// left (or a writer running now has not committed yet), which gc removes.
// A remote cache has none.
func (c *Cache) Strays() (files int, bytes uint64, err error) {
	if c.remote != nil {
		return 0, 0, nil
	}
	pins, err := readPins(c.dir)
	if err != nil {
		return 0, 0, err
	}
	return countStrays(c.dir, knownFiles(c.dir, c.ix, pins))
}

// countStrays counts the files walkStrays finds and their bytes.
func countStrays(dir string, known map[string]bool) (files int, bytes uint64, err error) {
	err = walkStrays(dir, known, func(_ string, size int64) error {
		files++
		bytes += uint64(size)
		return nil
	})
	return files, bytes, err
}

// DryRunGC reports what GC with o would remove from the cache in dir
// (after forgetting o.Forget), and changes nothing: it opens no file for
// writing, so it works on a read-only cache. It reads and checks the
// members a repack would copy (raw ones by their keys, payloads with
// o.Check where set), failing where GC with the same o would. It waits
// for a writer that holds the cache as Open waits for a gc (up to two
// minutes, then ErrLocked). It stops with ctx's error when ctx ends.
func DryRunGC(ctx context.Context, dir string, o GCOptions) (GCResult, error) {
	unlock, err := sharedLock(ctx, dir)
	if err != nil {
		return GCResult{}, err
	}
	defer unlock()
	var ix *Index
	switch c, err := OpenContext(ctx, dir); {
	case err == nil:
		c.Close() // the writer lock, held shared, keeps the index as it is
		ix = c.ix
	case errors.Is(err, ErrNotCache) && IsCache(dir):
		if err := refuseUncommitted(dir); err != nil {
			return GCResult{}, err
		}
		ix = &Index{Objects: map[Key]*Object{}} // no index committed yet: temporary files only
	default:
		return GCResult{}, err
	}
	plan, err := forgetIn(ix, o.Forget)
	if err != nil {
		return GCResult{}, fmt.Errorf("%s: %w", dir, err)
	}
	keptPins, dropped, err := gcPins(dir, o.DropPins)
	if err != nil {
		return GCResult{}, err
	}
	pl := planGC(dir, plan, keptPins)
	res := pl.res
	res.Dropped = dropped
	if err := checkRepack(ctx, dir, plan, pl, o.Check); err != nil {
		return res, err
	}
	files, bytes, err := countStrays(dir, knownFiles(dir, ix, keptPins))
	res.Files += files
	res.Bytes += bytes
	return res, err
}

// WriterBusy reports whether a writer (compress, pull, gc) holds the
// cache in dir now, which DryRunGC then waits for: for a caller to say
// why it waits. A moment later it may be otherwise.
func WriterBusy(dir string) bool {
	f, err := os.Open(filepath.Join(dir, LockName))
	if err != nil {
		return false
	}
	defer f.Close() // lets go of the lock too
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// sharedLock takes the cache's lock shared, if it has a lock file, so
// that no writer works while the caller reads, waiting for a writer as
// long as Open waits for a gc (or until ctx ends); it opens the file for
// reading only. The caller calls the function it returns to let go.
func sharedLock(ctx context.Context, dir string) (func(), error) {
	// Without a lock file (no writer ever opened the cache, or the
	// caller may not read it), counting can only count a live writer's
	// files too.
	f, err := lockShared(ctx, dir, LockName, "a writer")
	if err != nil {
		return nil, err
	}
	return func() {
		if f != nil {
			f.Close()
		}
	}, nil
}

// walkStrays calls fn with the path and size of every file under dir's
// objects/ and tmp/ that known does not name.
func walkStrays(dir string, known map[string]bool, fn func(path string, size int64) error) error {
	for _, sub := range []string{"objects", "tmp"} {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || known[p] {
				return err
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			return fn(p, info.Size())
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// knownFiles returns the paths of the files ix names in the cache in dir,
// and of those the pins name (a pull killed before it committed them).
func knownFiles(dir string, ix *Index, pins []Pin) map[string]bool {
	known := map[string]bool{}
	for k, o := range ix.Objects {
		if o.Pack != "" {
			continue
		}
		if p, err := objectPath(dir, k); err == nil {
			known[p] = true
		}
	}
	for _, pin := range pins {
		for _, k := range pin.Keys {
			if o := ix.Objects[k]; o != nil && o.Pack != "" {
				continue // a member: its pack is the file
			}
			if p, err := objectPath(dir, k); err == nil {
				known[p] = true
			}
		}
	}
	return known
}

// unpackLive copies the used members of packs that also have unused ones
// into the spill as pending objects, so that Commit writes them into
// new packs (w.mu held). Their records leave the index until then; the
// old pack file stays until the new index is committed.
func (w *Writer) unpackLive(ctx context.Context, pl gcPlan, check PayloadCheck) error {
	files := packFiles{dir: w.dir, open: map[Key]*os.File{}}
	defer files.close()
	// In the order Commit packs them (sources' file order, the rest by
	// their place in the old packs), so that each spill file is let go
	// soon after it is written.
	move := map[Key]bool{}
	var rest []Key
	for k, o := range w.ix.Objects {
		if repacked(k, o, pl.used, pl.live, pl.dead) && w.pending[k].meta == nil {
			move[k] = true
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, func(a, b Key) int {
		oa, ob := w.ix.Objects[a], w.ix.Objects[b]
		return cmp.Or(cmp.Compare(oa.Pack, ob.Pack), cmp.Compare(oa.Offset, ob.Offset))
	})
	for _, k := range w.sourceOrder(func(k Key) bool { return move[k] }, rest) {
		o := w.ix.Objects[k]
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := files.member(k, o, check)
		if err != nil {
			return err
		}
		seg, off, err := w.spill.put(w.dir, b)
		if err != nil {
			return w.cacheError(err)
		}
		m := *o
		m.Pack, m.Offset = "", 0
		w.addPending(k, pendingObject{seg: seg, off: off, meta: &m})
		delete(w.ix.Objects, k)
	}
	return nil
}

// repacked reports whether the object o of key k is a member that GC
// copies into a new pack: used, in a pack with used members that it
// rewrites.
func repacked(k Key, o *Object, used, live, dead map[Key]bool) bool {
	return o.Pack != "" && used[k] && live[o.Pack] && dead[o.Pack]
}

// checkRepack reads and checks every member of ix that GC would copy into
// a new pack (pl), as GC does, changing nothing: a dry run fails where GC
// would.
func checkRepack(ctx context.Context, dir string, ix *Index, pl gcPlan, check PayloadCheck) error {
	files := packFiles{dir: dir, open: map[Key]*os.File{}}
	defer files.close()
	for k, o := range ix.Objects {
		if repacked(k, o, pl.used, pl.live, pl.dead) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := files.member(k, o, check); err != nil {
				return err
			}
		}
	}
	return nil
}

// packFiles reads pack members for GC, each pack opened once.
type packFiles struct {
	dir  string
	open map[Key]*os.File
}

func (pf packFiles) close() {
	for _, f := range pf.open {
		f.Close()
	}
}

// member reads the member o of key k from its pack and checks it
// (checkContent): a pack that is gone or ends before it, or wrong bytes,
// are ErrObjectCorrupt, naming the member.
func (pf packFiles) member(k Key, o *Object, check PayloadCheck) ([]byte, error) {
	f, ok := pf.open[o.Pack]
	if !ok {
		p, err := objectPath(pf.dir, o.Pack)
		if err != nil {
			return nil, err
		}
		f, err = os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, refuseRepack(fmt.Errorf("%s: pack of object %s: %w: %w", p, k, ErrObjectCorrupt, err))
		}
		if err != nil {
			return nil, err
		}
		pf.open[o.Pack] = f
	}
	name := fmt.Sprintf("%s[%d:+%d]", f.Name(), o.Offset, o.Size)
	b := make([]byte, o.Size)
	n, err := f.ReadAt(b, int64(o.Offset))
	switch {
	case n == len(b):
	case err == io.EOF:
		return nil, refuseRepack(fmt.Errorf("%s: %w: the pack ends %d bytes into the member", name, ErrObjectCorrupt, n))
	default:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := checkContent(name, k, o, bytes.NewReader(b), check); err != nil {
		if errors.Is(err, ErrObjectCorrupt) {
			err = refuseRepack(err)
		}
		return nil, err
	}
	return b, nil
}

// refuseRepack says what GC does about a damaged member it would copy.
func refuseRepack(err error) error {
	return fmt.Errorf("%w; gc copies the members of this pack still in use into a new one, and refuses a damaged one: nothing was removed "+
		"(compressing again the checkpoint that stored it, or pulling again the artifact that brought it, stores it anew; then run gc)", err)
}

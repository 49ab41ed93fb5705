package shardcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestUncommittedObjectsRemoved: a writer closed without a Commit (a
// failed compress) removes the objects it moved into place.
func TestUncommittedObjectsRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.PutBytes([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	w.SetSource(Source{Root: "/src"})
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.PutBytes([]byte("dropped"))
	w.Close()
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 1 {
		t.Errorf("%d object files after a writer failed, want the 1 committed", n)
	}
}

// TestGCStrays: files a killed run leaves (objects no index names, temp
// files) are reported by a dry run and removed by gc. In a cache whose
// first compress never committed an index, gc removes temporary files
// only: object files there are refused (they may be a cache's that lost
// its index), by a dry run too, and kept.
func TestGCStrays(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !IsCache(dir) || IsCache(t.TempDir()) {
		t.Fatal("IsCache")
	}
	// gc runs Create, and GC or DryRunGC; a killed run is simulated by
	// writing the temporary file again before each pass (a writer's own
	// Close cleans tmp/).
	gc := func(dry bool) (GCResult, error) {
		os.WriteFile(filepath.Join(dir, "tmp", "object-x"), make([]byte, 500), 0o644)
		if dry {
			return DryRunGC(context.Background(), dir, GCOptions{})
		}
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		return w.GC(context.Background(), GCOptions{})
	}
	stray := filepath.Join(dir, "objects", "ab", strings.Repeat("ab", 32))
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, make([]byte, 1000), 0o644)
	for _, dry := range []bool{true, false} {
		if res, err := gc(dry); !errors.Is(err, ErrNotCache) || !strings.Contains(err.Error(), "1 file (1000 bytes)") || !reflect.DeepEqual(res, GCResult{}) {
			t.Errorf("gc dry-run=%v, no index, an object file: %+v, %v; want it refused", dry, res, err)
		}
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 1 {
		t.Fatalf("%d files under objects/ after gc refused, want the 1", n)
	}
	// Temporary files only: removed (and gc commits an index).
	os.Remove(stray)
	for _, dry := range []bool{true, false} {
		if res, err := gc(dry); err != nil || res.Files != 1 || res.Bytes != 500 {
			t.Errorf("gc dry-run=%v, no index, temporary files: %+v, %v; want 1 file, 500 bytes", dry, res, err)
		}
	}
	// Committed: the object file is a stray (its folder, left empty by
	// the gc before, made again).
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, make([]byte, 1000), 0o644)
	for _, dry := range []bool{true, false} {
		if res, err := gc(dry); err != nil || res.Files != 2 || res.Bytes != 1500 {
			t.Errorf("gc dry-run=%v: %+v, %v; want 2 files, 1500 bytes", dry, res, err)
		}
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 0 {
		t.Errorf("%d files left under objects/", n)
	}
	// Nor the folders their removal left empty.
	if _, err := os.Stat(filepath.Dir(stray)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the emptied folder %s: %v", filepath.Dir(stray), err)
	}
}

func countFiles(t *testing.T, dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// fileState is what a dry run must leave as it was: a file's size, mode,
// modification time and inode.
type fileState struct {
	size, mtime int64
	mode        os.FileMode
	ino         uint64
}

// snapshot records the state of every file and directory under dir.
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	m := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m[p] = fileState{info.Size(), info.ModTime().UnixNano(), info.Mode(), st.Ino}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sameSnapshot fails the test unless two snapshots are equal.
func sameSnapshot(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for p, a := range after {
		if b, ok := before[p]; !ok {
			t.Errorf("%s created %s", what, p)
		} else if a != b {
			t.Errorf("%s changed %s: %+v, was %+v", what, p, a, b)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s removed %s", what, p)
		}
	}
}

// TestDryRunGC: a dry run, with and without --forget, changes nothing in
// the cache (no file created, removed or rewritten, no lock file left),
// predicts what gc then removes, and reports a cache a writer holds as
// locked.
func TestDryRunGC(t *testing.T) {
	dir := twoPacked(t)
	// Leftovers of a killed writer: a stray object and a temporary file.
	stray := filepath.Join(dir, "objects", "ab", strings.Repeat("ab", 32))
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, make([]byte, 1000), 0o644)
	os.WriteFile(filepath.Join(dir, "tmp", "object-x"), make([]byte, 500), 0o644)
	os.Remove(filepath.Join(dir, LockName)) // a dry run must not make one
	for _, forget := range [][]string{nil, {"/a"}} {
		before := snapshot(t, dir)
		dry, err := DryRunGC(context.Background(), dir, GCOptions{Forget: forget})
		if err != nil {
			t.Fatalf("forget %v: %v", forget, err)
		}
		sameSnapshot(t, fmt.Sprintf("gc --dry-run (forget %v)", forget), before, snapshot(t, dir))
		if dry.Files != 2 {
			t.Errorf("forget %v: dry run counts %d stray files, want 2", forget, dry.Files)
		}
		if forget == nil && dry.Objects != 0 {
			t.Errorf("dry run with every source live would remove %d objects", dry.Objects)
		}
	}
	dry, _ := DryRunGC(context.Background(), dir, GCOptions{Forget: []string{"/a"}})
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A dry run waits for the writer (trial 69c: it gave up at once),
	// until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*readPoll)
	_, err = DryRunGC(ctx, dir, GCOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a writer") {
		t.Errorf("dry run while a writer holds the cache, until its context ends: %v, want a wait that ended with the context", err)
	}
	if err := w.Forget("/a"); err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), GCOptions{})
	w.Close()
	if err != nil || !reflect.DeepEqual(res, dry) {
		t.Errorf("gc after the dry run: %+v, %v; the dry run predicted %+v", res, err, dry)
	}
	if dry.Objects != 5 { // a's header, three tensors, the gap
		t.Errorf("dry run would remove %d objects, want 5", dry.Objects)
	}
}

// twoPacked commits a cache of two checkpoints, /a (three small tensors
// in a pack, and a gap of its own) and /b (two), and returns its folder:
// forgetting /a leaves a pack to rewrite and objects to remove.
func twoPacked(t *testing.T) string {
	t.Helper()
	w, dir := newWriter(t)
	a, _ := packedSource(t, w, "/a", 1, 100, 200, 300)
	b, _ := packedSource(t, w, "/b", 2, 400, 500)
	withGap(t, w, &a, 9)
	w.SetSource(a)
	w.SetSource(b)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return dir
}

// TestDryRunGCUncommitted: a dry run over a cache whose first writer never
// committed an index counts its strays and changes nothing.
func TestDryRunGCUncommitted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	os.WriteFile(filepath.Join(dir, "tmp", "object-x"), make([]byte, 500), 0o644)
	before := snapshot(t, dir)
	res, err := DryRunGC(context.Background(), dir, GCOptions{})
	if err != nil || !reflect.DeepEqual(res, GCResult{Files: 1, Bytes: 500}) {
		t.Errorf("dry run: %+v, %v; want 1 file of 500 bytes", res, err)
	}
	sameSnapshot(t, "gc --dry-run", before, snapshot(t, dir))
	if _, err := DryRunGC(context.Background(), t.TempDir(), GCOptions{}); !errors.Is(err, ErrNotCache) {
		t.Errorf("dry run of an empty folder: %v, want ErrNotCache", err)
	}
}

// TestRelocate: moving a checkpoint to its own folder changes nothing;
// moving it to where another checkpoint of the same path is recorded is
// ErrSourceRecorded; a single-file checkpoint may join a folder that
// holds another of another name.
func TestRelocate(t *testing.T) {
	w, _ := newWriter(t)
	defer w.Close()
	a, _ := packedSource(t, w, "/a", 1, 100)
	b, _ := packedSource(t, w, "/b", 2, 200)
	c, _ := packedSource(t, w, "/c", 3, 300)
	c.Shards[0].Name = "other.safetensors"
	for _, s := range []Source{a, b, c} {
		w.SetSource(s)
	}
	if err := w.Relocate("/a/m.safetensors", "/a"); err != nil || w.ix.Sources[0].Root != "/a" {
		t.Errorf("relocate to its own folder: %v", err)
	}
	if err := w.Relocate("/a", "/b"); !errors.Is(err, ErrSourceRecorded) || !strings.Contains(err.Error(), "/b/m.safetensors") {
		t.Errorf("relocate onto another checkpoint's path: %v, want ErrSourceRecorded naming it", err)
	}
	if err := w.Relocate("/c/other.safetensors", "/b"); err != nil || w.ix.Sources[2].Path() != "/b/other.safetensors" {
		t.Errorf("relocate a single file into a folder of another: %v", err)
	}
	if err := w.Relocate("/nowhere", "/d"); !errors.Is(err, ErrNotFound) {
		t.Errorf("relocate of no recorded checkpoint: %v, want ErrNotFound", err)
	}
}

// TestCreateRemovesLeftovers: opening a writer removes what killed
// writers left in tmp/, and a second writer, refused while the first
// holds the lock, leaves the first one's temporary files alone.
func TestCreateRemovesLeftovers(t *testing.T) {
	w, dir := newWriter(t)
	w.Close()
	left := []string{filepath.Join(dir, "tmp", ".splitzip-tmp-99999999-x-object"), filepath.Join(dir, "tmp", "object-x")}
	for _, p := range left {
		os.WriteFile(p, []byte("x"), 0o644)
	}
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, p := range left {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after Create", p)
		}
	}
	w.SetPackMax(0) // an object in a temporary file from the start
	o, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Abort()
	if _, err := Create(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	if _, err := os.Stat(o.name()); err != nil {
		t.Errorf("a refused writer removed the live writer's temporary file: %v", err)
	}
}

// TestGCWaitsForReaders: gc refuses a cache another reader has open
// (ErrInUse) and removes nothing; once the reader closes it, gc runs. A
// reader that opens the cache while gc holds it waits for it to finish.
func TestGCWaitsForReaders(t *testing.T) {
	dir := committedCache(t)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := c.Index().Sources[0].Shards[0].Tensors[0].Key
	before := countFiles(t, filepath.Join(dir, "objects"))
	w, err := Create(dir) // writers and readers do not exclude each other
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Forget("/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.GC(context.Background(), GCOptions{}); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("gc while a reader has the cache open: %v, want ErrInUse", err)
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != before || n == 0 {
		t.Fatalf("%d object files after the refused gc, %d before", n, before)
	}
	if _, _, err := c.ReadObject(key); err != nil {
		t.Fatalf("the reader after the refused gc: %v", err)
	}
	c.Close()
	// gc holds the readers lock while it works: a reader that comes
	// meanwhile waits.
	lock, err := gcLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	// ... until its context ends (Ctrl-C: trial 69c).
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(3*readPoll, cancel)
	if _, err := OpenContext(ctx, dir); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for a gc") {
		t.Fatalf("Open while gc holds the cache, cancelled: %v, want context.Canceled", err)
	}
	opened := make(chan error, 1)
	go func() {
		c, err := Open(dir)
		if err == nil {
			c.Close()
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		t.Fatalf("Open while gc holds the cache returned at once: %v", err)
	case <-time.After(5 * readPoll):
	}
	lock.Close()
	if err := <-opened; err != nil {
		t.Fatalf("Open after gc let go: %v", err)
	}
	res, err := w.GC(context.Background(), GCOptions{})
	w.Close()
	if err != nil || res.Objects == 0 {
		t.Fatalf("gc with no reader: %+v, %v", res, err)
	}
}

// TestGCBytesOnDisk: gc counts the bytes it frees, so an object whose
// file is gone already (a pack whose members compress stored anew
// elsewhere) counts as an object but frees nothing.
func TestGCBytesOnDisk(t *testing.T) {
	w, dir := newWriter(t)
	a, _ := packedSource(t, w, "/a", 1, 100)
	bk, size := withGap(t, w, &a, 7)
	w.SetSource(a)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Forget("/a"); err != nil {
		t.Fatal(err)
	}
	dry, err := w.GC(context.Background(), GCOptions{DryRun: true})
	if err != nil || dry.Bytes < size {
		t.Fatalf("dry run with the object's file in place: %+v, %v; want its %d bytes counted", dry, err, size)
	}
	p, err := objectPath(dir, bk)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), GCOptions{})
	if err != nil || res.Objects != dry.Objects || res.Bytes != dry.Bytes-size {
		t.Errorf("gc with the object's file gone: %+v, %v; want %d objects, %d bytes", res, err, dry.Objects, dry.Bytes-size)
	}
}

// withGap gives the first shard of a a gap after its end: an object of
// its own (above the packing threshold), of bytes fill, stored by w. It
// returns the gap's key and size.
func withGap(t *testing.T, w *Writer, a *Source, fill byte) (Key, uint64) {
	t.Helper()
	big := bytes.Repeat([]byte{fill}, DefaultPackMax+1)
	k, err := w.PutBytes(big)
	if err != nil {
		t.Fatal(err)
	}
	sh := &a.Shards[0]
	sh.Gaps = []Region{{Offset: sh.Size, Size: uint64(len(big)), Key: k}}
	sh.Size += uint64(len(big))
	sh.Fingerprint = Fingerprint(sh)
	return k, uint64(len(big))
}

// stopAfter is a context that ends after its first n checks of Err.
type stopAfter struct {
	context.Context
	n atomic.Int64
}

func (c *stopAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestGCInterrupted: a gc whose context ends at any of its checks
// returns its error and leaves a cache whose index names only objects it
// holds, each whole; a gc run again then leaves what one uninterrupted
// run does.
func TestGCInterrupted(t *testing.T) {
	gc := func(ctx context.Context, dir string) error {
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// A gc stopped after its commit has forgotten it already.
		if err := w.Forget("/a"); err != nil && !errors.Is(err, ErrNotFound) {
			t.Fatal(err)
		}
		_, err = w.GC(ctx, GCOptions{})
		return err
	}
	// objects returns what the cache in dir names, each checked.
	objects := func(what, dir string) []Key {
		c, err := Open(dir)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer c.Close()
		keys := slices.Sorted(maps.Keys(c.Index().Objects))
		var packs []Key
		for _, k := range keys {
			if _, o, err := c.ReadObject(k); err != nil {
				t.Errorf("%s: object %s: %v", what, k, err)
			} else if o.Kind == KindPack {
				packs = append(packs, k)
			}
		}
		for _, err := range c.CheckPacks(context.Background(), packs, 2, nil) {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		}
		return keys
	}
	dir := twoPacked(t)
	before := objects("before gc", dir)
	if err := gc(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	want := objects("gc", dir)
	if len(want) >= len(before) {
		t.Fatalf("gc removed nothing: %d objects before, %d after", len(before), len(want))
	}
	for n := int64(0); ; n++ {
		dir := twoPacked(t)
		ctx := &stopAfter{Context: context.Background()}
		ctx.n.Store(n)
		err := gc(ctx, dir)
		if err == nil {
			if n == 0 {
				t.Fatal("gc checks its context nowhere")
			}
			break
		}
		what := fmt.Sprintf("gc stopped after %d checks", n)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v, want context.Canceled", what, err)
		}
		objects(what, dir)
		// Before its commit the cache is as it was; after it, only files
		// no index names are left, and the error says so.
		c, oerr := Open(dir)
		if oerr != nil {
			t.Fatal(oerr)
		}
		if committed := len(c.Index().Sources) == 1; committed != errors.Is(err, ErrStraysLeft) {
			t.Errorf("%s: %d checkpoints recorded, error %v", what, len(c.Index().Sources), err)
		}
		c.Close()
		if err := gc(context.Background(), dir); err != nil {
			t.Fatalf("%s, then run again: %v", what, err)
		}
		if got := objects(what+", then run again", dir); !slices.Equal(got, want) {
			t.Errorf("%s, then run again: the cache names %d objects, an uninterrupted gc's %d", what, len(got), len(want))
		}
	}
}

// TestWaitErrorNamesHolder: a reader that waited out a gc is told a gc
// held the cache, not "another writer" (stop 70's review), and a writer
// held by a writer is told so; both are ErrLocked.
func TestWaitErrorNamesHolder(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), ReadersName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = waitError("/c", f, "a gc", syscall.EWOULDBLOCK)
	if !errors.Is(err, ErrLocked) || strings.Contains(err.Error(), "writer") || !strings.Contains(err.Error(), "a gc has held it") {
		t.Errorf("reader behind a gc: %v", err)
	}
	dir := t.TempDir()
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Discard()
	if _, err := Create(dir); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "locked by another writer") {
		t.Errorf("second writer: %v", err)
	}
}

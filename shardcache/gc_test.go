package shardcache

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
// files) are reported by a dry run and removed by gc, also in a cache
// whose first compress never committed an index.
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
	stray := filepath.Join(dir, "objects", "ab", strings.Repeat("ab", 32))
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, make([]byte, 1000), 0o644)
	os.WriteFile(filepath.Join(dir, "tmp", "object-x"), make([]byte, 500), 0o644)
	for _, dry := range []bool{true, false} {
		// The writer's own Close cleans tmp/, so a killed run is
		// simulated by writing the files again before each pass.
		os.WriteFile(filepath.Join(dir, "tmp", "object-x"), make([]byte, 500), 0o644)
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.GC(dry)
		w.Close()
		if err != nil || res.Files != 2 || res.Bytes != 1500 {
			t.Errorf("gc dry-run=%v: %+v, %v; want 2 files, 1500 bytes", dry, res, err)
		}
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 0 {
		t.Errorf("%d files left under objects/", n)
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

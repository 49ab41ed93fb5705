package shardcache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/internal/fsizelimit"
)

// TestWriteErrorsNameCache: a write into the cache that fails (an object,
// a spill file of pending objects, a pack at Commit) is the error of the
// cache folder, never of a temporary file's name, and keeps its cause for
// errors.Is; a spill file whose first write failed is gone after a Commit
// that then succeeds (one with nothing pending).
func TestWriteErrorsNameCache(t *testing.T) {
	w, dir := newWriter(t)
	defer w.Close()
	w2, dir2 := newWriter(t)
	defer w2.Close()
	w2.SetPackMax(MaxPackMax)
	w3, dir3 := newWriter(t)
	defer w3.Close()
	w3.SetPackMax(MaxPackMax)
	var errs [3]error
	var left []string
	if !fsizelimit.Run(t, 2<<20, func() {
		_, errs[0] = w.PutBytes(bytes.Repeat([]byte{1}, 3<<20)) // an object file of its own
		// An object held in memory (the limit's 1 MiB) for a first
		// spill file that cannot take it: the limit is lowered for it.
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim)
		low := lim
		low.Cur = 512 << 10
		syscall.Setrlimit(syscall.RLIMIT_FSIZE, &low)
		_, errs[1] = w3.PutBytes(bytes.Repeat([]byte{2}, 1<<20))
		syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim)
		if err := w3.Commit(); err != nil {
			t.Errorf("commit of nothing pending: %v", err)
		}
		left = tmpFiles(t, dir3)
		// Two objects of 1.5 MiB, each in a file of its own (past the
		// memory limit), pending for one pack of 3 MiB.
		for i := range 2 {
			if _, err := w2.PutBytes(bytes.Repeat([]byte{byte(i + 3)}, 3<<19)); err != nil {
				t.Errorf("pending object: %v", err)
			}
		}
		errs[2] = w2.Commit()
	}) {
		return // the child process ran it and checked what follows
	}
	for i, err := range errs {
		var pe *fs.PathError
		want := []string{dir, dir3, dir2}[i]
		if !errors.Is(err, syscall.EFBIG) || !errors.As(err, &pe) || pe.Path != want || strings.Contains(err.Error(), atomicfile.TempPrefix) {
			t.Errorf("write %d past the limit: %v; want an error of %s", i, err, want)
		}
	}
	if len(left) != 0 {
		t.Errorf("tmp/ holds %v after a failed spill write and a Commit", left)
	}
}

// TestCreateKeepsMarker: opening a writer on a cache leaves its marker
// file as it is (a full disk could truncate a rewrite).
func TestCreateKeepsMarker(t *testing.T) {
	w, dir := newWriter(t)
	w.Close()
	marker := filepath.Join(dir, MarkerName)
	before, err := os.Stat(marker)
	if err != nil {
		t.Fatal(err)
	}
	old := before.ModTime().Add(-time.Hour)
	os.Chtimes(marker, old, old)
	w, err = Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if after, err := os.Stat(marker); err != nil || !after.ModTime().Equal(old) || after.Size() != before.Size() {
		t.Errorf("Create rewrote the marker: %v", err)
	}
}

// TestCreateOnAFile: a cache at a file, or under one, is ErrOccupied
// naming the file that is in the way.
func TestCreateOnAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ at, says string }{
		{file, file + ": a file, not a folder"},
		{filepath.Join(file, "cache"), filepath.Join(file, "cache") + ": " + file + " is a file, not a folder"},
		{filepath.Join(file, "a", "b"), filepath.Join(file, "a", "b") + ": " + file + " is a file, not a folder"},
	} {
		if _, err := Create(c.at); !errors.Is(err, ErrOccupied) || !strings.HasPrefix(err.Error(), c.says) {
			t.Errorf("Create(%s): %v, want %q", c.at, err, c.says)
		}
	}
}

// TestCreateErrorNamesTheCache: a cache folder that cannot be made is
// named in the error as the user gave it, not by the temporary name it
// is built under (240 bytes: a name that fits, but whose temporary name,
// some 30 bytes longer, does not fit NAME_MAX, 255 bytes).
func TestCreateErrorNamesTheCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("c", 240))
	_, err := Create(dir)
	pe, ok := errors.AsType[*fs.PathError](err)
	if !ok || pe.Path != dir || strings.Contains(err.Error(), "splitzip-new") {
		t.Fatalf("Create of a folder whose temporary name is too long: %v", err)
	}
}

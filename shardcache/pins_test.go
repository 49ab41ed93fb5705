package shardcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPins: a pin keeps unreferenced objects from gc and is listed with
// its note; GCOptions.DropPins lets them go and removes the pin; a pin file that
// does not parse stops gc (it keeps what it cannot read); names other
// than plain file names are refused.
func TestPins(t *testing.T) {
	w, dir := newWriter(t)
	w.SetPackMax(0)
	var keys []Key
	for _, s := range []string{"one", "two", "three"} {
		k, err := w.PutBytes([]byte(strings.Repeat(s, 100)))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", ".hidden", "a/b", "../x", "a b"} {
		if err := w.Pin(bad, "x", keys); err == nil {
			t.Errorf("pin name %q accepted", bad)
		}
	}
	// A file in place that no index names yet (a pull killed before it
	// committed it), pinned: not a stray.
	loose := KeyOf([]byte("arrived whole"))
	lp, _ := objectPath(dir, loose)
	os.MkdirAll(filepath.Dir(lp), 0o755)
	os.WriteFile(lp, []byte("arrived whole"), 0o644)
	if err := w.Pin("pull-1", "an unfinished pull of r", append(keys[:2:2], loose)); err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), GCOptions{})
	if err != nil || res.Objects != 1 || res.Files != 0 || res.Pinned != 2 || len(res.Pins) != 1 || res.Pins[0].Name != "pull-1" || res.Pins[0].Note != "an unfinished pull of r" {
		t.Fatalf("gc with a pin of 2 of 3 unreferenced objects and a file no index names: %+v, %v", res, err)
	}
	if _, err := os.Stat(lp); err != nil {
		t.Fatalf("gc removed a pinned file: %v", err)
	}
	bad := filepath.Join(dir, PinsDir, "junk")
	os.WriteFile(bad, []byte("# a note\nnot a key\n"), 0o644)
	if _, err := w.GC(context.Background(), GCOptions{}); !errors.Is(err, ErrPinCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("gc with a malformed pin: %v", err)
	}
	if _, err := w.GC(context.Background(), GCOptions{DryRun: true}); !errors.Is(err, ErrPinCorrupt) {
		t.Fatalf("dry run with a malformed pin: %v", err)
	}
	w.Close() // DryRunGC (gc -n) waits for a writer
	if _, err := DryRunGC(context.Background(), dir, GCOptions{}); !errors.Is(err, ErrPinCorrupt) {
		t.Fatalf("DryRunGC with a malformed pin: %v", err)
	}
	w, err = Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// DropPins drops the malformed pin too (it had to be removed by hand).
	res, err = w.GC(context.Background(), GCOptions{DropPins: true})
	if err != nil || res.Objects != 2 || res.Files != 1 || res.Pinned != 0 || len(res.Pins) != 0 || len(res.Dropped) != 2 {
		t.Fatalf("gc after DropPins: %+v, %v", res, err)
	}
	if _, err := os.Stat(lp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file only a dropped pin kept: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, PinsDir)); len(ents) != 0 {
		t.Errorf("pins left after DropPins: %v", ents)
	}
	if err := w.Unpin("pull-1"); err != nil {
		t.Errorf("unpinning a pin that is gone: %v", err)
	}
	w.Close()
}

// TestGCDryRunForgetsNothing: a dry run of Writer.GC with Forget counts
// as if the checkpoint were forgotten, and the writer's index keeps it
// (a later Commit drops nothing); so does a GC that fails.
func TestGCDryRunForgetsNothing(t *testing.T) {
	w, dir, _, _ := sharedPack(t)
	defer w.Close()
	res, err := w.GC(context.Background(), GCOptions{DryRun: true, Forget: []string{"/a"}})
	if err != nil || res.Objects == 0 {
		t.Fatalf("dry run forgetting /a: %+v, %v", res, err)
	}
	if _, err := w.GC(context.Background(), GCOptions{Forget: []string{"/a", "/nowhere"}}); err == nil {
		t.Fatal("gc forgetting a checkpoint the cache does not hold")
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.Index().Sources); n != 2 {
		t.Fatalf("%d sources after a dry run and a failed gc, want the 2", n)
	}
}

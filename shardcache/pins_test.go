package shardcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPins: a pin keeps unreferenced objects from gc and is listed with
// its note; DropPins lets them go and removes the pin; a pin file that
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
	if err := w.Pin("pull-1", "an unfinished pull of r", keys[:2]); err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(false)
	if err != nil || res.Objects != 1 || res.Pinned != 2 || len(res.Pins) != 1 || res.Pins[0].Name != "pull-1" || res.Pins[0].Note != "an unfinished pull of r" {
		t.Fatalf("gc with a pin of 2 of 3 unreferenced objects: %+v, %v", res, err)
	}
	bad := filepath.Join(dir, PinsDir, "junk")
	os.WriteFile(bad, []byte("# a note\nnot a key\n"), 0o644)
	if _, err := w.GC(false); !errors.Is(err, ErrIndexCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("gc with a malformed pin: %v", err)
	}
	if _, err := DryRunGC(dir, nil, false); err == nil {
		t.Fatal("dry run with a malformed pin")
	}
	os.Remove(bad)
	w.DropPins()
	res, err = w.GC(false)
	if err != nil || res.Objects != 2 || res.Pinned != 0 || len(res.Pins) != 1 {
		t.Fatalf("gc after DropPins: %+v, %v", res, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, PinsDir)); len(ents) != 0 {
		t.Errorf("pins left after DropPins: %v", ents)
	}
	if err := w.Unpin("pull-1"); err != nil {
		t.Errorf("unpinning a pin that is gone: %v", err)
	}
	w.Close()
}

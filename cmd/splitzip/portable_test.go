package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPortableCaches: a cache moves freely; a moved source is used with
// --source DIR and recorded with relocate; a self-contained cache verifies
// and restores with no source at all.
func TestPortableCaches(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	splitzip(t, "gen", src, "--size", "2MiB", "--shards", "2")
	if code, _, e := splitzip(t, "compress", src, "-o", cache, "--no-sync"); code != 0 {
		t.Fatal(e)
	}
	// The cache moves: nothing changes.
	moved := filepath.Join(dir, "elsewhere", "cache")
	os.MkdirAll(filepath.Dir(moved), 0o755)
	if err := os.Rename(cache, moved); err != nil {
		t.Fatal(err)
	}
	if code, o, e := splitzip(t, "verify", moved); code != 0 {
		t.Fatalf("verify of a moved cache: %s %s", o, e)
	}
	// The source moves: verify fails until told where it is.
	newSrc := filepath.Join(dir, "mnt", "ck")
	os.MkdirAll(filepath.Dir(newSrc), 0o755)
	if err := os.Rename(src, newSrc); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := splitzip(t, "verify", moved); code != exitInput {
		t.Errorf("verify with the source gone: exit %d", code)
	}
	for _, args := range [][]string{
		{"verify", moved, "--source", newSrc},
		{"load", moved, "--device", "cpu", "--check", "--source", newSrc},
		{"decompress", moved, "-o", filepath.Join(dir, "out1"), "--source", newSrc},
	} {
		if code, o, e := splitzip(t, args...); code != 0 {
			t.Errorf("%s --source DIR: %d %s %s", args[0], code, o, e)
		}
	}
	sameFiles(t, newSrc, filepath.Join(dir, "out1"))
	if code, o, e := splitzip(t, "relocate", moved, newSrc); code != 0 || !strings.Contains(o, newSrc) {
		t.Fatalf("relocate: %d %s %s", code, o, e)
	}
	if code, o, e := splitzip(t, "verify", moved); code != 0 {
		t.Errorf("verify after relocate: %s %s", o, e)
	}
	if code, _, e := splitzip(t, "relocate", moved, t.TempDir()); code != exitInput || !strings.Contains(e, "holds the shards of none") {
		t.Errorf("relocate to a directory without the shards: %d %s", code, e)
	}

	// Self-contained: verify and decompress need no source.
	self := filepath.Join(dir, "self")
	if code, _, e := splitzip(t, "compress", newSrc, "-o", self, "--no-sync", "--self-contained"); code != 0 {
		t.Fatal(e)
	}
	keep := filepath.Join(dir, "keep")
	os.Rename(newSrc, keep)
	code, o, e := splitzip(t, "verify", self)
	if code != 0 || !strings.Contains(e, "is absent; its tensors were checked against their content keys") {
		t.Errorf("verify of a self-contained cache without its source: %d %s %s", code, o, e)
	}
	if code, o, e := splitzip(t, "load", self, "--device", "cpu", "--check"); code != 0 || !strings.Contains(o, "matches") {
		t.Errorf("load --check of a self-contained cache without its source: %d %s %s", code, o, e)
	}
	if code, _, e := splitzip(t, "decompress", self, "-o", filepath.Join(dir, "out2")); code != 0 {
		t.Fatalf("decompress of a self-contained cache without its source: %s", e)
	}
	sameFiles(t, keep, filepath.Join(dir, "out2"))
	// A file at the source's place that is not the source any more (other
	// bytes of the same size, a new time) still stops verify and load, the
	// file present being the source (a cache that tracks it must not serve
	// stale tensors): the message says the cache needs nothing of it.
	changedSource(t, keep, newSrc)
	const notNeeded = "the cache holds every tensor of this shard: with this file moved away"
	if code, _, e := splitzip(t, "verify", self); code != exitInput || !strings.Contains(e, notNeeded) {
		t.Errorf("verify of a self-contained cache whose source changed: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "load", self, "--device", "cpu"); code != exitInput || !strings.Contains(e, notNeeded) {
		t.Errorf("load of a self-contained cache whose source changed: %d %s", code, e)
	}
	// Beside a cache with tensors only in the source, it is not said.
	if code, _, e := splitzip(t, "load", moved, "--device", "cpu"); code != exitInput || !strings.Contains(e, "source shard changed") || strings.Contains(e, notNeeded) {
		t.Errorf("load of a cache whose source changed: %d %s", code, e)
	}
	if err := os.RemoveAll(newSrc); err != nil {
		t.Fatal(err)
	}
	// A corrupted object is still found without the source.
	var obj string
	filepath.Walk(filepath.Join(self, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Size() > 4096 && obj == "" {
			obj = p
		}
		return nil
	})
	b, _ := os.ReadFile(obj)
	b[len(b)/2] ^= 1
	os.WriteFile(obj, b, 0o644)
	if code, _, _ := splitzip(t, "verify", self); code != exitFailure {
		t.Errorf("verify of a corrupted self-contained cache without its source: exit %d", code)
	}
	// A cache that is not self-contained names what is missing.
	if code, _, e := splitzip(t, "load", moved, "--device", "cpu"); code != exitInput || !strings.Contains(e, "only in it") {
		t.Errorf("load of a cache whose source is gone: %d %s", code, e)
	}
}

// changedSource writes at to hold the files of from, each safetensors
// file with other bytes of the same size past its first quarter and a
// modification time an hour later: what a source edited in place looks
// like.
func changedSource(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	es, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".safetensors") {
			for i := len(b) / 4; i < len(b); i += 97 {
				b[i] ^= 0x5A
			}
		}
		p := filepath.Join(to, e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
}

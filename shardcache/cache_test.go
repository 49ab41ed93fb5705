package shardcache

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWriterAndLookups(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir); !errors.Is(err, ErrLocked) {
		t.Errorf("second writer: %v", err)
	}
	hk, err := w.PutBytes([]byte("header"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("payload!"))
	pk := KeyOf([]byte("raw tensor bytes"))
	if err := o.Commit(pk, &Object{Kind: KindFixed, Size: 8, RawSize: 16, ObjectStats: ObjectStats{Values: 8}}); err != nil {
		t.Fatal(err)
	}
	sh := Shard{Name: "m.safetensors", Size: 22, ModTime: time.Unix(1, 0), Header: Region{0, 6, hk},
		Tensors: []Tensor{{Name: "w", DType: "BF16", Shape: []uint64{8}, Offset: 6, Size: 16, Key: pk, Stored: StoredFixed, CopyStored: true}}}
	sh.Fingerprint = Fingerprint(&sh)
	w.SetSource(Source{Root: "/src", Shards: []Shard{sh}})
	c := commitAndOpen(t, w, dir)
	hit, err := c.LookupSlice("/anywhere/m.safetensors", 6, 16)
	if err != nil || hit.Tensor.Name != "w" || hit.Path() != "/src/m.safetensors" {
		t.Fatalf("slice lookup: %+v, %v", hit, err)
	}
	if _, err := c.LookupSlice("m.safetensors", 6, 15); !errors.Is(err, ErrNotFound) {
		t.Errorf("wrong size: %v", err)
	}
	// A spec's record of this cache is taken as it is; one of another
	// open cache (the same index read again) is looked up instead.
	if got, err := c.LookupSpec(&hit, "elsewhere", 0, 1); err != nil || got.Tensor != hit.Tensor {
		t.Errorf("spec with this cache's record: %+v, %v", got, err)
	}
	other, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.LookupSlice("m.safetensors", 6, 16)
	if got, err := c.LookupSpec(&foreign, "m.safetensors", 6, 16); err != nil || got.Tensor != hit.Tensor || c.holds(&foreign) {
		t.Errorf("spec with another cache's record: %+v, %v", got, err)
	}
	if _, err := c.LookupSpec(nil, "m.safetensors", 6, 15); !errors.Is(err, ErrNotFound) {
		t.Errorf("spec without a record, wrong size: %v", err)
	}
	if hit, err := c.LookupName("w", ""); err != nil || hit.Tensor.Key != pk {
		t.Errorf("name lookup: %v", err)
	}
	if o, err := c.Lookup(pk); err != nil || o.Kind != KindFixed {
		t.Errorf("key lookup: %v", err)
	}
	if b, _, err := c.ReadObject(hk); err != nil || string(b) != "header" {
		t.Errorf("read object: %q %v", b, err)
	}
	// A raw object whose bytes changed is caught by its hash.
	loc, _, _ := c.Locate(hk)
	p := loc.Path
	if want := fmt.Sprintf("%s[%d:+%d]", p, loc.Offset, loc.Size); !loc.Packed || loc.Size != 6 || loc.Name() != want {
		t.Errorf("a small object's location: %+v named %q, want a pack member named %q", loc, loc.Name(), want)
	}
	orig, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(orig, []byte("header"), []byte("HEADER"), 1), 0o644)
	if _, _, err := c.ReadObject(hk); !errors.Is(err, ErrObjectCorrupt) {
		t.Errorf("corrupt raw object: %v", err)
	}
	os.WriteFile(p, orig[:len(orig)-1], 0o644)
	if _, _, err := c.OpenObject(hk); !errors.Is(err, ErrObjectCorrupt) {
		t.Errorf("truncated object: %v", err)
	}
}

func TestIndexRejects(t *testing.T) {
	good, err := marshalIndex(&Index{Objects: map[Key]*Object{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unmarshalIndex(good, "x"); err != nil {
		t.Fatal(err)
	}
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		if _, err := unmarshalIndex(b, "x"); err == nil && string(b) != string(good) {
			// Only whitespace flips that keep the JSON equal may pass, and
			// the one that makes this version 2 index version 3 (which
			// holds all that version 2 does).
			if c, _ := compactJSON(b); string(c) != string(mustCompact(t, good)) && !bytes.Contains(b, []byte(`"version": 3`)) {
				t.Errorf("flip at %d accepted", i)
			}
		}
	}
	// References to missing objects are refused.
	ix := &Index{Objects: map[Key]*Object{}, Sources: []Source{{Root: "/r", Shards: []Shard{{Name: "a", Header: Region{Key: KeyOf(nil)}}}}}}
	if err := ix.check(); err == nil {
		t.Error("index with a missing header object passed")
	}
}

// TestIndexBounds: an index whose checksum is right but whose sizes are
// not (a tensor of 2^62 bytes) is refused before anything is allocated.
func TestIndexBounds(t *testing.T) {
	hk, pk := KeyOf([]byte("h")), KeyOf([]byte("t"))
	base := func() *Index {
		return &Index{Objects: map[Key]*Object{hk: {Kind: KindRaw, Size: 8, RawSize: 8}, pk: {Kind: KindFixed, Size: 100, RawSize: 64, ObjectStats: ObjectStats{Values: 32}}},
			Sources: []Source{{Root: "/r", Shards: []Shard{{Name: "a", Size: 72, Header: Region{0, 8, hk},
				Tensors: []Tensor{{Name: "w", Offset: 8, Size: 64, Key: pk, Stored: StoredFixed}}}}}}}
	}
	if err := base().check(); err != nil {
		t.Fatal(err)
	}
	rejectsAll(t, base, map[string]func(ix *Index){
		"tensor past the shard":      func(ix *Index) { ix.Sources[0].Shards[0].Tensors[0].Size = 1 << 62 },
		"tensor offset overflows":    func(ix *Index) { ix.Sources[0].Shards[0].Tensors[0].Offset = 1<<64 - 8 },
		"payload decodes to another": func(ix *Index) { ix.Objects[pk].RawSize = 1 << 62 },
		"values disagree":            func(ix *Index) { ix.Objects[pk].Values = 1 << 62 },
		"header of another size":     func(ix *Index) { ix.Sources[0].Shards[0].Header.Size = 1 << 62 },
		"raw object grows":           func(ix *Index) { ix.Objects[hk].RawSize = 1 << 62 },
		"raw copy names a payload": func(ix *Index) {
			// A payload of the copy's size: only its kind is wrong.
			qk := KeyOf([]byte("q"))
			ix.Objects[qk] = &Object{Kind: KindFixed, Size: 40, RawSize: 64, ObjectStats: ObjectStats{Values: 32}}
			sh := &ix.Sources[0].Shards[0]
			sh.Tensors = append(sh.Tensors, Tensor{Name: "c", Offset: 8, Size: 40, Key: qk, Stored: StoredRaw, CopyStored: true})
		},
	})
}

// rejectsAll checks that each mutation of the index base returns makes
// the reader refuse it as corrupt, when it opens it or loads its
// statistics.
func rejectsAll(t *testing.T, base func() *Index, muts map[string]func(ix *Index)) {
	t.Helper()
	for name, mut := range muts {
		ix := base()
		mut(ix)
		b, err := marshalIndex(ix)
		if err != nil {
			t.Fatal(err)
		}
		// The statistics are read too (values that disagree are in them).
		ix, err = unmarshalIndex(b, "idx")
		if err == nil {
			err = ix.LoadStats()
		}
		if !errors.Is(err, ErrIndexCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustCompact(t *testing.T, b []byte) []byte {
	c, err := compactJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	if _, err := Create(dir); !errors.Is(err, ErrNotCache) {
		t.Errorf("non-empty dir: %v", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNotCache) {
		t.Errorf("open non-cache: %v", err)
	}
}

func TestCheckStat(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("abc"), 0o644)
	st, _ := os.Stat(p)
	sh := &Shard{Size: 3, ModTime: st.ModTime(), Tensors: []Tensor{{Name: "p", Stored: StoredFixed}, {Name: "r", Stored: StoredRaw}}}
	if err := CheckStat(sh, p); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte("abcd"), 0o644)
	if sh.AllInCache() {
		t.Fatal("a tensor only in the file: all in the cache")
	}
	if err := CheckStat(sh, p); !errors.Is(err, ErrSourceChanged) || strings.Contains(err.Error(), allInCacheHint) {
		t.Errorf("grown file: %v", err)
	}
	// A shard whose tensors are all in the cache (a payload, a raw copy)
	// is still refused, saying the file is not needed.
	sh.Tensors[1].CopyStored = true
	if !sh.AllInCache() {
		t.Fatal("a payload and a raw copy: not all in the cache")
	}
	if err := CheckSource(sh, p); !errors.Is(err, ErrSourceChanged) || !strings.Contains(err.Error(), allInCacheHint) || !strings.HasPrefix(err.Error(), p+": ") {
		t.Errorf("grown file of a shard all in the cache: %v", err)
	}
	// CheckStat, compress's check of the file it reads, says nothing of
	// the cache.
	if err := CheckStat(sh, p); !errors.Is(err, ErrSourceChanged) || strings.Contains(err.Error(), allInCacheHint) {
		t.Errorf("CheckStat of a grown file of a shard all in the cache: %v", err)
	}
}

// FuzzIndex: any index file is refused with an error or accepted as one
// whose references check out, never a panic; seeds are indexes of each
// version with packs and entropy payloads.
func FuzzIndex(f *testing.F) {
	ek, hk, pk := KeyOf([]byte("e")), KeyOf([]byte("h")), KeyOf([]byte("p"))
	ix := &Index{Objects: map[Key]*Object{
		ek: {Kind: KindEntropy, Size: 100, RawSize: 4096, Pack: pk, ObjectStats: ObjectStats{Values: 2048, Field: "BF16 exponent"}},
		hk: {Kind: KindRaw, Size: 8, RawSize: 8},
		pk: {Kind: KindPack, Size: 112, RawSize: 112},
	}, Sources: []Source{{Root: "/r", Shards: []Shard{{Name: "a", Size: 8 + 4096, Header: Region{0, 8, hk},
		Tensors: []Tensor{{Name: "w", DType: "BF16", Offset: 8, Size: 4096, Key: ek, Stored: StoredEntropy, CopyStored: true}}}}}}}
	b, err := marshalIndex(ix)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(bytes.Replace(b, []byte(`"version": 3,`), []byte(`"version": 2,`), 1))
	empty, _ := marshalIndex(&Index{Objects: map[Key]*Object{}})
	f.Add(empty)
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := unmarshalIndex(b, "idx")
		if err != nil {
			return
		}
		if err := ix.check(); err != nil {
			t.Fatalf("accepted an index its own check refuses: %v", err)
		}
		if err := ix.LoadStats(); err != nil && !errors.Is(err, ErrIndexCorrupt) {
			t.Fatalf("statistics refused with an error that is not ErrIndexCorrupt: %v", err)
		}
	})
}

// TestCreateAfterBareCreate: a directory holding only the empty objects
// and tmp folders an interrupted Create of an earlier build left (it made
// them before the marker) is taken as empty; one with anything in them,
// or beside them, is refused.
func TestCreateAfterBareCreate(t *testing.T) {
	bare := func(t *testing.T) string {
		dir := t.TempDir()
		for _, d := range []string{"objects", "tmp"} {
			if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dir := bare(t)
	createMarked(t, dir, "empty objects and tmp folders")
	for _, extra := range []string{"objects/x", "tmp/x", "other"} {
		dir := bare(t)
		os.WriteFile(filepath.Join(dir, extra), []byte("x"), 0o644)
		if _, err := Create(dir); !errors.Is(err, ErrNotCache) {
			t.Errorf("with %s: %v, want ErrNotCache", extra, err)
		}
	}
}

// TestCreateNewFolder: Create makes a cache folder that did not exist
// with its marker in one step (renamed into place), whatever the path's
// trailing slash, with the umask's permissions, leaving nothing beside
// it; an existing empty folder is taken as before.
func TestCreateNewFolder(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	for _, name := range []string{"cache", "cache/"} {
		parent := filepath.Join(t.TempDir(), "p")
		dir := filepath.Join(parent, name)
		w, err := Create(dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		w.Close()
		st, err := os.Stat(filepath.Join(parent, "cache"))
		if err != nil || st.Mode().Perm() != 0o750 {
			t.Fatalf("%s: the folder: %v, mode %v, want 0750 (umask 027)", name, err, st.Mode())
		}
		if _, err := os.Stat(filepath.Join(parent, "cache", MarkerName)); err != nil {
			t.Errorf("%s: no marker: %v", name, err)
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Errorf("%s: %d entries beside the cache, want none: %v", name, len(ents)-1, ents)
		}
		sub, _ := os.ReadDir(filepath.Join(parent, "cache"))
		for _, e := range sub {
			if strings.Contains(e.Name(), "splitzip-new") {
				t.Errorf("%s: a temporary folder inside the cache: %s", name, e.Name())
			}
		}
	}
	createMarked(t, t.TempDir(), "an empty folder")
}

// createMarked creates a cache in dir (what names the case) and fails t
// unless Create succeeds and leaves the cache's marker.
func createMarked(t *testing.T, dir, what string) {
	t.Helper()
	w, err := Create(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	w.Close()
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		t.Errorf("%s: no marker: %v", what, err)
	}
}

// TestIndexKeepsMode: a writer under a narrower umask replaces the index
// with the mode the index had, so the cache's other users can still read
// it; the first index takes the umask's.
func TestIndexKeepsMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "c")
	for i, mask := range []int{0o022, 0o077, 0o002} {
		syscall.Umask(mask)
		w, err := Create(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.PutBytes([]byte(fmt.Sprint("object ", i))); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		st, err := os.Stat(filepath.Join(dir, IndexName))
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("index after a commit under umask %03o: %v, mode %v, want 0644", mask, err, st.Mode())
		}
	}
}

// TestCloseDropsUncommitted: Close removes the objects a writer stored
// since its last Commit, and the objects/xx folders that leaves empty,
// not those holding committed objects.
func TestCloseDropsUncommitted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Above the packing threshold, so that each is a file of its own.
	big := func(s string) []byte { return append(bytes.Repeat([]byte{'x'}, 300<<10), s...) }
	kept, err := w.PutBytes(big("committed"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	var dropped []Key
	for i := range 40 {
		k, err := w.PutBytes(big(fmt.Sprint("uncommitted ", i)))
		if err != nil {
			t.Fatal(err)
		}
		dropped = append(dropped, k)
	}
	for _, k := range dropped {
		if p, _ := objectPath(dir, k); !fileExists(p) {
			t.Fatalf("object %s is not in a file of its own before Close", k)
		}
	}
	w.Close()
	keptPath, _ := objectPath(dir, kept)
	if _, err := os.Stat(keptPath); err != nil {
		t.Fatalf("the committed object: %v", err)
	}
	for _, k := range dropped {
		p, _ := objectPath(dir, k)
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an uncommitted object after Close: %v", err)
		}
		if filepath.Dir(p) == filepath.Dir(keptPath) {
			continue
		}
		if _, err := os.Stat(filepath.Dir(p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s, emptied, after Close: %v", filepath.Dir(p), err)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

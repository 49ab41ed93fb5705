package shardcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// packedSource writes a source of n raw tensors of the given sizes into
// w, each tensor's bytes a raw object, and returns its record and bytes.
func packedSource(t *testing.T, w *Writer, root string, seed byte, sizes ...int) (Source, [][]byte) {
	t.Helper()
	hk, err := w.PutBytes([]byte("header of " + root))
	if err != nil {
		t.Fatal(err)
	}
	sh := Shard{Name: "m.safetensors", ModTime: time.Unix(1, 0), Header: Region{0, uint64(len("header of " + root)), hk}}
	off := sh.Header.Size
	var data [][]byte
	for i, n := range sizes {
		b := bytes.Repeat([]byte{seed + byte(i)}, n)
		k, err := w.PutBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		sh.Tensors = append(sh.Tensors, Tensor{Name: fmt.Sprintf("t%d", i), DType: "U8", Shape: []uint64{uint64(n)}, Offset: off, Size: uint64(n), Key: k, Stored: StoredRaw, CopyStored: true})
		off += uint64(n)
		data = append(data, b)
	}
	sh.Size = off
	sh.Fingerprint = Fingerprint(&sh)
	return Source{Root: root, Shards: []Shard{sh}}, data
}

// TestPacks: small objects are written into packs in file order, aligned,
// read back through OpenObject and ReadObject, and a large one keeps its
// own file.
func TestPacks(t *testing.T) {
	w, dir := newWriter(t)
	src, data := packedSource(t, w, "/a", 1, 5, 100, 17, DefaultPackMax+1, 3)
	w.SetSource(src)
	c := commitAndOpen(t, w, dir)
	st := c.Index().Packs()
	if st.Packs != 1 || st.Members != 5 || st.DeadBytes != 0 {
		t.Errorf("packs: %+v, want 1 pack of the header and 4 small tensors", st)
	}
	var last uint64
	for i, tn := range src.Shards[0].Tensors {
		loc, o, err := c.Locate(tn.Key)
		if err != nil {
			t.Fatal(err)
		}
		packed := len(data[i]) <= DefaultPackMax
		if packed != (o.Pack != "") || o.Offset%PackAlign != 0 {
			t.Errorf("tensor %d: pack %q offset %d", i, o.Pack, o.Offset)
		}
		if packed {
			if o.Offset < last {
				t.Errorf("tensor %d at %d, before its predecessor at %d: not in file order", i, o.Offset, last)
			}
			last = o.Offset
		}
		b, _, err := c.ReadObject(tn.Key)
		if err != nil || !bytes.Equal(b, data[i]) {
			t.Errorf("tensor %d: read %d bytes, %v", i, len(b), err)
		}
		r, _, err := c.OpenObject(tn.Key)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data[i])+1)
		n, _ := r.ReadAt(got, 0)
		r.Close()
		if n != len(data[i]) || !bytes.Equal(got[:n], data[i]) {
			t.Errorf("tensor %d: section read %d bytes", i, n)
		}
		f, _ := os.ReadFile(loc.Path)
		if !bytes.Equal(f[loc.Offset:loc.Offset+uint64(len(data[i]))], data[i]) {
			t.Errorf("tensor %d: Locate points elsewhere", i)
		}
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 2 {
		t.Errorf("%d object files, want a pack and the large object", n)
	}
}

// TestPackKeyIsNotAContentKey: a pack whose bytes equal an object's (a
// pack of one member) has a key of its own.
func TestPackKeyIsNotAContentKey(t *testing.T) {
	w, dir := newWriter(t)
	k, _ := w.PutBytes([]byte("alone"))
	c := commitAndOpen(t, w, dir)
	o, _ := c.Lookup(k)
	if o.Pack == "" || o.Pack == k {
		t.Fatalf("member of pack %q, its own key %q", o.Pack, k)
	}
	if _, _, err := c.ReadObject(o.Pack); err != nil {
		t.Errorf("reading the pack: %v", err)
	}
}

// TestPackIndexRejects: members outside or misaligned in their pack,
// missing packs, nested packs and packs in a version 1 index are refused.
func TestPackIndexRejects(t *testing.T) {
	pk, mk, hk := KeyOf([]byte("p")), KeyOf([]byte("m")), KeyOf([]byte("h"))
	base := func() *Index {
		return &Index{Objects: map[Key]*Object{
			pk: {Kind: KindPack, Size: 64, RawSize: 64},
			mk: {Kind: KindRaw, Size: 16, RawSize: 16, Pack: pk, Offset: 32},
			hk: {Kind: KindRaw, Size: 8, RawSize: 8, Pack: pk},
		}, Sources: []Source{{Root: "/r", Shards: []Shard{{Name: "a", Size: 24, Header: Region{0, 8, hk},
			Tensors: []Tensor{{Name: "w", Offset: 8, Size: 16, Key: mk, Stored: StoredRaw, CopyStored: true}}}}}}}
	}
	if err := base().check(); err != nil {
		t.Fatal(err)
	}
	rejectsAll(t, base, map[string]func(ix *Index){
		"member past its pack":   func(ix *Index) { ix.Objects[mk].Offset = 56 },
		"member offset overflow": func(ix *Index) { ix.Objects[mk].Offset = 1<<64 - 16 },
		"misaligned member":      func(ix *Index) { ix.Objects[mk].Offset = 33 },
		"missing pack":           func(ix *Index) { delete(ix.Objects, pk) },
		"pack in a pack":         func(ix *Index) { ix.Objects[pk].Pack = pk },
		"offset without a pack":  func(ix *Index) { ix.Objects[mk].Pack = "" },
		"pack grows":             func(ix *Index) { ix.Objects[pk].RawSize = 1 << 62 },
		"tensor names a pack":    func(ix *Index) { ix.Sources[0].Shards[0].Tensors[0].Key = pk },
	})
	b, _ := marshalIndexJSON(base())
	v1 := bytes.Replace(b, []byte(`"version": 2,`), []byte(`"version": 1,`), 1)
	if _, err := unmarshalIndex(v1, "idx"); !errors.Is(err, ErrIndexCorrupt) || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("packs in a version 1 index: %v", err)
	}
}

// TestGCRepacks: when a pack's members are used by one source and not by
// another that is forgotten, gc rewrites the pack with the used members
// and the cache stays whole.
func TestGCRepacks(t *testing.T) {
	w, dir, b, bdata := sharedPack(t)
	if err := w.Forget("/a"); err != nil {
		t.Fatal(err)
	}
	dry, err := w.GC(context.Background(), GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if res.Repacked != 1 || res.Objects != 4 || dry.Bytes != res.Bytes || res.Bytes < 600 {
		t.Errorf("gc %+v (dry run %+v): want one pack rewritten, 4 objects and at least 600 bytes freed", res, dry)
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st := c.Index().Packs(); st.Packs != 1 || st.Members != 3 || st.DeadBytes != 0 {
		t.Errorf("after gc: %+v", st)
	}
	for i, tn := range b.Shards[0].Tensors {
		if got, _, err := c.ReadObject(tn.Key); err != nil || !bytes.Equal(got, bdata[i]) {
			t.Errorf("tensor %d after gc: %v", i, err)
		}
	}
	if n := countFiles(t, filepath.Join(dir, "objects")); n != 1 {
		t.Errorf("%d object files after gc, want the new pack", n)
	}
}

// sharedPack commits two sources, /a with three tensors and /b with two,
// whose objects share a pack, and returns the writer, the cache and /b
// with its tensors' bytes.
func sharedPack(t *testing.T) (*Writer, string, Source, [][]byte) {
	t.Helper()
	w, dir := newWriter(t)
	a, _ := packedSource(t, w, "/a", 1, 100, 200, 300)
	b, bdata := packedSource(t, w, "/b", 2, 400, 500)
	w.SetSource(a)
	w.SetSource(b)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	return w, dir, b, bdata
}

// newWriter creates a cache in a temporary directory.
func newWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "c")
	w, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	return w, dir
}

// committedCache makes a cache of one checkpoint, /a, of two packed
// tensors, committed and closed, and returns its folder.
func committedCache(t *testing.T) string {
	t.Helper()
	w, dir := newWriter(t)
	a, _ := packedSource(t, w, "/a", 1, 100, 200)
	w.SetSource(a)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return dir
}

// commitAndOpen commits and closes w and opens the cache it wrote.
func commitAndOpen(t *testing.T, w *Writer, dir string) *Cache {
	t.Helper()
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestEntropyIndexRejects: entropy tensors whose object is missing, of
// another kind or of another size, an entropy object that would decode to
// more than MaxEntropyRatio times its bytes, and entropy objects in an
// index of version 2 are refused; the index is written as version 3
// exactly when it has entropy objects.
func TestEntropyIndexRejects(t *testing.T) {
	ek, hk := KeyOf([]byte("e")), KeyOf([]byte("h"))
	base := func() *Index {
		return &Index{Objects: map[Key]*Object{
			ek: {Kind: KindEntropy, Size: 100, RawSize: 4096, ObjectStats: ObjectStats{Values: 2048, Field: "BF16 exponent"}},
			hk: {Kind: KindRaw, Size: 8, RawSize: 8},
		}, Sources: []Source{{Root: "/r", Shards: []Shard{{Name: "a", Size: 8 + 4096, Header: Region{0, 8, hk},
			Tensors: []Tensor{{Name: "w", DType: "BF16", Offset: 8, Size: 4096, Key: ek, Stored: StoredEntropy, CopyStored: true}}}}}}}
	}
	if err := base().check(); err != nil {
		t.Fatal(err)
	}
	rejectsAll(t, base, map[string]func(ix *Index){
		"missing payload": func(ix *Index) { delete(ix.Objects, ek) },
		"payload of the wrong kind": func(ix *Index) {
			ix.Objects[ek].Kind = KindFixed
		},
		"payload of another size": func(ix *Index) { ix.Objects[ek].RawSize = 2048 },
		"decodes too large":       func(ix *Index) { ix.Objects[ek].RawSize = 100*MaxEntropyRatio + 100 },
		"raw object as entropy":   func(ix *Index) { ix.Sources[0].Shards[0].Tensors[0].Key = hk },
	})
	b, _ := marshalIndexJSON(base())
	if !bytes.Contains(b, []byte(`"version": 3,`)) {
		t.Fatalf("an index with entropy objects is not version 3: %.80s", b)
	}
	v2 := bytes.Replace(b, []byte(`"version": 3,`), []byte(`"version": 2,`), 1)
	if _, err := unmarshalIndex(v2, "idx"); !errors.Is(err, ErrIndexCorrupt) || !strings.Contains(err.Error(), "version 3") {
		t.Errorf("entropy payloads in a version 2 index: %v", err)
	}
	plain := base()
	delete(plain.Objects, ek)
	plain.Sources = nil
	if b, _ := marshalIndexJSON(plain); !bytes.Contains(b, []byte(`"version": 2,`)) {
		t.Errorf("an index without entropy objects is not version 2: %.80s", b)
	}
}

// TestGCRefusesDamagedMember: a pack gc would rewrite whose member still
// in use is damaged is refused, naming the member, and the cache is left
// as it was: the damaged bytes are not copied into a new pack, where they
// would pass for good ones.
func TestGCRefusesDamagedMember(t *testing.T) {
	w, dir, b, _ := sharedPack(t)
	w.Close()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	loc, _, err := c.Locate(b.Shards[0].Tensors[1].Key)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(loc.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xee}, int64(loc.Offset)+7); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before := snapshot(t, dir)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrObjectCorrupt) || !strings.Contains(err.Error(), loc.Path) || !strings.Contains(err.Error(), "nothing was removed") {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err = DryRunGC(context.Background(), dir, GCOptions{Forget: []string{"/a"}})
	refused("a dry run of gc of a pack with a damaged member in use", err)
	w, err = Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, err = w.GC(context.Background(), GCOptions{Forget: []string{"/a"}})
	refused("gc of a pack with a damaged member in use", err)
	w.Close()
	after := snapshot(t, dir)
	for _, m := range []map[string]fileState{before, after} {
		delete(m, filepath.Join(dir, LockName))
		delete(m, filepath.Join(dir, "tmp")) // its time: the copies made and removed
	}
	sameSnapshot(t, "the refused gc", before, after)
	// A pack cut short, and one that is gone: damaged too, not an I/O
	// failure of gc's.
	if err := os.Truncate(loc.Path, int64(loc.Offset)+3); err != nil {
		t.Fatal(err)
	}
	_, err = DryRunGC(context.Background(), dir, GCOptions{Forget: []string{"/a"}})
	refused("gc of a pack cut short", err)
	if err := os.Remove(loc.Path); err != nil {
		t.Fatal(err)
	}
	_, err = DryRunGC(context.Background(), dir, GCOptions{Forget: []string{"/a"}})
	refused("gc of a pack that is gone", err)
}

// TestHasChecksEarlierRaw: a raw object an earlier run stored is not
// reported stored when its bytes no longer hash to its key; putting it
// again replaces it, and Mended names it.
func TestHasChecksEarlierRaw(t *testing.T) {
	w, dir := newWriter(t)
	w.SetPackMax(0)
	data := bytes.Repeat([]byte("splitzip"), 512)
	key, err := w.PutBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p, _ := objectPath(dir, key)
	bad := bytes.Clone(data)
	bad[100] ^= 1
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err = Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.Has(key); ok {
		t.Fatal("Has trusts a damaged raw object")
	}
	if m := w.Mended(); len(m) != 0 {
		t.Fatalf("Mended before the object was stored again: %v", m)
	}
	if _, err := w.PutBytes(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if m := w.Mended(); !errors.Is(m[key], ErrObjectCorrupt) || !strings.Contains(m[key].Error(), p) {
		t.Fatalf("Mended: %v", m)
	}
	if _, ok := w.Has(key); !ok {
		t.Fatal("the object written again is not stored")
	}
	w.Close()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, _, err := c.ReadObject(key); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after putting it again: %v", err)
	}
}

// TestMissingObject: a file the index names that is missing is a damaged
// cache, unless the cache's index or objects folder went with it (the
// cache removed or moved while open): a missing file, not corruption.
func TestMissingObject(t *testing.T) {
	dir := t.TempDir()
	obj := filepath.Join(dir, "objects", "ab", "abcd")
	if err := os.MkdirAll(filepath.Dir(obj), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexName), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := MissingObject(obj)
	if !errors.Is(err, ErrObjectCorrupt) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCacheGone) {
		t.Errorf("object gone: %v, want ErrObjectCorrupt", err)
	}
	for _, gone := range []string{filepath.Join(dir, "objects"), filepath.Join(dir, IndexName)} {
		if err := os.RemoveAll(gone); err != nil {
			t.Fatal(err)
		}
		err := MissingObject(obj)
		if !errors.Is(err, ErrCacheGone) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrObjectCorrupt) ||
			!strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("%s gone: %v, want ErrCacheGone, a missing file", gone, err)
		}
	}
}

package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// gen writes a small synthetic checkpoint.
func gen(t *testing.T, dir string, size uint64, shards int, seed uint64) {
	t.Helper()
	if _, err := synth.Write(context.Background(), dir, synth.Config{Bytes: size, Shards: shards, Seed: seed}); err != nil {
		t.Fatal(err)
	}
}

func compress(t *testing.T, src, out string, self bool) *CompressResult {
	t.Helper()
	res, err := Compress(context.Background(), src, CompressOptions{Output: out, Jobs: 2, MinSaving: DefaultMinSaving, SelfContained: self, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// compressedFixture generates a checkpoint of size bytes in shards (seed
// seed) and compresses it with the fixed codec: it returns the folder
// holding both, the checkpoint and the cache.
func compressedFixture(t *testing.T, size uint64, shards int, seed uint64) (dir, src, cache string) {
	t.Helper()
	dir = t.TempDir()
	src, cache = filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, size, shards, seed)
	compress(t, src, cache, false)
	return dir, src, cache
}

// entropyOf is a tensor report's exponent entropy, -1 where the cache
// records none.
func entropyOf(r TensorReport) float64 {
	if r.ExponentEntropy == nil {
		return -1
	}
	return *r.ExponentEntropy
}

func mustVerify(t *testing.T, cache string) *VerifyResult {
	t.Helper()
	res, err := Verify(context.Background(), cache, VerifyOptions{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ents, _ := os.ReadDir(a)
	for _, e := range ents {
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, err := os.ReadFile(filepath.Join(b, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs after restore (%v)", e.Name(), err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 3<<20, 3, 1)
	res := compress(t, src, cache, false)
	tot := res.Totals
	if tot.CompressedTensors == 0 || tot.CompressedTensors >= tot.Tensors {
		t.Fatalf("totals %+v: want some but not all tensors compressed (F32 and I64 stay raw)", tot)
	}
	if bpv := 16 * float64(tot.BF16StoredBytes) / float64(tot.BF16RawBytes); bpv > 12.2 {
		t.Errorf("BF16 at %.3f bits per value", bpv)
	}
	if v := mustVerify(t, cache); !v.OK() || v.Payloads != tot.CompressedTensors {
		t.Fatalf("verify: %+v", v)
	}
	ins, err := Inspect(context.Background(), cache, InspectOptions{Tensors: true})
	if err != nil {
		t.Fatal(err)
	}
	if ins.Totals.StoredBytes != tot.StoredBytes || len(ins.Tensors) != tot.Tensors {
		t.Errorf("inspect totals %+v, compress totals %+v", ins.Totals, tot)
	}
	// Every BF16 tensor, compressed or left raw, has its exponent statistics.
	var bits, values float64
	for _, r := range ins.Tensors {
		if r.DType == "BF16" && r.Values > 0 && (r.Coverage <= 0 || entropyOf(r) <= 0) {
			t.Errorf("%s (%s, %s): coverage %g, entropy %g", r.Name, r.Stored, r.Reason, r.Coverage, entropyOf(r))
		}
		if r.DType == "BF16" {
			bits += float64(r.Values) * (8 + entropyOf(r))
			values += float64(r.Values)
		}
	}
	// The entropy bound is those statistics weighted by values, and lies
	// below what the fixed-rate payloads store.
	fixed := 16 * float64(ins.Totals.BF16StoredBytes) / float64(ins.Totals.BF16RawBytes)
	if b := ins.BF16BoundBits; b < 8 || b >= fixed || b-bits/values > 1e-9 || bits/values-b > 1e-9 {
		t.Errorf("BF16 bound %.4f bits/value (from the tensors %.4f), fixed rate %.4f", b, bits/values, fixed)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, out)
	// Decompress never overwrites.
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err == nil {
		t.Error("decompress over existing files succeeded")
	}
}

func TestDedupeAndSelfContained(t *testing.T) {
	dir := t.TempDir()
	a, b, cache := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cache")
	gen(t, a, 2<<20, 1, 5)
	gen(t, b, 2<<20, 2, 5) // same tensors, other sharding
	r1 := compress(t, a, cache, true)
	r2 := compress(t, b, cache, true)
	ins, err := Inspect(context.Background(), cache, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Sources) != 2 {
		t.Fatalf("%d sources", len(ins.Sources))
	}
	// Shared tensors are stored once: the cache holds about one checkpoint.
	if ins.ObjectBytes > r1.Totals.StoredBytes+r2.Totals.StoredBytes/10 {
		t.Errorf("cache holds %d bytes for two copies of a %d-byte checkpoint", ins.ObjectBytes, r1.Totals.StoredBytes)
	}
	if v := mustVerify(t, cache); !v.OK() {
		t.Fatalf("verify: %+v", v.Problems)
	}
	// Several sources: decompress must be told which.
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "x")}); !errors.Is(err, shardcache.ErrAmbiguousSource) {
		t.Errorf("decompress without --source: %v", err)
	}
	// Self-contained: restores without the source.
	orig, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
	os.RemoveAll(a)
	out := filepath.Join(dir, "out")
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out, Source: a}); err != nil {
		t.Fatal(err)
	}
	restored, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	if len(orig) == 0 || !bytes.Equal(orig, restored) {
		t.Fatal("self-contained restore differs from the deleted source")
	}
}

// TestSelfContainedKept: a checkpoint compressed --self-contained, then
// again without into the same cache, keeps its raw copies (and says how
// many): a gc after removes none of them, and the cache still restores
// and verifies with the source gone.
func TestSelfContainedKept(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "src"), filepath.Join(dir, "cache")
	gen(t, src, 2<<20, 2, 9)
	first := compress(t, src, cache, true)
	if first.Totals.KeptCopies != 0 {
		t.Fatalf("a first run kept %d copies", first.Totals.KeptCopies)
	}
	// One copy damaged meanwhile: the run stores it again from the source.
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	src0, err := c.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	var damaged *shardcache.Tensor
	for i := range src0.Shards[0].Tensors {
		if tn := &src0.Shards[0].Tensors[i]; tn.Stored == shardcache.StoredRaw && tn.CopyStored && tn.Size > 16 {
			damaged = tn
		}
	}
	if damaged == nil {
		t.Fatal("no raw copy")
	}
	cachetest.Flip(t, c, damaged.Key, int64(damaged.Size)/2, 0x20)
	c.Close() // a reader: gc waits for none
	again := compress(t, src, cache, false)
	if !slices.ContainsFunc(again.Mended, func(m shardcache.Mend) bool { return m.Key == damaged.Key }) {
		t.Errorf("the damaged copy of %s was not stored again: mended %+v", damaged.Name, again.Mended)
	}
	raw := again.Totals.Tensors - again.Totals.CompressedTensors
	if raw == 0 || again.Totals.KeptCopies != raw || again.Totals.KeptCopyBytes == 0 {
		t.Fatalf("the run without --self-contained kept %d copies (%d bytes), want all %d raw tensors'", again.Totals.KeptCopies, again.Totals.KeptCopyBytes, raw)
	}
	if res := cachetest.GC(t, cache); res.Objects != 0 {
		t.Errorf("gc removed %d objects, want none: %+v", res.Objects, res)
	}
	if c, err = shardcache.Open(cache); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CheckSelfContained(); err != nil {
		t.Errorf("no longer self-contained: %v", err)
	}
	if ins, err := Inspect(context.Background(), cache, InspectOptions{}); err != nil || len(ins.Sources) != 1 || !ins.Sources[0].SelfContained {
		t.Errorf("inspect: %v, %+v, want one self-contained source", err, ins)
	}
	keep := filepath.Join(dir, "kept")
	if err := os.Rename(src, keep); err != nil {
		t.Fatal(err)
	}
	if v := mustVerify(t, cache); !v.OK() || len(v.Absent) == 0 {
		t.Fatalf("verify without the source: %+v, absent %v", v.Problems, v.Absent)
	}
	out := filepath.Join(dir, "out")
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out, Source: src}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, keep, out)
	// A plain cache gains no copies from a run without --self-contained.
	plain := filepath.Join(dir, "plain")
	compress(t, keep, plain, false)
	if ins, err := Inspect(context.Background(), plain, InspectOptions{}); err != nil || len(ins.Sources) != 1 || ins.Sources[0].SelfContained {
		t.Errorf("inspect of a plain cache: %v, %+v, want one source not self-contained", err, ins)
	}
	if r := compress(t, keep, plain, false); r.Totals.KeptCopies != 0 {
		t.Errorf("a plain cache's second run kept %d copies", r.Totals.KeptCopies)
	}
}

// TestIndexFileAbsentOrChanged: a checkpoint's index file is always in
// the cache, so verify checks the copy when the file is gone (a note, no
// problem), also for a cache that is not self-contained; an edited one
// is a changed source worded as an index file, not a shard.
func TestIndexFileAbsentOrChanged(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "src"), filepath.Join(dir, "cache")
	gen(t, src, 2<<20, 2, 4)
	compress(t, src, cache, false)
	p := filepath.Join(src, safetensors.IndexFileName)
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if v := mustVerify(t, cache); !v.OK() || !slices.Contains(v.Absent, p) {
		t.Fatalf("verify without the index file: %+v, absent %v", v.Problems, v.Absent)
	}
	edited := bytes.Clone(orig)
	edited[len(edited)/2] ^= 1
	if err := os.WriteFile(p, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	v := mustVerify(t, cache)
	if v.OK() || len(v.Problems) != 1 {
		t.Fatalf("verify with an edited index file: %+v", v.Problems)
	}
	if pr := v.Problems[0]; pr.File != p || !errors.Is(pr.Err, shardcache.ErrSourceChanged) || !strings.Contains(pr.Error, "index file changed") || strings.Contains(pr.Error, "shard") {
		t.Errorf("an edited index file: %+v", pr)
	}
	// The file there, the cache's copy of it lost: the cache's problem,
	// not an absent file.
	if err := os.WriteFile(p, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	src0, err := c.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	cachetest.Remove(t, c, src0.Index.Key)
	c.Close()
	v = mustVerify(t, cache)
	if v.OK() || len(v.Absent) != 0 || !errors.Is(v.Problems[0].Err, shardcache.ErrObjectCorrupt) {
		t.Errorf("the index file's copy lost: %+v, absent %v", v.Problems, v.Absent)
	}
}

// TestDecompressTouchedSource: a shard with tensors only in its file,
// whose time changed, stops a decompress as the shard's problem: the
// error names the file once and no tensor (it named the first raw one,
// which may be unchanged).
func TestDecompressTouchedSource(t *testing.T) {
	dir, src, cache := compressedFixture(t, 2<<20, 1, 3)
	p := filepath.Join(src, "model.safetensors")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	_, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "out")})
	if !errors.Is(err, shardcache.ErrSourceChanged) || strings.Contains(err.Error(), `tensor "`) || strings.Count(err.Error(), p) != 1 {
		t.Fatalf("decompress beside a touched source: %v; want ErrSourceChanged naming %s once and no tensor", err, p)
	}
}

func TestSourceChanged(t *testing.T) {
	dir, src, cache := compressedFixture(t, 2<<20, 1, 2)
	p := filepath.Join(src, "model.safetensors")
	b, _ := os.ReadFile(p)
	b[len(b)-5] ^= 1 // a byte of the last tensor
	os.WriteFile(p, b, 0o644)
	v := mustVerify(t, cache)
	if v.OK() {
		t.Fatal("verify accepted a changed source")
	}
	found := false
	for _, pr := range v.Problems {
		found = found || (pr.Tensor != "" && strings.Contains(pr.Error, "no longer match"))
	}
	if !found {
		t.Errorf("no problem names the changed tensor: %+v", v.Problems)
	}
	// Raw aliases cannot be restored from a changed source.
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "out")}); err == nil {
		t.Error("decompress from a changed source succeeded")
	}
}

func TestCorruptCache(t *testing.T) {
	dir, _, cache := compressedFixture(t, 2<<20, 1, 3)
	// A flipped byte in a payload.
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	key := fixedKey(t, c)
	o, _ := c.Lookup(key)
	restore := cachetest.Flip(t, c, key, int64(o.Size/2), 0x10)
	if v := mustVerify(t, cache); v.OK() || !strings.Contains(v.Problems[0].Error, "checksum") {
		t.Errorf("verify of a flipped payload: %+v", v.Problems)
	}
	restore()
	// A flipped byte of a pack's padding, which no member covers: the
	// pack's hash is not its key.
	var pack shardcache.Key
	covered := map[shardcache.Key][]bool{}
	for _, o := range c.Index().Objects {
		if o.Pack != "" {
			if covered[o.Pack] == nil {
				covered[o.Pack] = make([]bool, c.Index().Objects[o.Pack].Size)
			}
			for i := o.Offset; i < o.Offset+o.Size; i++ {
				covered[o.Pack][i] = true
			}
		}
	}
	pad := int64(-1)
	for k, cov := range covered {
		if i := slices.Index(cov, false); i >= 0 {
			pack, pad = k, int64(i)
			break
		}
	}
	if pad < 0 {
		t.Fatal("no pack with padding in the fixture")
	}
	restore = cachetest.Flip(t, c, pack, pad, 0x01)
	packPath, _ := c.FilePath(pack)
	if v := mustVerify(t, cache); len(v.Problems) != 1 || v.Problems[0].File != packPath || !errors.Is(v.Problems[0].Err, shardcache.ErrObjectCorrupt) ||
		strings.Contains(v.Problems[0].Error, packPath) || !strings.Contains(v.Problems[0].Error, "not its key") {
		t.Errorf("verify of a flipped pack padding byte: %+v", v.Problems)
	}
	restore()
	if v := mustVerify(t, cache); !v.OK() {
		t.Errorf("verify after the padding was restored: %+v", v.Problems)
	}
	// A flipped byte in the index's statistics: a problem verify reports
	// and inspect fails on, both naming the index file; decompress, which
	// reads what loads read, is served.
	ip := filepath.Join(cache, shardcache.IndexName)
	ix, _ := os.ReadFile(ip)
	orig := append([]byte(nil), ix...)
	ix[len(ix)-1] ^= 1
	os.WriteFile(ip, ix, 0o644)
	v, err := Verify(context.Background(), cache, VerifyOptions{})
	if err != nil || v.OK() || v.Problems[0].File != ip || !errors.Is(v.Problems[0].Err, shardcache.ErrIndexCorrupt) || !strings.Contains(v.Problems[0].Error, ip) {
		t.Errorf("verify of flipped statistics: %+v, %v", v, err)
	}
	if _, err := Inspect(context.Background(), cache, InspectOptions{}); !errors.Is(err, shardcache.ErrIndexCorrupt) || !strings.Contains(err.Error(), ip) {
		t.Errorf("inspect of flipped statistics: %v", err)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "out")}); err != nil {
		t.Errorf("decompress with flipped statistics: %v", err)
	}
	// A flipped byte in the index's body (after its 64-byte header).
	// With the backup a commit writes, the cache is read from it and
	// verify reports the index; without it, verify fails.
	ix = orig
	ix[64+8] ^= 1
	os.WriteFile(ip, ix, 0o644)
	v, err = Verify(context.Background(), cache, VerifyOptions{})
	if err != nil || len(v.Problems) != 1 || v.Problems[0].File != ip || !errors.Is(v.Problems[0].Err, shardcache.ErrIndexCorrupt) {
		t.Errorf("verify of a flipped index, its backup whole: %+v, %v", v, err)
	}
	os.Remove(filepath.Join(cache, shardcache.BackupName))
	if _, err := Verify(context.Background(), cache, VerifyOptions{}); !errors.Is(err, shardcache.ErrIndexCorrupt) {
		t.Errorf("verify of a flipped index without its backup: %v", err)
	}
}

func TestBadOutputs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	gen(t, src, 1<<20, 1, 4)
	for _, out := range []string{src, filepath.Join(src, "cache")} {
		if _, err := Compress(context.Background(), src, CompressOptions{Output: out}); !errors.Is(err, ErrOutputInSource) {
			t.Errorf("output %s: %v", out, err)
		}
	}
	// A checkpoint of one file named by its path is that file: a cache
	// beside it in its folder is fine (then verified), the
	// file itself is not an output.
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	if _, err := Compress(context.Background(), shards[0], CompressOptions{Output: shards[0]}); !errors.Is(err, ErrOutputInSource) {
		t.Errorf("output the source file: %v", err)
	}
	beside := filepath.Join(src, "one.sz")
	if _, err := Compress(context.Background(), shards[0], CompressOptions{Output: beside}); err != nil {
		t.Fatalf("output beside the source file: %v", err)
	}
	if _, err := Verify(context.Background(), beside, VerifyOptions{}); err != nil {
		t.Errorf("verify of the cache beside its source file: %v", err)
	}
	if _, err := Compress(context.Background(), src, CompressOptions{Output: filepath.Join(dir, "c1")}); err != nil {
		t.Errorf("the folder, holding a cache: %v", err)
	}
	other := filepath.Join(dir, "other")
	os.MkdirAll(other, 0o755)
	os.WriteFile(filepath.Join(other, "precious.txt"), []byte("x"), 0o644)
	if _, err := Compress(context.Background(), src, CompressOptions{Output: other}); !errors.Is(err, shardcache.ErrNotCache) {
		t.Errorf("non-empty output: %v", err)
	}
	if _, err := Compress(context.Background(), filepath.Join(dir, "missing"), CompressOptions{Output: filepath.Join(dir, "c")}); err == nil {
		t.Error("missing source accepted")
	}
}

func TestInterruptedCompressLeavesNoCache(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, 2<<20, 2, 6)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Into an empty folder that was there before: the run removes what
	// it put there, and leaves the folder.
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Compress(ctx, src, CompressOptions{Output: cache}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled compress: %v", err)
	}
	if ents, err := os.ReadDir(cache); err != nil || len(ents) != 0 {
		t.Errorf("an interrupted compress into an empty folder left %d entries there (%v)", len(ents), err)
	}
	// Into a folder that holds another run's skeleton (a killed first
	// compress's): it is left as it is.
	if w, err := shardcache.Create(cache); err != nil {
		t.Fatal(err)
	} else {
		w.Close()
	}
	if _, err := Compress(ctx, src, CompressOptions{Output: cache}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled compress: %v", err)
	}
	if _, err := Verify(context.Background(), cache, VerifyOptions{}); !errors.Is(err, shardcache.ErrNotCache) {
		t.Errorf("verify after an interrupted compress: %v", err)
	}
	// The interrupted cache is reused by the next run.
	compress(t, src, cache, false)
	cache = filepath.Join(dir, "cache2")
	// A truncated shard fails compress naming the file.
	p := filepath.Join(src, "model-00002-of-00002.safetensors")
	st, _ := os.Stat(p)
	os.Truncate(p, st.Size()-100)
	_, err := Compress(context.Background(), src, CompressOptions{Output: cache})
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("compress of a truncated shard: %v", err)
	}
	if _, err := Verify(context.Background(), cache, VerifyOptions{}); err == nil {
		t.Error("verify accepted the cache of a failed compress")
	}
	// A failed first compress leaves no object files behind.
	n := 0
	filepath.WalkDir(filepath.Join(cache, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != 0 {
		t.Errorf("a failed compress left %d object files", n)
	}
}

// TestFileModes: under umask 022 every file of the cache and of a restored
// checkpoint is 0644 and every directory 0755, as cp makes them.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 1<<20, 2, 9)
	compress(t, src, cache, true)
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{cache, out} {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			st, _ := d.Info()
			want := os.FileMode(0o644)
			if d.IsDir() {
				want = 0o755
			}
			if st.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), want)
			}
			return nil
		})
	}
}

// TestStreaming runs verify and decompress with pieces of two chunks,
// so tensors span many pieces, and checks they still catch changes.
func TestStreaming(t *testing.T) {
	defer func(b int) { pieceBytes = b }(pieceBytes)
	pieceBytes = 2 * 2 * codec.ChunkValues
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 4<<20, 2, 8)
	compress(t, src, cache, false)
	if v := mustVerify(t, cache); !v.OK() || v.Payloads == 0 {
		t.Fatalf("verify: %+v", v)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, out)
	p := filepath.Join(src, "model-00001-of-00002.safetensors")
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 0x20
	os.WriteFile(p, b, 0o644)
	v := mustVerify(t, cache)
	if v.OK() {
		t.Fatal("streaming verify accepted a changed source")
	}
}

func TestForgetAndGC(t *testing.T) {
	dir := t.TempDir()
	a, b, cache := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cache")
	gen(t, a, 2<<20, 1, 21)
	gen(t, b, 2<<20, 1, 22) // different weights
	compress(t, a, cache, false)
	compress(t, b, cache, false)
	before, _ := Inspect(context.Background(), cache, InspectOptions{Tensors: true})
	// The second compress rewrote the index with the first one's
	// statistics, and gc keeps them too.
	statsKept := func(when string, ins *InspectResult) {
		t.Helper()
		for _, r := range ins.Tensors {
			if r.DType == "BF16" && r.Values > 0 && (r.Coverage <= 0 || entropyOf(r) <= 0) {
				t.Errorf("%s: %s %s (%s): coverage %g, entropy %g", when, r.Source, r.Name, r.Stored, r.Coverage, entropyOf(r))
			}
		}
	}
	statsKept("after the second compress", before)
	w, err := shardcache.Create(cache)
	if err != nil {
		t.Fatal(err)
	}
	absA, _ := filepath.Abs(a)
	if err := w.Forget(absA); err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), shardcache.GCOptions{})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	after, _ := Inspect(context.Background(), cache, InspectOptions{Tensors: true})
	statsKept("after gc", after)
	if len(after.Sources) != 1 || res.Objects == 0 || after.ObjectBytes >= before.ObjectBytes {
		t.Fatalf("gc removed %+v; objects %d -> %d bytes", res, before.ObjectBytes, after.ObjectBytes)
	}
	if v := mustVerify(t, cache); !v.OK() {
		t.Fatalf("verify after gc: %+v", v.Problems)
	}
}

// TestKeptPayloads: a second compress into the same cache with another
// codec keeps the payloads the first stored (a tensor has one form in a
// cache) and counts them; the same codec again counts none.
func TestKeptPayloads(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, 2<<20, 1, 9)
	first := compress(t, src, out, false)
	if first.Totals.KeptTensors != 0 {
		t.Errorf("first run: %d kept", first.Totals.KeptTensors)
	}
	// A float tensor of another dtype too small for an entropy payload to
	// save anything (synth's F32 inv_freq, hidden/32 values) is not said
	// to be one --codec entropy would code.
	rep, err := Inspect(context.Background(), out, InspectOptions{Tensors: true})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, r := range rep.Tensors {
		if r.Name == "model.rotary_emb.inv_freq" {
			found++
			if r.Reason != "dtype F32" {
				t.Errorf("a %d-value F32 tensor left raw because %q", r.Values, r.Reason)
			}
		}
	}
	if found != 1 {
		t.Fatalf("%d tensors named model.rotary_emb.inv_freq in the fixture, want 1", found)
	}
	res, err := Compress(context.Background(), src, CompressOptions{Output: out, Jobs: 2, MinSaving: DefaultMinSaving, NoSync: true, Codec: CodecEntropy})
	if err != nil {
		t.Fatal(err)
	}
	if tot := res.Totals; tot.KeptTensors != first.Totals.CompressedTensors || tot.EntropyTensors != 0 || tot.KeptBytes == 0 {
		t.Errorf("entropy over fixed: %d kept (%d bytes), %d entropy; want the %d fixed payloads kept", tot.KeptTensors, tot.KeptBytes, tot.EntropyTensors, first.Totals.CompressedTensors)
	}
	// auto over the fixed BF16 payloads: what auto stores too.
	if res, err := Compress(context.Background(), src, CompressOptions{Output: out, Jobs: 2, MinSaving: DefaultMinSaving, NoSync: true, Codec: CodecAuto}); err != nil || res.Totals.KeptTensors != 0 {
		t.Errorf("auto over the same payloads: %v, %+v kept", err, res)
	}
	if again := compress(t, src, out, false); again.Totals.KeptTensors != 0 || again.StrayFiles != 0 {
		t.Errorf("fixed over fixed: %d kept, %d stray files", again.Totals.KeptTensors, again.StrayFiles)
	}
	// Entropy payloads of another dtype (F32) stored by an entropy run
	// are kept by a fixed run too, not aliased raw (which left them to
	// gc and hinted at a codec the cache had used).
	f32, f32out := filepath.Join(dir, "f32"), filepath.Join(dir, "f32cache")
	if _, err := synth.Write(context.Background(), f32, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 4, DType: "F32"}); err != nil {
		t.Fatal(err)
	}
	ent, err := Compress(context.Background(), f32, CompressOptions{Output: f32out, Jobs: 2, MinSaving: DefaultMinSaving, NoSync: true, Codec: CodecEntropy})
	if err != nil || ent.Totals.EntropyTensors == 0 {
		t.Fatalf("entropy run over F32: %v, %+v", err, ent)
	}
	fix, err := Compress(context.Background(), f32, CompressOptions{Output: f32out, Jobs: 2, MinSaving: DefaultMinSaving, NoSync: true})
	if err != nil || fix.Totals.EntropyTensors != ent.Totals.EntropyTensors || fix.Totals.KeptTensors != ent.Totals.EntropyTensors {
		t.Errorf("fixed run over the F32 entropy payloads: %v; %d entropy, %d kept; want the %d kept", err, fix.Totals.EntropyTensors, fix.Totals.KeptTensors, ent.Totals.EntropyTensors)
	}
	if dry, err := shardcache.DryRunGC(context.Background(), f32out, shardcache.GCOptions{}); err != nil || dry.Objects != 0 {
		t.Errorf("gc after the fixed run would remove %d objects (%v): the entropy payloads were dropped", dry.Objects, err)
	}
	// A file a killed run moved into objects/ is counted, not removed,
	// where the run left a temporary file (of a process that is gone).
	stray := filepath.Join(out, "objects", "zz", "stray")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	os.WriteFile(stray, make([]byte, 100), 0o644)
	os.WriteFile(filepath.Join(out, "tmp", atomicfile.TempPrefix+"999999999-x-object"), nil, 0o644)
	if res := compress(t, src, out, false); res.StrayFiles != 1 || res.StrayBytes != 100 {
		t.Errorf("with a stray file: %d stray files, %d bytes; want 1, 100", res.StrayFiles, res.StrayBytes)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("compress removed a stray file: %v", err)
	}
}

// TestConcurrentFirstCompress: two compresses into one folder, absent or
// empty before them: one may lose the writer's lock, and its cleanup
// never takes the winner's files from under it; the winner's cache
// verifies. (The loser's cleanup once removed the winner's marker, lock
// and objects/ where the folder had been empty.)
func TestConcurrentFirstCompress(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	gen(t, src, 1<<20, 1, 8)
	for i := range 24 {
		out := filepath.Join(dir, fmt.Sprintf("c%d", i))
		if i%2 == 0 {
			os.Mkdir(out, 0o755)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for k := range errs {
			wg.Go(func() {
				_, errs[k] = Compress(context.Background(), src, CompressOptions{Output: out, NoSync: true, Jobs: 1})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, shardcache.ErrLocked):
				t.Errorf("run %d: %v", i, err)
			}
		}
		if ok == 0 {
			t.Errorf("run %d: neither compress succeeded: %v", i, errs)
			continue
		}
		if res, err := Verify(context.Background(), out, VerifyOptions{}); err != nil || !res.OK() {
			t.Errorf("run %d: the winner's cache: %v, %+v", i, err, res)
		}
	}
}

// TestVerifyUnreadableSource: a source shard that cannot be opened (a
// link loop here; permission denied for other users) is the shard's
// problem, and the tensors stored in the cache are still checked against
// their content keys: a damaged payload is found, as with the shard
// absent. (They went unchecked, and the damage unreported.)
func TestVerifyUnreadableSource(t *testing.T) {
	_, src, cache := compressedFixture(t, 2<<20, 1, 7)
	p := filepath.Join(src, "model.safetensors")
	os.Remove(p)
	if err := os.Symlink(p, p); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	key := fixedKey(t, c)
	restore := cachetest.Flip(t, c, key, -1, 0x10)
	defer restore()
	c.Close()
	v := mustVerify(t, cache)
	var shard, payload bool
	for _, pr := range v.Problems {
		shard = shard || pr.File == p && pr.Tensor == ""
		payload = payload || pr.Tensor != "" && errors.Is(pr.Err, codec.ErrChecksum)
	}
	if !shard || !payload || v.Payloads == 0 || v.Unchecked == 0 {
		t.Errorf("verify with an unreadable shard and a damaged payload: %d payloads checked, %d unchecked, problems %+v", v.Payloads, v.Unchecked, v.Problems)
	}
}

// TestInspectRawEscapes: a BF16 tensor left raw reports as escaping what
// its coverage leaves (it said 0, whatever the coverage).
func TestInspectRawEscapes(t *testing.T) {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, 2<<20, 1, 12)
	if _, err := Compress(context.Background(), src, CompressOptions{Output: out, Jobs: 2, MinSaving: 0.5, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(context.Background(), out, InspectOptions{Tensors: true})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rep.Tensors {
		if r.Stored == shardcache.StoredRaw && r.DType == "BF16" && r.Coverage > 0 {
			n++
			if d := r.EscapeRate - (1 - r.Coverage); d > 1e-12 || d < -1e-12 {
				t.Errorf("%s: coverage %g, escapes %g", r.Name, r.Coverage, r.EscapeRate)
			}
		}
	}
	if n == 0 {
		t.Fatal("no BF16 tensor left raw with a measured coverage")
	}
}

// fixedKey is the key of a fixed-codec payload of c.
func fixedKey(t *testing.T, c *shardcache.Cache) shardcache.Key {
	t.Helper()
	for k, o := range c.Index().Objects {
		if o.Kind == shardcache.KindFixed {
			return k
		}
	}
	t.Fatal("no fixed payload in the cache")
	return ""
}

// TestStatsUnderEveryCodec: a checkpoint's BF16 statistics (each tensor's
// coverage and exponent entropy, the BF16 bound) are the same whichever
// codec compressed it, a BF16 tensor that no codec stores included (its
// exponents all distinct: 256 values of every exponent); tensors of a
// dtype no codec measured report no exponent entropy, rather than zero.
func TestStatsUnderEveryCodec(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck", "model.safetensors")
	var data []byte
	// w: real-looking BF16, stored as a payload by every codec.
	w := make([]byte, 2*65536)
	for i := 0; i < len(w)/2; i++ {
		e := 120 + i%5 + i%3
		binary.LittleEndian.PutUint16(w[2*i:], uint16(e<<7|i*37%128|(i%2)<<15))
	}
	// u: every exponent equally often, left raw by every codec.
	u := make([]byte, 2*65536)
	for i := 0; i < len(u)/2; i++ {
		binary.LittleEndian.PutUint16(u[2*i:], uint16(i*40503))
	}
	ints := make([]byte, 4096)
	data = append(append(append(data, w...), u...), ints...)
	header := fmt.Sprintf(`{"w":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]},"u":{"dtype":"BF16","shape":[%d],"data_offsets":[%d,%d]},"i":{"dtype":"I32","shape":[1024],"data_offsets":[%d,%d]}}`,
		len(w)/2, len(w), len(u)/2, len(w), len(w)+len(u), len(w)+len(u), len(data))
	writeRaw(t, src, header, data)
	type stat struct {
		stored  string
		cov, ex float64
	}
	var bound float64
	var first map[string]stat
	for _, codecName := range []string{CodecFixed, CodecEntropy, CodecAuto, CodecCost} {
		cache := filepath.Join(dir, codecName)
		if _, err := Compress(context.Background(), src, CompressOptions{Output: cache, Codec: codecName, Jobs: 2, MinSaving: DefaultMinSaving, NoSync: true}); err != nil {
			t.Fatal(err)
		}
		ins, err := Inspect(context.Background(), cache, InspectOptions{Tensors: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]stat{}
		for _, r := range ins.Tensors {
			got[r.Name] = stat{r.Stored, r.Coverage, entropyOf(r)}
		}
		if got["u"].stored != shardcache.StoredRaw || got["w"].stored == shardcache.StoredRaw {
			t.Fatalf("%s: stored %+v", codecName, got)
		}
		if got["i"].ex != -1 {
			t.Errorf("%s: an I32 tensor reports exponent entropy %g", codecName, got["i"].ex)
		}
		if got["u"].cov <= 0 || got["u"].ex < 7.9 {
			t.Errorf("%s: the raw BF16 tensor's statistics %+v", codecName, got["u"])
		}
		if first == nil {
			first, bound = got, ins.BF16BoundBits
			continue
		}
		if math.Abs(got["u"].ex-first["u"].ex) > 1e-9 || math.Abs(got["u"].cov-first["u"].cov) > 1e-9 || math.Abs(got["w"].ex-first["w"].ex) > 1e-9 {
			t.Errorf("%s: statistics %+v, the fixed codec's %+v", codecName, got, first)
		}
		if math.Abs(ins.BF16BoundBits-bound) > 1e-9 {
			t.Errorf("%s: BF16 bound %.6f, the fixed codec's %.6f", codecName, ins.BF16BoundBits, bound)
		}
	}
}

// TestGapNotTakenForKeptCopy: in a fresh cache, a tensor left raw whose
// bytes equal a gap's (a hole the run stores) aliases that object, and is
// no copy an earlier --self-contained run kept.
func TestGapNotTakenForKeptCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "ck", "model.safetensors")
	writeRaw(t, src, `{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}`,
		[]byte{1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3})
	res, err := Compress(context.Background(), src, CompressOptions{Output: filepath.Join(dir, "cache"), Jobs: 1, MinSaving: DefaultMinSaving, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Totals.KeptCopies != 0 || res.Totals.KeptCopyBytes != 0 {
		t.Errorf("a fresh cache kept %d copies (%d bytes)", res.Totals.KeptCopies, res.Totals.KeptCopyBytes)
	}
}

// TestVerifyOnly: VerifyOptions.Only checks the sources it names and no
// other (a remote cache's, in a folder holding more); a path the cache
// does not record is an error.
func TestVerifyOnly(t *testing.T) {
	dir := t.TempDir()
	a, b, cache := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "cache")
	gen(t, a, 1<<20, 1, 31)
	gen(t, b, 1<<20, 1, 32)
	ra := compress(t, a, cache, false)
	compress(t, b, cache, false)
	os.RemoveAll(b) // b's raw tensors are only there: a whole verify fails
	if v := mustVerify(t, cache); v.OK() {
		t.Fatal("verify of every source passed without b's source")
	}
	v, err := Verify(context.Background(), cache, VerifyOptions{Jobs: 2, Only: []string{ra.Checkpoint}})
	if err != nil || !v.OK() || v.Tensors != ra.Totals.Tensors {
		t.Fatalf("verify of a alone: %v, %+v", err, v)
	}
	if _, err := Verify(context.Background(), cache, VerifyOptions{Jobs: 2, Only: []string{filepath.Join(dir, "c")}}); err == nil {
		t.Error("verify of a source the cache does not record passed")
	}
}

// TestTensorReportJSON: codebook_coverage and escape_rate appear where
// they were measured (a fixed payload, a BF16 tensor left raw with
// statistics), zeros included, and nowhere else.
func TestTensorReportJSON(t *testing.T) {
	for _, c := range []struct {
		r    TensorReport
		want bool
	}{
		{TensorReport{Stored: shardcache.StoredFixed, Coverage: 1}, true},
		{TensorReport{Stored: shardcache.StoredRaw, DType: "BF16", Coverage: 0.9, EscapeRate: 0.1}, true},
		{TensorReport{Stored: shardcache.StoredEntropy}, false},
		{TensorReport{Stored: shardcache.StoredRaw, DType: "F32"}, false},
	} {
		b, err := json.Marshal(c.r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		_, cov := m["codebook_coverage"]
		_, esc := m["escape_rate"]
		if cov != c.want || esc != c.want || m["stored"] != c.r.Stored {
			t.Errorf("%s %s: %s", c.r.Stored, c.r.DType, b)
		}
	}
}

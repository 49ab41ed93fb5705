package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/atomicfile"
	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/fsizelimit"
	"github.com/splitzip/splitzip/shardcache"
)

// deadPID returns the process id of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestDecompressRemovesStaleTemps: decompress removes from its output
// folder the temporary files of a killed run (a process that is gone),
// and leaves those of live writers (this process, pid 1) and other files.
func TestDecompressRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 1<<20, 2, 3)
	compress(t, src, cache, false)
	os.Mkdir(out, 0o755)
	dead := fmt.Sprintf("%s%d-abc-model-00001-of-00002.safetensors", atomicfile.TempPrefix, deadPID(t))
	live := []string{
		fmt.Sprintf("%s%d-abc-model-00001-of-00002.safetensors", atomicfile.TempPrefix, os.Getpid()),
		atomicfile.TempPrefix + "1-abc-model-00002-of-00002.safetensors",
		"notes.txt",
	}
	for _, n := range append([]string{dead}, live...) {
		os.WriteFile(filepath.Join(out, n), []byte("x"), 0o644)
	}
	res, err := Decompress(context.Background(), cache, DecompressOptions{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, dead)); err == nil || res.StaleTemps != 1 {
		t.Errorf("a killed run's temporary file is still there (%d removed)", res.StaleTemps)
	}
	for _, n := range live {
		if _, err := os.Stat(filepath.Join(out, n)); err != nil {
			t.Errorf("decompress removed %s: %v", n, err)
		}
	}
	sameFiles(t, src, out)

	// Into a new folder: a killed run left a half-built folder beside it.
	half := filepath.Join(dir, fmt.Sprintf("%s%d-abc-out2", atomicfile.TempPrefix, deadPID(t)))
	os.Mkdir(half, 0o755)
	os.WriteFile(filepath.Join(half, "model-00001-of-00002.safetensors"), []byte("x"), 0o644)
	res, err = Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "out2")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half); err == nil || res.StaleTemps != 1 {
		t.Errorf("a killed run's half-built folder is still there (%d removed)", res.StaleTemps)
	}
	sameFiles(t, src, filepath.Join(dir, "out2"))
	for _, f := range res.Files {
		if filepath.Dir(f) != filepath.Join(dir, "out2") {
			t.Errorf("restored file reported as %s", f)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 4 { // ck, cache, out, out2
		t.Errorf("decompress left %d entries beside its output, want 4", len(ents))
	}
}

// TestDecompressFailureLeavesNoFolder: a decompress that fails removes the
// folders it made and leaves folders that were there as they were.
func TestDecompressFailureLeavesNoFolder(t *testing.T) {
	dir, _, cache := compressedFixture(t, 1<<20, 2, 4)
	if err := os.RemoveAll(filepath.Join(cache, "objects")); err != nil { // every read fails
		t.Fatal(err)
	}
	existing := filepath.Join(dir, "existing")
	os.Mkdir(existing, 0o755)
	for _, c := range []struct{ output, gone, kept string }{
		{filepath.Join(dir, "new", "a", "b"), filepath.Join(dir, "new"), dir},
		{existing, "", existing},
		{filepath.Join(existing, "sub"), filepath.Join(existing, "sub"), existing},
	} {
		if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: c.output}); err == nil {
			t.Fatalf("decompress into %s of a cache without objects succeeded", c.output)
		}
		if c.gone != "" {
			if _, err := os.Stat(c.gone); err == nil {
				t.Errorf("a failed decompress into %s left %s", c.output, c.gone)
			}
		}
		if ents, err := os.ReadDir(c.kept); err != nil || c.kept == existing && len(ents) != 0 {
			t.Errorf("a failed decompress into %s changed %s: %v, %d entries", c.output, c.kept, err, len(ents))
		}
	}
}

// reachesTotal fails the test unless p saw a phase and every phase's Adds
// summed to its total.
func reachesTotal(t *testing.T, p *countingProgress, what string) {
	t.Helper()
	if len(p.phases) == 0 {
		t.Errorf("%s: no progress phase", what)
	}
	for _, ph := range p.phases {
		if ph.added != ph.total {
			t.Errorf("%s: phase %q ends at %d of %d bytes (%.1f%%)", what, ph.label, ph.added, ph.total, 100*float64(ph.added)/float64(max(ph.total, 1)))
		}
	}
}

// TestProgressReachesTotal: decompress's and verify's progress bars end
// at their totals, also when verify finds a source missing; verify's
// hashing of the packs whole is a phase of its own.
func TestProgressReachesTotal(t *testing.T) {
	dir, src, cache := compressedFixture(t, 2<<20, 2, 5)
	p := &countingProgress{}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(dir, "out"), Progress: p}); err != nil {
		t.Fatal(err)
	}
	reachesTotal(t, p, "decompress")
	p = &countingProgress{}
	if _, err := Verify(context.Background(), cache, VerifyOptions{Jobs: 2, Progress: p}); err != nil {
		t.Fatal(err)
	}
	reachesTotal(t, p, "verify")
	if !slices.ContainsFunc(p.phases, func(ph progressPhase) bool { return ph.label == "verify packs" && ph.total > 0 }) {
		t.Errorf("verify of a cache with packs: phases %+v, want one hashing them", p.phases)
	}
	os.Remove(filepath.Join(src, "model-00001-of-00002.safetensors"))
	p = &countingProgress{}
	res, err := Verify(context.Background(), cache, VerifyOptions{Jobs: 2, Progress: p})
	if err != nil || res.OK() {
		t.Fatalf("verify of a cache whose source shard is gone: %v, %+v", err, res)
	}
	reachesTotal(t, p, "verify with a shard missing")
}

// TestDecompressFullDisk: a restored file that cannot be written (a file
// size limit stands in for a full disk) is reported as that file's,
// under its final name, not as a tensor's or a temporary file's, and the
// failed run leaves nothing behind.
func TestDecompressFullDisk(t *testing.T) {
	dir := t.TempDir()
	src, cache, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	gen(t, src, 1<<20, 2, 6)
	compress(t, src, cache, false)
	var err error
	if !fsizelimit.Run(t, 64<<10, func() {
		_, err = Decompress(context.Background(), cache, DecompressOptions{Output: out})
	}) {
		return // the child process ran it and checked what follows
	}
	var pe *fs.PathError
	if !errors.Is(err, syscall.EFBIG) || !errors.As(err, &pe) || filepath.Dir(pe.Path) != out || strings.Contains(err.Error(), atomicfile.TempPrefix) || strings.Contains(err.Error(), "tensor \"") {
		t.Errorf("decompress past the file size limit: %v; want a write error naming a file of %s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("a failed decompress left %d entries beside its output folder, want ck and cache", len(ents))
	}
}

// TestDecompressNamesDamagedObject: a decompress that meets a damaged or
// missing cache object names that object's file and the tensor (what the
// JSON error's file and tensor come from), says which output file it was
// restoring, and is an integrity error.
// largestPayload compresses a generated one-shard checkpoint of 4 MiB
// (seed) into dir and returns the source, the cache, its shard, and its
// largest payload's tensor and location (a file of its own).
func largestPayload(t *testing.T, dir string, seed uint64) (src, cache string, sh *shardcache.Shard, tn *shardcache.Tensor, loc shardcache.Location) {
	t.Helper()
	src, cache = filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	gen(t, src, 4<<20, 1, seed)
	compress(t, src, cache, false)
	ca, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	sh = &ca.Index().Sources[0].Shards[0]
	for i := range sh.Tensors {
		if x := &sh.Tensors[i]; x.Payload() && (tn == nil || x.Size > tn.Size) {
			tn = x
		}
	}
	loc, _, err = ca.Locate(tn.Key)
	if err != nil || loc.Packed {
		t.Fatalf("the largest payload is not a file of its own: %+v, %v", loc, err)
	}
	return src, cache, sh, tn, loc
}

func TestDecompressNamesDamagedObject(t *testing.T) {
	dir := t.TempDir()
	_, cache, sh, tn, loc := largestPayload(t, dir, 5)
	b, err := os.ReadFile(loc.Path)
	if err != nil {
		t.Fatal(err)
	}
	damaged := slices.Clone(b)
	damaged[len(b)/2] ^= 0x40
	for _, c := range []struct {
		name string
		harm func() error
	}{
		{"a flipped bit", func() error { return os.WriteFile(loc.Path, damaged, 0o644) }},
		{"a missing file", func() error { return os.Remove(loc.Path) }},
	} {
		if err := c.harm(); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out")
		_, err := Decompress(context.Background(), cache, DecompressOptions{Output: out})
		te, ok := errors.AsType[*TensorError](err)
		switch {
		case !ok:
			t.Errorf("%s: %v, want a *TensorError", c.name, err)
		case te.File != loc.Path || te.Tensor != tn.Name:
			t.Errorf("%s: the error names %s, tensor %q; want %s, tensor %q", c.name, te.File, te.Tensor, loc.Path, tn.Name)
		case !errors.Is(err, shardcache.ErrObjectCorrupt) && !errors.Is(err, codec.ErrChecksum):
			t.Errorf("%s: %v is not an integrity error", c.name, err)
		case !strings.Contains(err.Error(), filepath.Join(out, sh.Name)) || strings.Count(err.Error(), loc.Path) != 1:
			t.Errorf("%s: %q should name the file restored and the object once", c.name, err)
		}
		if err := os.WriteFile(loc.Path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVerifyNamesDamagedObject: verify's problem for a damaged payload
// names the cache object it lies in, beside the source file and tensor;
// one for a source that shrank names none (the cache is not at fault).
func TestVerifyNamesDamagedObject(t *testing.T) {
	src, cache, sh, tn, loc := largestPayload(t, t.TempDir(), 6)
	b, _ := os.ReadFile(loc.Path)
	b[len(b)/2] ^= 0x40
	os.WriteFile(loc.Path, b, 0o644)
	res, err := Verify(context.Background(), cache, VerifyOptions{})
	if err != nil || len(res.Problems) != 1 {
		t.Fatalf("verify: %v, %+v", err, res)
	}
	if p := res.Problems[0]; p.Object != loc.Name() || p.Tensor != tn.Name || p.File != filepath.Join(src, sh.Name) {
		t.Errorf("problem %+v: want object %s, tensor %s", p, loc.Name(), tn.Name)
	}
	b[len(b)/2] ^= 0x40
	os.WriteFile(loc.Path, b, 0o644)
	shard := filepath.Join(src, sh.Name)
	st, _ := os.Stat(shard)
	if err := os.Truncate(shard, st.Size()-100); err != nil {
		t.Fatal(err)
	}
	res, err = Verify(context.Background(), cache, VerifyOptions{})
	if err != nil || len(res.Problems) == 0 {
		t.Fatalf("verify of a shrunk source: %v, %+v", err, res)
	}
	for _, p := range res.Problems {
		if p.Object != "" || !errors.Is(p.Err, shardcache.ErrSourceChanged) {
			t.Errorf("a shrunk source's problem %+v: want a changed source, no object", p)
		}
	}
}

// TestVerifySourceGoneChecksPayloads: with a source shard gone from a
// cache that is not self-contained, verify still checks the shard's
// payloads against their content keys: a damaged one is the cache's
// problem (named by its object), beside the missing shard's.
func TestVerifySourceGoneChecksPayloads(t *testing.T) {
	src, cache, sh, tn, loc := largestPayload(t, t.TempDir(), 7)
	if err := os.Remove(filepath.Join(src, sh.Name)); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(context.Background(), cache, VerifyOptions{})
	if err != nil || len(res.Problems) != 1 || res.Payloads == 0 || !errors.Is(res.Problems[0].Err, fs.ErrNotExist) {
		t.Fatalf("verify with the shard gone: %v, %+v", err, res)
	}
	b, _ := os.ReadFile(loc.Path)
	b[len(b)/2] ^= 0x40
	os.WriteFile(loc.Path, b, 0o644)
	res, err = Verify(context.Background(), cache, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for _, p := range res.Problems {
		damaged = damaged || p.Tensor == tn.Name && p.Object == loc.Name()
	}
	if len(res.Problems) != 2 || !damaged {
		t.Errorf("verify with the shard gone and %s damaged: %+v", tn.Name, res.Problems)
	}
}

// cancelAt cancels a run once its progress passes at bytes.
type cancelAt struct {
	nopProgress
	at, n  uint64
	cancel context.CancelFunc
}

func (c *cancelAt) Add(n uint64) {
	if c.n += n; c.n >= c.at {
		c.cancel()
	}
}

// TestDecompressStopped: a decompress stopped at any point before its
// files are in place (here: once the last shard's header is written, and
// once every byte is) returns context.Canceled and leaves no output
// folder and no temporary file. It ran on to exit 0 when stopped late.
func TestDecompressStopped(t *testing.T) {
	dir, _, cache := compressedFixture(t, 2<<20, 2, 3)
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	shards := c.Index().Sources[0].Shards
	for _, sh := range shards {
		total += sh.Size
	}
	c.Close()
	// Progress counts a region once it is written: the last shard's
	// header, then every byte.
	last := shards[len(shards)-1]
	for _, at := range []uint64{total - last.Size + last.Header.Size, total} {
		out := filepath.Join(dir, fmt.Sprint("out", at))
		ctx, cancel := context.WithCancel(context.Background())
		_, err := Decompress(ctx, cache, DecompressOptions{Output: out, Progress: &cancelAt{at: at, cancel: cancel}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("stopped at byte %d of %d: %v, want context.Canceled", at, total, err)
		}
		if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stopped at byte %d: the output folder is there (%v)", at, err)
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), atomicfile.TempPrefix) || strings.HasPrefix(e.Name(), ".") {
				t.Errorf("stopped at byte %d: %s left behind", at, e.Name())
			}
		}
	}
}

// TestDecompressIntoSourcePlace: decompress refuses an output in the
// source checkpoint's folder while the source is there, and restores a
// self-contained cache into that folder once the source is gone (the
// place a user restores it to; trial 70).
func TestDecompressIntoSourcePlace(t *testing.T) {
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	keep := filepath.Join(dir, "keep")
	gen(t, src, 1<<20, 2, 5)
	gen(t, keep, 1<<20, 2, 5) // the same bytes
	compress(t, src, cache, true)
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: filepath.Join(src, "sub")}); !errors.Is(err, ErrOutputInSource) {
		t.Fatalf("decompress into the source while it is there: %v", err)
	}
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: src}); err != nil {
		t.Fatalf("decompress into the source's place, the source gone: %v", err)
	}
	sameFiles(t, keep, src)
	// With the times compress recorded: the source again, as the cache
	// knows it.
	if v := mustVerify(t, cache); !v.OK() {
		t.Fatalf("verify with the restored source: %+v", v.Problems)
	}
}

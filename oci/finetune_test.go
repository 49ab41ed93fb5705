package oci

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// TestDedupeFineTune: a fine-tune that changes every tenth tensor of a
// base (by name; one value each) pushes, and pulls into a cache holding
// the base, at most 12% of the base's bytes, through the in-process
// registry and through a real S3 server. Packs are blobs, so a changed
// small tensor moves its whole pack again: the log line says by how much
// that multiplies the changed bytes.
func TestDedupeFineTune(t *testing.T) {
	dir := t.TempDir()
	base, tune, changed, total := fineTune(t, dir)
	_, host := serve(t)
	t.Run("registry", func(t *testing.T) {
		dedupe(t, base, tune, changed, total, host+"/m/base:1", host+"/m/tune:1", opts())
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		srv.Bucket(t, "models")
		dedupe(t, base, tune, changed, total, "s3://models/m:base", "s3://models/m:tune", s3Options(srv))
	})
}

// fineTune writes a base checkpoint's cache and its fine-tune's under
// dir, and returns them with the fine-tune's changed and total raw bytes.
func fineTune(t *testing.T, dir string) (base, tune string, changed, total uint64) {
	t.Helper()
	cfg := synth.Config{Mix: 300, Shards: 2, Seed: 12}
	base = compress(t, filepath.Join(dir, "a"), cfg)
	src := filepath.Join(dir, "b", "ck")
	if _, err := synth.Write(context.Background(), src, cfg); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(src)
	n := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		path := filepath.Join(src, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Read(bytes.NewReader(b), int64(len(b)), path)
		if err != nil {
			t.Fatal(err)
		}
		for _, tn := range f.Tensors {
			total += tn.Size()
			if n++; n%10 == 0 && tn.Size() > 0 {
				b[tn.Begin+tn.Size()/2] ^= 0x01 // a mantissa bit of one value
				changed += tn.Size()
			}
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tune = filepath.Join(dir, "b", "cache")
	compressTo(t, src, tune)
	return base, tune, changed, total
}

// dedupe pushes base and tune to baseRef and tuneRef, pulls both into one
// cache and holds the tune's bytes moved to 12% of the base's.
func dedupe(t *testing.T, base, tune string, changed, total uint64, baseRef, tuneRef string, o Options) {
	t.Helper()
	dir := t.TempDir()
	bp, err := Push(context.Background(), base, baseRef, o)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := Push(context.Background(), tune, tuneRef, o)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pulled")
	if _, err := Pull(context.Background(), baseRef, out, o); err != nil {
		t.Fatal(err)
	}
	pr, err := Pull(context.Background(), tuneRef, out, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("changed %d of %d raw bytes (%.1f%%); the tune pushed %d of the base's %d bytes (%.1f%%), %d of %d blobs; pulled %d bytes (%.1f%%)",
		changed, total, 100*float64(changed)/float64(total), tp.UploadedBytes, bp.Bytes, 100*float64(tp.UploadedBytes)/float64(bp.Bytes),
		tp.Uploaded, tp.Blobs, pr.FetchedBytes, 100*float64(pr.FetchedBytes)/float64(bp.Bytes))
	for what, got := range map[string]uint64{"pushed": tp.UploadedBytes, "pulled": pr.FetchedBytes} {
		if float64(got) > 0.12*float64(bp.Bytes) {
			t.Errorf("the tune %s %d bytes, %.1f%% of the base's %d (target 12%%)", what, got, 100*float64(got)/float64(bp.Bytes), bp.Bytes)
		}
	}
}

// pushedFineTune makes a base's cache and its fine-tune's under dir and
// pushes them to an in-process registry at host as m/base:1 and
// m/tune:1.
func pushedFineTune(t *testing.T, dir string) (base, tune, host string) {
	t.Helper()
	base, tune, _, _ = fineTune(t, dir)
	_, host = serve(t)
	for _, c := range []struct{ cache, ref string }{{base, host + "/m/base:1"}, {tune, host + "/m/tune:1"}} {
		if _, err := Push(context.Background(), c.cache, c.ref, opts()); err != nil {
			t.Fatal(err)
		}
	}
	return base, tune, host
}

// TestPullAfterRepack: pulling a fine-tune into a cache that holds its
// base adopts packs some of whose members the base's packs hold; gc then
// rewrites those packs, and pulling the fine-tune again fetches nothing
// (a pack whose members the cache holds is not fetched), and a second gc
// finds nothing to rewrite.
func TestPullAfterRepack(t *testing.T) {
	dir := t.TempDir()
	_, tune, host := pushedFineTune(t, dir)
	out := filepath.Join(dir, "pulled")
	for _, ref := range []string{host + "/m/base:1", host + "/m/tune:1"} {
		if _, err := Pull(context.Background(), ref, out, opts()); err != nil {
			t.Fatal(err)
		}
	}
	gc := func() shardcache.GCResult { return cachetest.GC(t, out) }
	first := gc()
	if first.Repacked == 0 {
		t.Fatal("gc rewrote no pack after the fine-tune's pull: the case this test is for did not arise")
	}
	res, err := Pull(context.Background(), host+"/m/tune:1", out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 0 {
		t.Errorf("pulling the fine-tune again after gc (which rewrote %d packs) fetched %d blobs, %d bytes", first.Repacked, res.Fetched, res.FetchedBytes)
	}
	if again := gc(); again.Repacked != 0 || again.Objects != 0 {
		t.Errorf("a second gc: %+v", again)
	}
	// Every object of the fine-tune's tensors, byte for byte, wherever
	// the pulled cache keeps it now.
	want, err := shardcache.Open(tune)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	for _, sh := range want.Index().Sources[0].Shards {
		for _, tn := range sh.Tensors {
			if !tn.InCache() {
				continue
			}
			a, _, err := want.ReadObject(tn.Key)
			if err != nil {
				t.Fatal(err)
			}
			if b, _, err := got.ReadObject(tn.Key); err != nil || !bytes.Equal(a, b) {
				t.Fatalf("tensor %s in the pulled cache: %v", tn.Name, err)
			}
		}
	}
}

// TestPullMendsSharedMember: a tensor the cache holds damaged, in a pack
// of its own, that a pulled artifact brings in another pack: the pull
// fetches that pack and records the tensor there, so the cache reads it
// whole.
func TestPullMendsSharedMember(t *testing.T) {
	dir := t.TempDir()
	_, tune, host := pushedFineTune(t, dir)
	out := filepath.Join(dir, "pulled")
	if _, err := Pull(context.Background(), host+"/m/base:1", out, opts()); err != nil {
		t.Fatal(err)
	}
	// A packed tensor of both that lies in different packs.
	tc, err := shardcache.Open(tune)
	if err != nil {
		t.Fatal(err)
	}
	tc.Close()
	c, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var shared shardcache.Key
	for k, o := range tc.Index().Objects {
		if mine, ok := c.Index().Objects[k]; ok && o.Pack != "" && mine.Pack != "" && mine.Pack != o.Pack && o.Kind == shardcache.KindRaw {
			shared = k
			break
		}
	}
	if shared == "" {
		t.Fatal("no raw tensor of both lies in different packs: the case this test is for did not arise")
	}
	cachetest.Flip(t, c, shared, 0, 0x01)
	if _, err := Pull(context.Background(), host+"/m/tune:1", out, opts()); err != nil {
		t.Fatal(err)
	}
	after, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, _, err := after.ReadObject(shared); err != nil {
		t.Fatalf("the shared tensor after the pull: %v", err)
	}
}

package shardcache_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// singleFiles writes n single-file checkpoints of different weights into
// one folder, named a.safetensors, b.safetensors, ..., and returns the
// folder (symlinks resolved) and the files.
func singleFiles(t *testing.T, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	folder := filepath.Join(dir, "ck")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	folder, _ = filepath.EvalSymlinks(folder)
	var files []string
	for i := range n {
		gen := filepath.Join(dir, "gen", string(rune('a'+i)))
		if _, err := synth.Write(context.Background(), gen, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: uint64(31 + i)}); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(folder, string(rune('a'+i))+".safetensors")
		if err := os.Rename(filepath.Join(gen, "model.safetensors"), f); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return folder, files
}

func compressInto(t *testing.T, src, cache string) {
	t.Helper()
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 2, MinSaving: pipeline.DefaultMinSaving, NoSync: true}); err != nil {
		t.Fatalf("compress %s: %v", src, err)
	}
}

// TestSingleFilesShareAFolder: two single-file checkpoints of one folder
// compressed into one cache are two sources; the second does not replace
// the first, gc keeps both's objects, each verifies, and each can be
// chosen by its file (as given, relative to the working directory) while
// the folder alone is ambiguous. Compressing one of them again replaces
// its own record only.
func TestSingleFilesShareAFolder(t *testing.T) {
	folder, files := singleFiles(t, 2)
	cache := filepath.Join(t.TempDir(), "cache")
	compressInto(t, files[0], cache)
	compressInto(t, files[1], cache)
	compressInto(t, files[0], cache) // again: replaces its own record

	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	srcs := c.Index().Sources
	if len(srcs) != 2 || srcs[0].Path() != files[0] || srcs[1].Path() != files[1] {
		var got []string
		for i := range srcs {
			got = append(got, srcs[i].Path())
		}
		t.Fatalf("sources %v, want %v", got, files)
	}

	w, err := shardcache.Create(cache)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.GC(context.Background(), shardcache.GCOptions{})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Objects != 0 || res.Bytes != 0 {
		t.Errorf("gc removed %d objects (%d bytes) that a checkpoint uses", res.Objects, res.Bytes)
	}
	for _, f := range files {
		v, err := pipeline.Verify(context.Background(), cache, pipeline.VerifyOptions{Source: f})
		if err != nil || !v.OK() || v.Payloads == 0 {
			t.Errorf("verify %s after gc: %v %+v", f, err, v)
		}
	}

	c, err = shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	// Paths as the shell gives them: relative to the working directory.
	t.Chdir(folder)
	for i, sel := range []string{"a.safetensors", "./b.safetensors"} {
		at, err := c.Index().SourceFor(sel)
		if err != nil || at != i {
			t.Errorf("SourceFor(%q) = %d, %v; want %d", sel, at, err, i)
		}
		s, err := c.PickSource(sel)
		if err != nil || s.Path() != files[i] {
			t.Errorf("PickSource(%q): %v", sel, err)
		}
	}
	for _, sel := range []string{"", ".", folder} {
		_, err := c.PickSource(sel)
		if !errors.Is(err, shardcache.ErrAmbiguousSource) || !strings.Contains(err.Error(), files[0]) || !strings.Contains(err.Error(), files[1]) {
			t.Errorf("PickSource(%q) of two sources in one folder: %v", sel, err)
		}
	}
	if _, err := c.Index().SourceFor("c.safetensors"); !errors.Is(err, shardcache.ErrNotFound) {
		t.Errorf("SourceFor of a file never compressed: %v", err)
	}
}

// TestAmbiguousSourceNamesNoFlag: the sentinel's text names no CLI flag
// (Python users see it too); front ends add how to choose.
func TestAmbiguousSourceNamesNoFlag(t *testing.T) {
	if s := shardcache.ErrAmbiguousSource.Error(); strings.Contains(s, "--") || !strings.Contains(s, "several checkpoints") {
		t.Errorf("ErrAmbiguousSource = %q", s)
	}
}

// TestMovedCopyLacksShard: a folder given as a moved checkpoint that
// holds only some of its shards (or one of another size) is refused,
// naming the source and what the folder lacks.
func TestMovedCopyLacksShard(t *testing.T) {
	dir := t.TempDir()
	ck, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), ck, synth.Config{Bytes: 1 << 20, Shards: 3, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	compressInto(t, ck, cache)
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(ck, moved); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, err := c.PickSource(moved); err != nil || s.Root != moved {
		t.Fatalf("the whole moved copy: %v", err)
	}
	shards := c.Index().Sources[0].Shards
	os.Remove(filepath.Join(moved, shards[1].Name))
	os.Truncate(filepath.Join(moved, shards[2].Name), 8)
	_, err = c.PickSource(moved)
	for _, want := range []string{"holds 1 of the 3 shards of " + c.Index().Sources[0].Path(), shards[1].Name + " is missing", shards[2].Name + " has 8 bytes"} {
		if !errors.Is(err, shardcache.ErrNotFound) || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a moved copy lacking shards: %v; want it to say %q", err, want)
		}
	}
}

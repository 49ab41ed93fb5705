package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/safetensors"
)

func TestOpenForms(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(context.Background(), dir, synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, safetensors.IndexFileName)} {
		ck, err := Open(p)
		if err != nil || len(ck.Shards) != 2 || ck.Index == nil || ck.Unindexed != nil {
			t.Fatalf("open %s: %v, %v", p, err, ck)
		}
	}
	// A file beside the index that it does not name is no shard, and is
	// named (the folder was given, not the index).
	extra := filepath.Join(dir, "consolidated.safetensors")
	b, _ := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	os.WriteFile(extra, b, 0o644)
	if ck, err := Open(dir); err != nil || len(ck.Shards) != 2 || len(ck.Unindexed) != 1 || ck.Unindexed[0] != "consolidated.safetensors" {
		t.Errorf("open a folder with an extra file: %v, %+v", err, ck)
	}
	os.Remove(extra)
	ck, err := Open(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	if err != nil || len(ck.Shards) != 1 || ck.Index != nil {
		t.Fatalf("open one shard: %v", err)
	}
	// An index naming a tensor its shard lacks.
	ix := filepath.Join(dir, safetensors.IndexFileName)
	os.WriteFile(ix, []byte(`{"weight_map":{"ghost":"model-00001-of-00002.safetensors"}}`), 0o644)
	if _, err := Open(dir); !errors.Is(err, safetensors.ErrFormat) {
		t.Errorf("index with a missing tensor: %v", err)
	}
	os.Remove(ix)
	os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
	if ck, err := Open(dir); err != nil || len(ck.Shards) != 1 {
		t.Errorf("directory without index: %v", err)
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrNoShards) {
		t.Errorf("empty directory: %v", err)
	}
}

func TestContains(t *testing.T) {
	root := t.TempDir()
	for path, want := range map[string]bool{
		root:                               true,
		filepath.Join(root, "a", "b"):      true,
		filepath.Dir(root):                 false,
		filepath.Join(root+"x", "cache"):   false,
		filepath.Join(root, "..", "other"): false,
	} {
		if got := Contains(root, path); got != want {
			t.Errorf("Contains(%s, %s) = %v", root, path, got)
		}
	}
}

// TestHubSnapshot opens a checkpoint laid out as a Hugging Face hub cache
// does: the snapshot's index and shards are symlinks into blobs/ named by
// hash, and the names the user sees are kept.
func TestHubSnapshot(t *testing.T) {
	src := t.TempDir()
	if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	hub := t.TempDir()
	blobs, snap := filepath.Join(hub, "blobs"), filepath.Join(hub, "snapshots", "abc123")
	os.MkdirAll(blobs, 0o755)
	os.MkdirAll(snap, 0o755)
	ents, _ := os.ReadDir(src)
	for i, e := range ents {
		blob := filepath.Join(blobs, fmt.Sprintf("%040x", i+1))
		if err := os.Rename(filepath.Join(src, e.Name()), blob); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{snap, filepath.Join(snap, safetensors.IndexFileName)} {
		ck, err := Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		if ck.Root != snap || ck.Index == nil || ck.IndexName != safetensors.IndexFileName || len(ck.Shards) != 2 || ck.Shards[0].Name != "model-00001-of-00002.safetensors" {
			t.Fatalf("open %s: root %s, index %s, shards %d", p, ck.Root, ck.IndexName, len(ck.Shards))
		}
	}
	one := filepath.Join(snap, "model-00002-of-00002.safetensors")
	ck, err := Open(one)
	if err != nil || ck.Root != snap || len(ck.Shards) != 1 || ck.Shards[0].Name != filepath.Base(one) || ck.Shards[0].Size == 0 {
		t.Fatalf("open one linked shard: %v %+v", err, ck)
	}
}

// folder opens a test checkpoint by its folder.
func folder(dir, _ string) string { return dir }

// TestOpenMissingShard: a shard that is a link to nothing, or that the
// index names and the folder lacks, is an error naming it that matches
// fs.ErrNotExist, never a checkpoint without it.
func TestOpenMissingShard(t *testing.T) {
	const second = "model-00002-of-00002.safetensors"
	for _, tc := range []struct {
		name  string
		index bool   // keep the index
		link  bool   // replace the second shard by a link to nothing (else remove it)
		want  string // in the message besides the path
		open  func(dir, shard string) string
	}{
		{"broken link, no index", false, true, "is a link to ", folder},
		{"broken link named in the index", true, true, "named in " + safetensors.IndexFileName + " is a link to ", folder},
		{"missing, named in the index", true, false, "named in " + safetensors.IndexFileName + " does not exist", folder},
		{"broken link opened as a file", false, true, "is a link to ", func(_, shard string) string { return shard }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := synth.Write(context.Background(), dir, synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 3}); err != nil {
				t.Fatal(err)
			}
			if !tc.index {
				os.Remove(filepath.Join(dir, safetensors.IndexFileName))
			}
			p := filepath.Join(dir, second)
			os.Remove(p)
			if tc.link {
				if err := os.Symlink(filepath.Join(dir, "blobs", "gone"), p); err != nil {
					t.Fatal(err)
				}
			}
			ck, err := Open(tc.open(dir, p))
			if err == nil {
				t.Fatalf("opened with %d shards", len(ck.Shards))
			}
			if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v; want an error naming %s and saying %q", err, p, tc.want)
			}
		})
	}
}

// TestFolderLayouts: a folder's index of another name (diffusers') is its
// checkpoint; several indexes, none conventional, are refused, naming
// them; what a folder holds beside its checkpoint (another index,
// subfolders with shards) is named in Left; tensor names in several
// shards, and tensors the index does not name, are listed.
func TestFolderLayouts(t *testing.T) {
	dir := t.TempDir()
	if _, err := synth.Write(context.Background(), dir, synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	ix, err := os.ReadFile(filepath.Join(dir, safetensors.IndexFileName))
	must(t, err)
	must(t, os.Remove(filepath.Join(dir, safetensors.IndexFileName)))
	diff := filepath.Join(dir, "diffusion_pytorch_model.safetensors.index.json")
	must(t, os.WriteFile(diff, ix, 0o644))
	ck, err := Open(dir)
	if err != nil || ck.IndexName != filepath.Base(diff) || len(ck.Shards) != 2 || len(ck.LeftOut) != 0 || len(ck.Duplicates) != 0 || len(ck.Unnamed) != 0 {
		t.Fatalf("a folder with diffusers' index: %v, %+v", err, ck)
	}
	variant := filepath.Join(dir, "diffusion_pytorch_model.fp16.safetensors.index.json")
	must(t, os.WriteFile(variant, ix, 0o644))
	if _, err := Open(dir); !errors.Is(err, ErrSeveralIndexes) || !strings.Contains(err.Error(), filepath.Base(variant)) || !strings.Contains(err.Error(), filepath.Base(diff)) {
		t.Errorf("a folder with two indexes: %v", err)
	}
	if ck, err := Open(variant); err != nil || ck.IndexName != filepath.Base(variant) {
		t.Errorf("one of them by its path: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, safetensors.IndexFileName), ix, 0o644))
	sub := filepath.Join(dir, "unet", "deeper")
	must(t, os.MkdirAll(sub, 0o755))
	b, err := os.ReadFile(filepath.Join(dir, "model-00001-of-00002.safetensors"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(sub, "x.safetensors"), b, 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, ".cache", "y"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, ".cache", "y", "z.safetensors"), b, 0o644))
	ck, err = Open(dir)
	if err != nil || ck.IndexName != safetensors.IndexFileName || len(ck.LeftOut) != 3 || !strings.HasPrefix(ck.LeftOut[2], "unet/ (1 .safetensors file)") {
		t.Errorf("a folder with the conventional index, two others and a subfolder: %v, %q", err, ck.LeftOut)
	}
	// No shard of its own but a subfolder with some: refused, naming it.
	only := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(only, "text_encoder"), 0o755))
	must(t, os.WriteFile(filepath.Join(only, "text_encoder", "model.safetensors"), b, 0o644))
	if _, err := Open(only); !errors.Is(err, ErrNoShards) || !strings.Contains(err.Error(), "text_encoder/") {
		t.Errorf("a folder whose shards are in a subfolder: %v", err)
	}
	// The same tensors in two files of one folder (no index).
	two := t.TempDir()
	must(t, os.WriteFile(filepath.Join(two, "a.safetensors"), b, 0o644))
	must(t, os.WriteFile(filepath.Join(two, "b.safetensors"), b, 0o644))
	ck, err = Open(two)
	if err != nil || len(ck.Duplicates) == 0 || len(ck.Duplicates) != len(ck.Shards[0].Header.Tensors) || fmt.Sprint(ck.Duplicates[0].Shards) != "[a.safetensors b.safetensors]" {
		t.Errorf("two files of the same tensors: %v, %+v", err, ck.Duplicates)
	}
	// An index naming only some of a shard's tensors.
	one := t.TempDir()
	must(t, os.WriteFile(filepath.Join(one, "a.safetensors"), b, 0o644))
	name := ck.Shards[0].Header.Tensors[0].Name
	must(t, os.WriteFile(filepath.Join(one, safetensors.IndexFileName), fmt.Appendf(nil, `{"weight_map":{%q:"a.safetensors"}}`, name), 0o644))
	if ck, err := Open(one); err != nil || len(ck.Unnamed) != len(ck.Shards[0].Header.Tensors)-1 {
		t.Errorf("an index naming one of the shard's tensors: %v, %d unnamed", err, len(ck.Unnamed))
	}
}

// must fails the test at a set-up step's error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

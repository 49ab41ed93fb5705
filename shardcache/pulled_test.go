package shardcache

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPulledRootName: a checkpoint's name under checkpoints/ is its
// folder's, once, however many pulls and pushes it went through.
func TestPulledRootName(t *testing.T) {
	a := PulledRoot("/c1", "/data/llama")
	b := PulledRoot("/c2", a)
	if filepath.Dir(a) != "/c1/checkpoints" || !strings.HasPrefix(filepath.Base(a), "llama-") || len(filepath.Base(a)) != len("llama-")+8 {
		t.Errorf("PulledRoot of /data/llama: %s", a)
	}
	if filepath.Dir(b) != "/c2/checkpoints" || !strings.HasPrefix(filepath.Base(b), "llama-") || len(filepath.Base(b)) != len("llama-")+8 || b == PulledRoot("/c2", "/data/llama") {
		t.Errorf("PulledRoot of %s: %s", a, b)
	}
	if r := PulledRoot("/c", "/"); filepath.Base(filepath.Dir(r)) != "checkpoints" || !strings.HasPrefix(filepath.Base(r), "checkpoint-") {
		t.Errorf("PulledRoot of /: %s", r)
	}
}

// TestPulledAt: the folder a pulled checkpoint was compressed from, or its
// index file there, finds its record (in whatever folder the cache is
// now); other folders, and a name two records share, find none.
func TestPulledAt(t *testing.T) {
	srcs := []Source{
		{Root: "/data/own", Index: &File{Name: "model.safetensors.index.json"}},
		{Root: PulledRoot("/moved/cache", "/data/llama"), Index: &File{Name: "model.safetensors.index.json"}},
		{Root: PulledRoot("/moved/cache", "/data/one"), Shards: []Shard{{Name: "a.safetensors"}}},
	}
	for sel, want := range map[string]int{
		"/data/llama":  1,
		"/data/llama/": 1,
		"/data/llama/model.safetensors.index.json": 1,
		"/data/one/a.safetensors":                  2,
		"/data/one":                                2,
		"/data/own":                                -1, // a root as recorded: SourceFor's
		"/data/other":                              -1,
		"/data/llama/other.json":                   -1,
	} {
		if got := pulledAt(srcs, sel); got != want {
			t.Errorf("pulledAt(%q) = %d, want %d", sel, got, want)
		}
	}
	twice := append(srcs, Source{Root: PulledRoot("/elsewhere", "/data/llama")})
	if got := pulledAt(twice, "/data/llama"); got != -1 {
		t.Errorf("a name two records share: %d, want -1", got)
	}
}

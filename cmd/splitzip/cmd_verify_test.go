package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// TestFailLine: a problem in a cache object names the object where its
// message does not, and a pack member's range where the message names
// the pack's file only.
func TestFailLine(t *testing.T) {
	member := &shardcache.Location{Path: "/c/objects/ab/pack", Offset: 4096, Size: 300, Packed: true}
	own := &shardcache.Location{Path: "/c/objects/cd/object"}
	for _, c := range []struct {
		p    pipeline.Problem
		want string
	}{
		{pipeline.Problem{File: "/src/m.safetensors", Tensor: "w", Error: "checksum mismatch", ObjectAt: member},
			`FAIL /src/m.safetensors: tensor "w": checksum mismatch (cache object /c/objects/ab/pack[4096:+300])`},
		{pipeline.Problem{File: "/src/m.safetensors", Tensor: "w", Error: "/c/objects/ab/pack: checksum mismatch", ObjectAt: member},
			`FAIL /src/m.safetensors: tensor "w": /c/objects/ab/pack: checksum mismatch (bytes [4096:+300] of the pack)`},
		{pipeline.Problem{File: "/src/m.safetensors", Tensor: "w", Error: "/c/objects/cd/object: cut short", ObjectAt: own},
			`FAIL /src/m.safetensors: tensor "w": /c/objects/cd/object: cut short`},
		{pipeline.Problem{File: "/src/m.safetensors", Error: "no such file or directory", Err: errors.New("x")},
			`FAIL /src/m.safetensors: no such file or directory`},
	} {
		if got := failLine(c.p); got != c.want {
			t.Errorf("failLine:\n got %s\nwant %s", got, c.want)
		}
	}
}

// TestVerifyTruncatedShard: a source shard cut short fails verify with a
// line for the shard and a few of the tensors past its end, then how many
// more; --json lists every tensor.
func TestVerifyTruncatedShard(t *testing.T) {
	dir := t.TempDir()
	ck, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "c")
	if code, _, e := splitzip(t, "gen", ck, "--size", "8MiB", "--shards", "2"); code != 0 {
		t.Fatalf("gen: %d %s", code, e)
	}
	if code, _, e := splitzip(t, "compress", ck, "-o", cache, "--no-sync"); code != 0 {
		t.Fatalf("compress: %d %s", code, e)
	}
	shards, _ := filepath.Glob(filepath.Join(ck, "*.safetensors"))
	if err := os.Truncate(shards[0], 1_000_000); err != nil {
		t.Fatal(err)
	}
	code, _, e := splitzip(t, "verify", cache)
	lines := strings.Count(e, "FAIL "+shards[0])
	if code != exitInput || lines != 1+shownChanged+1 || !strings.Contains(e, "more tensors, for the same reason") {
		t.Errorf("verify of a truncated shard: exit %d, %d FAIL lines of it:\n%s", code, lines, e)
	}
	_, out, _ := splitzip(t, "verify", cache, "--json")
	var doc struct{ Problems []pipeline.Problem }
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Problems) < 1+shownChanged+2 {
		t.Errorf("verify --json of a truncated shard: %v, %d problems", err, len(doc.Problems))
	}
}

package main

import (
	"errors"
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

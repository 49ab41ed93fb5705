package pipeline

import (
	"context"
	"path/filepath"
	"testing"
)

// TestCommittedFixture runs the committed tiny checkpoint through
// compress, verify and decompress.
func TestCommittedFixture(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "testdata", "tiny")
	cache, out := filepath.Join(dir, "cache"), filepath.Join(dir, "out")
	res := compress(t, src, cache, false)
	if res.Totals.Tensors == 0 || res.Shards != 2 {
		t.Fatalf("fixture: %+v", res)
	}
	if v := mustVerify(t, cache); !v.OK() {
		t.Fatalf("verify: %+v", v.Problems)
	}
	if _, err := Decompress(context.Background(), cache, DecompressOptions{Output: out}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, out)
}

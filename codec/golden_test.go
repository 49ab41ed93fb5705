package codec

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

var update = flag.Bool("update", false, "rewrite the golden payload")

// TestGolden pins format version 1: a fixed tensor must encode to the
// committed bytes, and the committed bytes must decode to the tensor. A
// change here is a format change and needs a new version.
func TestGolden(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 11))
	v := synth.Normal(rng, 3*ChunkValues+5, 0.02)
	for i := 0; i < len(v)/2; i += 1001 {
		binary.LittleEndian.PutUint16(v[2*i:], uint16(rng.Uint32())) // escapes
	}
	p, _, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden-v1.szb")
	if *update {
		if err := os.WriteFile(path, p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, want) {
		t.Fatalf("encoder output differs from %s at byte %d: the format or the encoder changed", path, firstDiff(p, want))
	}
	out := make([]byte, len(v))
	if err := Decode(out, want); err != nil || !bytes.Equal(out, v) {
		t.Fatalf("golden payload does not decode to its tensor: %v", err)
	}
}

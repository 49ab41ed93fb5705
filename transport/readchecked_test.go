package transport

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestReadCheckedMatchesChecksum checks that pieces read in crcStep steps
// fold to the payload's checksum, for piece boundaries on and off steps.
func TestReadCheckedMatchesChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := synth.Normal(rng, 3*crcStep/2+777, 0.02)
	p, _, err := codec.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := codec.ParseHeader(p)
	path := filepath.Join(t.TempDir(), "payload")
	os.WriteFile(path, p, 0o644)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, piece := range []int{len(p), crcStep, crcStep + 16, 1000} {
		var sum uint32
		for off := 0; off < len(p); off += piece {
			q := make([]byte, min(piece, len(p)-off))
			c, _, _, err := readChecked(f, q, uint64(off))
			if err != nil {
				t.Fatal(err)
			}
			sum = codec.CombineChecksums(sum, c, uint64(len(q)))
		}
		if sum != h.Checksum {
			t.Errorf("pieces of %d bytes: checksum %08x, header says %08x", piece, sum, h.Checksum)
		}
	}
}

package codec

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// TestPieceSums folds piece checksums set in any order into the payload's
// checksum, for piece sizes that do and do not divide the payload, and
// CheckPayload names what it found and what it wanted.
func TestPieceSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p, _, err := Encode(synth.Normal(rng, 3*ChunkValues+77, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := ParseHeader(p)
	for _, piece := range []uint64{1, 7, 4096, uint64(len(p)) - 1, uint64(len(p)), 1 << 30} {
		s := NewPieceSums(uint64(len(p)), piece)
		for _, i := range rng.Perm(s.Pieces()) {
			off, n := s.Span(i)
			s.Set(i, PieceChecksum(p[off:off+n], off))
		}
		if s.Sum() != Checksum(p) {
			t.Fatalf("pieces of %d: sum %08x, want %08x", piece, s.Sum(), Checksum(p))
		}
		if err := s.Check(&h, h.Values); err != nil {
			t.Fatalf("pieces of %d: %v", piece, err)
		}
	}
	for _, c := range []struct {
		size   uint64
		sum    uint32
		values uint64
		want   error
		says   string
	}{
		{uint64(len(p)) + 1, h.Checksum, 0, ErrCorrupt, "bytes"},
		{uint64(len(p)), h.Checksum ^ 1, 0, ErrChecksum, "header says"},
		{uint64(len(p)), h.Checksum, h.Values + 1, ErrSize, "the tensor has"},
	} {
		err := CheckPayload(&h, c.size, c.sum, c.values)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("CheckPayload(%d, %08x, %d): %v, want %v saying %q", c.size, c.sum, c.values, err, c.want, c.says)
		}
	}
}

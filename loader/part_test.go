package loader

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// TestParts cuts parts of every tensor's stored bytes for random byte
// ranges (row shards among them) and rebuilds exactly those bytes.
func TestParts(t *testing.T) {
	l, _ := openFixture(t)
	rng := rand.New(rand.NewPCG(14, 1))
	payloads := 0
	for _, tn := range l.Tensors() {
		n, err := l.StoredSize(tn.Index)
		if err != nil {
			t.Fatal(err)
		}
		stored := make([]byte, n)
		if _, err := l.ReadStored(tn.Index, stored); err != nil {
			t.Fatal(err)
		}
		src := source(t, &tn)
		ranges := [][2]uint64{{0, tn.Size}, {0, 0}, {tn.Size / 2 &^ 1, tn.Size}}
		for range 4 {
			lo := rng.Uint64N(tn.Size/2+1) * 2
			ranges = append(ranges, [2]uint64{lo, lo + rng.Uint64N((tn.Size-lo)/2+1)*2})
		}
		for _, r := range ranges {
			part, err := l.PartOf(tn.Index, stored, r[0], r[1])
			if err != nil {
				t.Fatalf("%s %v: %v", tn.Name, r, err)
			}
			got := make([]byte, r[1]-r[0])
			if err := l.DecodePart(tn.Index, part, r[0], r[1], got); err != nil {
				t.Fatalf("%s %v: %v", tn.Name, r, err)
			}
			if !bytes.Equal(got, src[r[0]:r[1]]) {
				t.Fatalf("%s %v: the part rebuilds other bytes", tn.Name, r)
			}
		}
		if tn.Compressed {
			payloads++
			half := tn.Size / 2 &^ 1
			part, _ := l.PartOf(tn.Index, stored, 0, half)
			if err := l.DecodePart(tn.Index, part, half, tn.Size, make([]byte, tn.Size)); tn.Size > 4*codec.ChunkValues && !errors.Is(err, codec.ErrSize) {
				t.Errorf("%s: a part of the first half for the second: %v", tn.Name, err)
			}
			part[len(part)-1] ^= 1
			if err := l.DecodePart(tn.Index, part, 0, half, make([]byte, half)); !errors.Is(err, codec.ErrChecksum) || !strings.Contains(err.Error(), tn.Name) {
				t.Errorf("%s: damaged part: %v", tn.Name, err)
			}
			if _, err := l.PartOf(tn.Index, stored, 1, 3); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: odd range: %v", tn.Name, err)
			}
		}
	}
	if payloads == 0 {
		t.Fatal("no payloads in the fixture")
	}
}

// TestPartsEntropy: entropy payloads have no parts yet.
func TestPartsEntropy(t *testing.T) {
	c, _ := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 1, Seed: 15}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tn := range l.Tensors() {
		if tn.rec.Stored == shardcache.StoredEntropy {
			if _, err := l.PartOf(tn.Index, nil, 0, 2); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "entropy") {
				t.Errorf("%s: %v", tn.Name, err)
			}
			return
		}
	}
	t.Fatal("no entropy payload")
}

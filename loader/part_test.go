package loader

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
)

// TestParts cuts parts of every tensor's stored bytes for random byte
// ranges (row shards among them) and rebuilds exactly those bytes.
func TestParts(t *testing.T) {
	l, _ := openFixture(t)
	if checkParts(t, l, false) == 0 {
		t.Fatal("no payloads in the fixture")
	}
}

// TestPartsEntropy does the same for a cache of entropy payloads.
func TestPartsEntropy(t *testing.T) {
	c, _ := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 1, Seed: 15}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy, MinSaving: 0.03})
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if checkParts(t, l, false) == 0 {
		t.Fatal("no payloads in the fixture")
	}
}

// checkParts checks parts of every tensor of l (of every payload with
// payloadsOnly) and returns how many tensors are payloads.
func checkParts(t *testing.T, l *Loader, payloadsOnly bool) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(14, 1))
	payloads := 0
	for _, tn := range l.Tensors() {
		if payloadsOnly && tn.rec.Stored == shardcache.StoredRaw {
			continue
		}
		size := uint64(1)
		if bits, ok := safetensors.DTypeBits(tn.DType); ok && bits >= 8 {
			size = bits / 8
		}
		n, err := l.StoredSize(tn.Index)
		if err != nil {
			t.Fatal(err)
		}
		stored := make([]byte, n)
		if _, err := l.ReadStored(tn.Index, stored); err != nil {
			t.Fatal(err)
		}
		src := source(t, &tn)
		vals := tn.Size / size
		ranges := [][2]uint64{{0, tn.Size}, {0, 0}, {vals / 2 * size, tn.Size}}
		for range 4 {
			lo := rng.Uint64N(vals + 1)
			ranges = append(ranges, [2]uint64{lo * size, (lo + rng.Uint64N(vals-lo+1)) * size})
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
		if tn.rec.Stored == shardcache.StoredRaw {
			continue
		}
		payloads++
		half := vals / 2 * size
		part, _ := l.PartOf(tn.Index, stored, 0, half)
		if err := l.DecodePart(tn.Index, part, half, tn.Size, make([]byte, tn.Size)); tn.Size > 4*codec.ChunkValues*size && !errors.Is(err, codec.ErrSize) {
			t.Errorf("%s: a part of the first half for the second: %v", tn.Name, err)
		}
		part[len(part)-1] ^= 1
		if err := l.DecodePart(tn.Index, part, 0, half, make([]byte, half)); !errors.Is(err, codec.ErrChecksum) || !strings.Contains(err.Error(), tn.Name) {
			t.Errorf("%s: damaged part: %v", tn.Name, err)
		}
		if _, err := l.PartOf(tn.Index, stored, 1, 3); size > 1 && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: a range splitting values: %v", tn.Name, err)
		}
	}
	return payloads
}

// TestPartsEntropyVersion1: the golden cache of index version 3 holds
// version 1 entropy payloads, which have no chunk records: their parts
// are the whole payload, and still rebuild exactly the bytes asked for.
// (Raw tensors are left out: a checkout gives the golden source a new
// modification time, which the source check refuses.)
func TestPartsEntropyVersion1(t *testing.T) {
	golden := filepath.Join("..", "testdata", "golden", "v3")
	l, err := Open(filepath.Join(golden, "cache"), filepath.Join(golden, "source"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if checkParts(t, l, true) == 0 {
		t.Fatal("no payloads in the golden cache")
	}
}

package entropy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/guard"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestParts cuts parts of every field's payloads for many value ranges
// and decodes each to exactly the values of its chunks.
func TestParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	C := codec.ChunkValues
	for fi, f := range Fields {
		for _, n := range []int{1, C + 1, 5*C + 333} {
			raw := make([]byte, n*f.Size)
			copy(raw, synth.Normal(rng, n*f.Size/2+1, 0.02))
			p, err := Encode(fi, raw, 0)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := ParsePayloadHeader(p)
			N := uint64(n)
			ranges := [][2]uint64{{0, N}, {0, 1}, {N - 1, N}}
			for range 8 {
				lo := rng.Uint64N(N)
				ranges = append(ranges, [2]uint64{lo, lo + 1 + rng.Uint64N(N-lo)})
			}
			for _, r := range ranges {
				first, k := ChunksCovering(h.ChunkValues, r[0], r[1])
				part, err := Part(p, first, k)
				if err != nil {
					t.Fatalf("%s %d %v: %v", f.Name(), n, r, err)
				}
				pi, err := ParsePart(part)
				if err != nil {
					t.Fatalf("%s %d %v: %v", f.Name(), n, r, err)
				}
				if pi.Values[0] > r[0] || pi.Values[1] < r[1] {
					t.Fatalf("%s: part %v does not cover %v", f.Name(), pi.Values, r)
				}
				got := make([]byte, (pi.Values[1]-pi.Values[0])*uint64(f.Size))
				if _, err := DecodePart(got, part); err != nil {
					t.Fatalf("%s %d %v: %v", f.Name(), n, r, err)
				}
				if !bytes.Equal(got, raw[pi.Values[0]*uint64(f.Size):pi.Values[1]*uint64(f.Size)]) {
					t.Fatalf("%s %d %v: the part decodes to other values", f.Name(), n, r)
				}
				if h.Chunks() >= 4 && 2*k <= h.Chunks() && 4*len(part) > 3*len(p) {
					t.Errorf("%s: a part of %d of %d chunks is %d bytes of %d", f.Name(), k, h.Chunks(), len(part), len(p))
				}
			}
		}
	}
}

// TestPartCorrupt: flipped bytes fail the part's checksum; with the
// checksum fixed, damaged heads, records and indexes are errors, never
// panics or writes past dst.
func TestPartCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	raw := synth.Normal(rng, 4*codec.ChunkValues+9, 0.02)
	p, _ := Encode(0, raw, 0)
	part, err := Part(p, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := ParsePart(part)
	dst := make([]byte, 2*(pi.Values[1]-pi.Values[0]))
	for range 300 {
		b := append([]byte(nil), part...)
		b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		if _, err := DecodePart(dst, b); !errors.Is(err, codec.ErrChecksum) && !errors.Is(err, ErrPayload) {
			t.Fatalf("flipped part: %v", err)
		}
		binary.LittleEndian.PutUint32(b[48:], partChecksum(b))
		_, _ = DecodePart(dst, b) // must not panic
	}
	if _, err := DecodePart(dst[:len(dst)-2], part); !errors.Is(err, codec.ErrSize) {
		t.Errorf("short destination: %v", err)
	}
	if _, err := Part(p, 4, 2); !errors.Is(err, codec.ErrSize) {
		t.Errorf("chunks past the end: %v", err)
	}
}

// FuzzDecodePart feeds arbitrary entropy parts to the decoder (with fix
// set, the checksum is recomputed first).
func FuzzDecodePart(f *testing.F) {
	rng := rand.New(rand.NewPCG(35, 36))
	for _, n := range []int{1, 100, codec.ChunkValues + 3} {
		p, _ := Encode(0, synth.Normal(rng, n, 0.02), 1)
		h, _ := ParsePayloadHeader(p)
		if part, err := Part(p, 0, h.Chunks()); err == nil {
			f.Add(part, true)
			f.Add(part, false)
		}
	}
	if part, err := Part(pairSeed(2, 2*codec.ChunkValues+1), 1, 1); err == nil { // version 3
		f.Add(part, true)
	}
	f.Fuzz(func(t *testing.T, part []byte, fix bool) {
		if fix && len(part) >= partHeader {
			binary.LittleEndian.PutUint32(part[48:], partChecksum(part))
		}
		pi, err := ParsePart(part)
		if err != nil || pi.Values[1]-pi.Values[0] > 1<<22 {
			return
		}
		n := (pi.Values[1] - pi.Values[0]) * uint64(Fields[pi.Header.Field].Size)
		if _, over := guard.Run(n, func(dst []byte) { _, _ = DecodePart(dst, part) }); over {
			t.Fatal("DecodePart wrote past its destination")
		}
	})
}

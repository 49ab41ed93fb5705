package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/splitzip/splitzip/internal/guard"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestParts cuts the parts covering many value ranges of payloads with
// partial last chunks, escapes and raw chunks, and decodes each to
// exactly the values of its chunks.
func TestParts(t *testing.T) {
	rng, _ := seeded(t)
	C := uint64(ChunkValues)
	heavy := synth.Normal(rng, int(7*C+5), 0.02)
	for i := int(2 * C); i < int(3*C); i++ {
		binary.LittleEndian.PutUint16(heavy[2*i:], uint16(rng.Uint32()&0x807f|0x7f00)) // a raw chunk
	}
	for i := int(4 * C); i < int(5*C); i += 9 {
		binary.LittleEndian.PutUint16(heavy[2*i:], 0x0001) // escapes
	}
	for _, tc := range []struct {
		name   string
		values []byte
	}{
		{"one", synth.Normal(rng, 1, 0.02)},
		{"partial", synth.Normal(rng, int(C+7), 0.02)},
		{"mixed", heavy},
		{"groups", synth.Normal(rng, int(70*C+1), 0.02)},
		{"patterns", allPatterns(rng)},
	} {
		p, st, err := Encode(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		n := uint64(len(tc.values) / 2)
		ranges := [][2]uint64{{0, n}, {0, 1}, {n - 1, n}, {n / 2, n / 2}}
		for range 20 {
			lo := rng.Uint64N(n)
			ranges = append(ranges, [2]uint64{lo, lo + rng.Uint64N(n-lo+1)})
		}
		for _, r := range ranges {
			first, k := ChunksCovering(r[0], r[1])
			part, err := Part(p, first, k)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.name, r, err)
			}
			pi, err := ParsePart(part)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.name, r, err)
			}
			if k > 0 && (pi.Values[0] > r[0] || pi.Values[1] < r[1]) {
				t.Fatalf("%s: part %v does not cover %v", tc.name, pi.Values, r)
			}
			got := make([]byte, 2*(pi.Values[1]-pi.Values[0]))
			if _, err := DecodePart(got, part); err != nil {
				t.Fatalf("%s %v: %v", tc.name, r, err)
			}
			if !bytes.Equal(got, tc.values[2*pi.Values[0]:2*pi.Values[1]]) {
				t.Fatalf("%s %v: part decodes to other values", tc.name, r)
			}
			if N := pi.Header.Chunks(); N >= 4 && 2*k <= N && 4*len(part) > 3*len(p) {
				t.Errorf("%s: a part of %d of %d chunks is %d bytes of %d", tc.name, k, N, len(part), len(p))
			}
		}
		t.Logf("%s: %d values, %d raw chunks, %d escapes", tc.name, n, st.RawChunks, st.Escapes)
	}
}

// TestPartCorrupt: flipped bytes fail the checksum; tampered tables with
// a fixed checksum are errors, never panics or writes past dst.
func TestPartCorrupt(t *testing.T) {
	rng, _ := seeded(t)
	v := synth.Normal(rng, 3*ChunkValues+11, 0.02)
	p, _, _ := Encode(v)
	part, err := Part(p, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	pi, _ := ParsePart(part)
	dst := make([]byte, 2*(pi.Values[1]-pi.Values[0]))
	for range 300 {
		b := append([]byte(nil), part...)
		b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		if _, err := DecodePart(dst, b); !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("flipped part: %v", err)
		}
		binary.LittleEndian.PutUint32(b[32:], partChecksum(b))
		_, _ = DecodePart(dst, b) // must not panic
	}
	if _, err := Part(p, 3, 2); !errors.Is(err, ErrSize) {
		t.Errorf("chunks past the end: %v", err)
	}
	if _, err := DecodePart(dst[:len(dst)-2], part); !errors.Is(err, ErrSize) {
		t.Errorf("short destination: %v", err)
	}
	if _, err := ParsePart(part[:100]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated part: %v", err)
	}
}

// FuzzDecodePart feeds arbitrary parts to the decoder (with fix set, the
// checksum is recomputed first): errors only, nothing written past dst.
func FuzzDecodePart(f *testing.F) {
	for _, p := range seedPayloads() {
		h, _ := ParseHeader(p)
		part, err := Part(p, 0, h.Chunks())
		if err == nil {
			f.Add(part, true)
			f.Add(part, false)
		}
	}
	f.Fuzz(func(t *testing.T, part []byte, fix bool) {
		if fix && len(part) >= partHeader {
			binary.LittleEndian.PutUint32(part[32:], partChecksum(part))
		}
		pi, err := ParsePart(part)
		if err != nil || pi.Values[1]-pi.Values[0] > 1<<22 {
			return
		}
		n := 2 * (pi.Values[1] - pi.Values[0])
		if _, over := guard.Run(n, func(dst []byte) { _, _ = DecodePart(dst, part) }); over {
			t.Fatal("DecodePart wrote past its destination")
		}
	})
}

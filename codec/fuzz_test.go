package codec

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/internal/guard"
	"github.com/splitzip/splitzip/internal/synth"
)

func seedPayloads() [][]byte {
	rng := rand.New(rand.NewPCG(3, 3))
	var out [][]byte
	for _, n := range []int{0, 1, 9, 100, ChunkValues + 3} {
		v := synth.Normal(rng, n, 0.02)
		for i := 0; i < n; i += 37 {
			binary.LittleEndian.PutUint16(v[2*i:], 0x0001) // escapes
		}
		p, _, _ := Encode(v)
		out = append(out, p)
	}
	return out
}

// FuzzDecode feeds arbitrary payloads to the decoder. With fix set the
// checksum is recomputed first, so the structure checks are what is tested.
func FuzzDecode(f *testing.F) {
	for _, p := range seedPayloads() {
		f.Add(p, true)
		f.Add(p, false)
	}
	f.Fuzz(func(t *testing.T, p []byte, fix bool) {
		if fix && len(p) >= HeaderSize {
			binary.LittleEndian.PutUint32(p[offChecksum:], Checksum(p))
		}
		h, err := ParseHeader(p)
		if err != nil || h.Values > 1<<22 {
			_, _ = Validate(p)
			return
		}
		out, over := guard.Run(2*h.Values, func(dst []byte) { err = Decode(dst, p) })
		if over {
			t.Fatal("decode wrote past its destination")
		}
		if err == nil {
			// A payload that decodes must re-encode to something that
			// decodes to the same values.
			q, _, err := Encode(out)
			if err != nil {
				t.Fatal(err)
			}
			back := make([]byte, 2*h.Values)
			if err := Decode(back, q); err != nil || !bytes.Equal(back, out) {
				t.Fatalf("re-encoding a decoded payload does not round-trip: %v", err)
			}
		}
	})
}

// FuzzRoundTrip encodes arbitrary values and checks them bit for bit.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0x80, 0x7f, 0xff})
	f.Add(bytes.Repeat([]byte{0x3c, 0x3f}, 5000))
	f.Fuzz(func(t *testing.T, v []byte) {
		v = v[:len(v)&^1]
		p, _, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, len(v))
		if err := Decode(out, p); err != nil || !bytes.Equal(out, v) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

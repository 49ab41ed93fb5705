package entstudy

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/klauspost/compress/huff0"

	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestStudy: on N(0, 0.02) BF16 and its casts, every coder lands between
// the entropy bound and the dtype's raw width, bit-packed lanes no larger
// than padded ones, and the fixed-rate payload near its 12 bits.
func TestStudy(t *testing.T) {
	raw := synth.Normal(rand.New(rand.NewPCG(1, 2)), 1<<18, 0.02)
	st := New()
	if err := st.Add("BF16", raw); err != nil {
		t.Fatal(err)
	}
	if err := st.Cast(raw, 512); err != nil {
		t.Fatal(err)
	}
	if err := st.Add("I64", raw); err != nil { // not a float: ignored
		t.Fatal(err)
	}
	width := map[string]float64{"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "F8_E5M2": 8}
	res := st.Results()
	if len(res) != 7 {
		t.Fatalf("%d results, want 7 (FP8 twice)", len(res))
	}
	for _, r := range res {
		if r.Values != 1<<18 || r.Bound <= 0 || r.Packed < r.Bound || r.Canonical < r.Packed || r.Huff0 < r.Bound ||
			r.Canonical > width[r.DType] || r.Packed-r.Bound > 0.2 {
			t.Errorf("%+v", r)
		}
		if r.Pairs > r.Compact || r.PairTensors > r.Tensors {
			t.Errorf("%s %s: pairs %.3f over compact %.3f (%d of %d tensors)", r.DType, r.Field, r.Pairs, r.Compact, r.PairTensors, r.Tensors)
		}
		if r.DType == "BF16" && (r.Fixed < 11.9 || r.Fixed > 12.2) {
			t.Errorf("fixed-rate BF16 at %.3f bits/value", r.Fixed)
		}
	}
}

// TestPairs: exponents that come in pairs (every even value's exponent
// decides the next one's) code smaller as pairs than one at a time, and a
// tensor of more than 256 pairs is not coded so.
func TestPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	syms := make([]byte, 1<<16)
	for i := 0; i < len(syms); i += 2 {
		syms[i] = byte(120 + rng.IntN(6))
		syms[i+1] = syms[i] + 1
	}
	pb, ok, err := pairBits(syms, 8)
	if err != nil || !ok {
		t.Fatalf("pairBits: %v, %v", ok, err)
	}
	freq := make([]uint64, 256)
	for _, b := range syms {
		freq[b]++
	}
	fr, err := canonicalBits(freq, syms, 8)
	if err != nil {
		t.Fatal(err)
	}
	if pb >= 0.7*fr.compact {
		t.Errorf("pairs %.0f bits, one at a time %.0f", pb, fr.compact)
	}
	for i := range syms {
		syms[i] = byte(rng.Uint32())
	}
	if _, ok, err := pairBits(syms, 8); ok || err != nil {
		t.Errorf("random bytes as pairs: %v, %v", ok, err)
	}
}

// BenchmarkHuff0Decode decodes, on one goroutine, the coded field of 4 Mi
// N(0, 0.02) values of every field (the data of entropy's
// BenchmarkPayloadDTypes) with huff0's 4X decoder in blocks of huffBlock
// symbols: the rate an optimised CPU Huffman decoder reaches on the same
// symbols, beside which the lane decoder's rate is read. Bytes are the
// tensor's raw bytes, as there; the other bits are not rebuilt here, so
// this is an upper bound of what a huff0 payload would decode at.
func BenchmarkHuff0Decode(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 4 << 20
	bf16 := synth.Normal(rng, n, 0.02)
	for _, f := range entropy.Fields {
		raw := synth.Trained(rng, bf16, 0.02, f.DType, 4096)
		syms := make([]byte, n)
		if err := f.Symbols(syms, raw); err != nil {
			b.Fatal(err)
		}
		var blocks [][]byte
		for off := 0; off < n; off += huffBlock {
			var sc huff0.Scratch
			out, _, err := huff0.Compress4X(syms[off:off+huffBlock], &sc)
			if err != nil {
				b.Fatalf("%s: %v", f.Name(), err)
			}
			blocks = append(blocks, append([]byte(nil), out...))
		}
		dst := make([]byte, huffBlock)
		b.Run(strings.ReplaceAll(f.Name(), " ", "_"), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			var sc huff0.Scratch
			for b.Loop() {
				for _, in := range blocks {
					s, rest, err := huff0.ReadTable(in, &sc)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.Decoder().Decompress4X(dst, rest); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

package entropy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/internal/synth"
)

// TestExplain: the parts of a breakdown add up to the payload's bits; the
// code words are the code lengths of the coded chunks' symbols, counted
// here from the values; constant and incompressible chunks are plain.
func TestExplain(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	C := codec.ChunkValues
	bf := synth.Normal(rng, 3*C+77, 0.02)
	clear(bf[2*C : 4*C]) // chunk 1: one symbol, a constant chunk
	for i := 4 * C; i < 6*C; i++ {
		bf[i] = byte(rng.Uint32()) // chunk 2: exponents of every kind, raw
	}
	f8 := make([]byte, 2*C+5)
	for i := range f8 {
		f8[i] = byte(rng.NormFloat64()*20) + 0x30
	}
	for _, c := range []struct {
		fi  int
		raw []byte
	}{{0, bf}, {0, bf[:2*100]}, {2, bf[:len(bf)/4*4]}, {3, f8}, {4, f8}} {
		f := Fields[c.fi]
		p, err := Encode(c.fi, c.raw, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Explain(bytes.NewReader(p), uint64(len(p)))
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		n := uint64(len(c.raw) / f.Size)
		if sum := b.Head + b.Index + b.Kept + b.Codes + b.Lanes + b.Plain + b.Padding; sum != b.Bits || b.Bits != 8*uint64(len(p)) || b.Values != n || b.CodedValues+b.PlainValues != n {
			t.Fatalf("%s: parts %d of %d bits, %d + %d of %d values: %+v", f.Name(), sum, 8*len(p), b.CodedValues, b.PlainValues, n, b)
		}
		if want := n * uint64(f.Other()); b.Kept < want || b.Kept >= want+8*(n/uint64(C)+1) {
			t.Errorf("%s: %d kept bits for %d values", f.Name(), b.Kept, n)
		}
		h, err := Check(p)
		if err != nil {
			t.Fatal(err)
		}
		syms := make([]byte, n)
		if err := f.Symbols(syms, c.raw); err != nil {
			t.Fatal(err)
		}
		// Which chunks are coded: the first byte of each symbol chunk.
		at := indexAt(h.indexBytes(p))
		var codes uint64
		for ch := range h.Chunks() {
			_, _, sLo, _, _ := h.spans(ch, at(ch), at(ch+1))
			if p[sLo] != ModeCoded {
				continue
			}
			for _, s := range syms[ch*uint64(C) : ch*uint64(C)+h.chunkValues(ch)] {
				codes += uint64(h.Lengths[s])
			}
		}
		if b.Codes != codes {
			t.Errorf("%s: %d code bits, the code lengths of the coded symbols add up to %d", f.Name(), b.Codes, codes)
		}
		if c.fi == 0 && len(c.raw) == len(bf) && (b.PlainValues != 2*uint64(C) || b.CodedValues != n-2*uint64(C)) {
			t.Errorf("BF16: %d plain and %d coded values, want the constant and the raw chunk plain", b.PlainValues, b.CodedValues)
		}
		var sum Breakdown
		sum.Add(b)
		sum.Add(b)
		if sum.Bits != 2*b.Bits || sum.Lanes != 2*b.Lanes || sum.PlainValues != 2*b.PlainValues {
			t.Errorf("Add: %+v", sum)
		}
	}
}

// TestExplainGolden explains the golden payloads of every version, and
// refuses damaged ones with an error.
func TestExplainGolden(t *testing.T) {
	for _, v := range []int{1, 2, 3} {
		p, err := os.ReadFile(fmt.Sprintf("testdata/golden-v%d-bf16.szen", v))
		if err != nil {
			t.Fatal(err)
		}
		b, err := Explain(bytes.NewReader(p), uint64(len(p)))
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if b.Head+b.Index+b.Kept+b.Codes+b.Lanes+b.Plain+b.Padding != b.Bits || (v == 1) != (b.Index == 0) || b.Codes == 0 ||
			b.Payloads != 1 || (v == pairVersion) != (b.PairPayloads == 1) {
			t.Errorf("version %d: %+v", v, b)
		}
		if _, err := Explain(bytes.NewReader(p), uint64(len(p))-1); !errors.Is(err, ErrPayload) {
			t.Errorf("version %d, a byte short: %v", v, err)
		}
		bad := bytes.Clone(p)
		bad[len(bad)-9] ^= 0x40 // the index's last entry but one (v2, v3), or a symbol byte (v1)
		bad[offOthers] ^= 1
		if _, err := Explain(bytes.NewReader(bad), uint64(len(bad))); err == nil {
			t.Errorf("version %d: a damaged header explained", v)
		}
	}
}

// FuzzExplain: any bytes are explained or refused, never a panic, and an
// explanation adds up to the payload's bits.
func FuzzExplain(f *testing.F) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, n := range []int{1, 300, codec.ChunkValues + 3} {
		p, _ := Encode(0, synth.Normal(rng, n, 0.02), 1)
		f.Add(p)
	}
	f.Add(pairSeed(1, 3000)) // version 3
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := Explain(bytes.NewReader(p), uint64(len(p)))
		if err == nil && b.Head+b.Index+b.Kept+b.Codes+b.Lanes+b.Plain+b.Padding != b.Bits {
			t.Fatalf("parts do not add up: %+v", b)
		}
	})
}

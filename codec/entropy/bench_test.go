package entropy

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// benchChunk returns the exponent symbols of a 16,384-value chunk of
// N(0, 0.02) BF16 and its code.
func benchChunk(b *testing.B) (*Code, []byte) {
	return chunkCode(b, synth.Normal(rand.New(rand.NewPCG(7, 8)), 16384, 0.02))
}

// chunkCode returns the exponent symbols of BF16 values raw and the code
// of their counts (MaxLen bits).
func chunkCode(tb testing.TB, raw []byte) (*Code, []byte) {
	tb.Helper()
	syms := make([]byte, len(raw)/2)
	if err := Fields[0].Symbols(syms, raw); err != nil {
		tb.Fatal(err)
	}
	return codeLimited(tb, syms, MaxLen), syms
}

// BenchmarkEncodeChunk codes a chunk's exponents (bytes: the raw BF16).
func BenchmarkEncodeChunk(b *testing.B) {
	c, syms := benchChunk(b)
	b.SetBytes(2 * int64(len(syms)))
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = EncodeChunk(buf[:0], c, syms, 8); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeChunk decodes them with the reference decoder.
func BenchmarkDecodeChunk(b *testing.B) {
	c, syms := benchChunk(b)
	enc, _ := EncodeChunk(nil, c, syms, 8)
	t := NewTable(c)
	out := make([]byte, len(syms))
	b.SetBytes(2 * int64(len(syms)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeChunk(t, enc, 8, out); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPayload is 16 MiB of N(0, 0.02) BF16.
func benchPayload(b *testing.B) []byte {
	return synth.Normal(rand.New(rand.NewPCG(9, 9)), 8<<20, 0.02)
}

// BenchmarkEncodePayload encodes a whole BF16 payload on one goroutine.
func BenchmarkEncodePayload(b *testing.B) {
	raw := benchPayload(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(0, raw, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePayload decodes it on one goroutine, checksum included.
func BenchmarkDecodePayload(b *testing.B) {
	raw := benchPayload(b)
	p, _ := Encode(0, raw, 1)
	benchDecode(b, raw, p)
}

// benchDecode times Decode of payload p of BF16 values raw on one
// goroutine.
func benchDecode(b *testing.B, raw, p []byte) {
	dst := make([]byte, len(raw))
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(dst, p, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(8*float64(len(p))/float64(len(raw)/2), "bits/value")
}

// BenchmarkDecodeSmall decodes whole BF16 payloads of 1 Ki to 128 Ki
// values on one goroutine, checksum and tables included: the tensors a
// load decodes on the host, where what a payload costs besides its values
// (its decode tables) counts most.
func BenchmarkDecodeSmall(b *testing.B) {
	for _, n := range []int{1 << 10, 4 << 10, 12000, 16 << 10, 40000, 128 << 10} {
		raw := synth.Normal(rand.New(rand.NewPCG(9, 9)), n, 0.02)
		p, err := Encode(0, raw, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("values=%d", n), func(b *testing.B) { benchDecode(b, raw, p) })
	}
}

// BenchmarkTables builds the decode tables of a chunk's code: the
// single-symbol table every payload needs, and the multi-symbol one of
// payloads with a full chunk.
func BenchmarkTables(b *testing.B) {
	c, _ := benchChunk(b)
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			NewTable(c)
		}
	})
	b.Run("multi", func(b *testing.B) {
		e := NewTable(c).Entries
		b.ReportAllocs()
		for b.Loop() {
			newMultiTable(e, nil)
		}
	})
}

// BenchmarkPayloadDTypes encodes and decodes 4 Mi values of every field on
// one goroutine: N(0, 0.02) drawn as F32, and as BF16 cast (synth.Cast) to
// F16 and to FP8 scaled a row of 4096 at a time.
func BenchmarkPayloadDTypes(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 4 << 20
	bf16 := synth.Normal(rng, n, 0.02)
	for fi, f := range Fields {
		raw := synth.Trained(rng, bf16, 0.02, f.DType, 4096)
		p, err := Encode(fi, raw, 1)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]byte, len(raw))
		name := strings.ReplaceAll(f.Name(), " ", "_")
		b.Run(name+"/decode", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if err := Decode(dst, p, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encode", func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := Encode(fi, raw, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeChunkFP8 codes a chunk of whole F8_E4M3 bytes (N(0, 0.02)
// cast with a scale a row of 4096), the widest alphabet a payload codes.
func BenchmarkEncodeChunkFP8(b *testing.B) {
	raw := synth.Cast(synth.Normal(rand.New(rand.NewPCG(7, 8)), 16384, 0.02), "F8_E4M3", 4096)
	c := codeLimited(b, raw, MaxLen)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = EncodeChunk(buf[:0], c, raw, 8); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHistogram counts 4 MiB of F8_E4M3 bytes.
func BenchmarkHistogram(b *testing.B) {
	raw := synth.Cast(synth.Normal(rand.New(rand.NewPCG(7, 8)), 4<<20, 0.02), "F8_E4M3", 4096)
	freq := make([]uint64, 256)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		histogram(freq, raw)
	}
}

// BenchmarkCountPairsPeaked counts 1 Mi BF16 values of few exponents
// (their pairs kept to the end) on one goroutine.
func BenchmarkCountPairsPeaked(b *testing.B) {
	raw := peaked(rand.New(rand.NewPCG(1, 2)), Fields[0], 1<<20)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		c, _ := NewCounts(0)
		c.Add(raw)
		c.Release()
	}
}

// BenchmarkToSymbolsPeaked turns their fields into pair symbols, a chunk
// at a time (the copy of the fields included).
func BenchmarkToSymbolsPeaked(b *testing.B) {
	raw := peaked(rand.New(rand.NewPCG(1, 2)), Fields[0], 1<<20)
	c, _ := NewCounts(0)
	c.Add(raw)
	pc, _ := newPayloadCode(c)
	if pc.pairs == nil {
		b.Fatal("no pairs")
	}
	f := make([]byte, 1<<20)
	fieldsOf(Fields[0], f, raw)
	g := make([]byte, len(f))
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		copy(g, f)
		for o := 0; o < len(g); o += 16384 {
			pc.toSymbols(g[o : o+16384])
		}
	}
}

// BenchmarkDecodePairsBF16 decodes, on one goroutine, a payload of pair
// symbols: 8 Mi N(0, 0.02) BF16 values with magnitudes below 2^-12
// raised to it (nine exponents, as bench decode's BF16_FEW), beside
// BenchmarkDecodePayload's payload of single fields.
func BenchmarkDecodePairsBF16(b *testing.B) {
	raw := benchPayload(b)
	for i := 0; i+2 <= len(raw); i += 2 {
		if x := binary.LittleEndian.Uint16(raw[i:]); x&0x7f80 < 0x3980 {
			binary.LittleEndian.PutUint16(raw[i:], x&0x8000|0x3980)
		}
	}
	p, _ := Encode(0, raw, 1)
	if h, _ := ParsePayloadHeader(p); !h.Pairs {
		b.Fatal("not coded in pairs")
	}
	benchDecode(b, raw, p)
}

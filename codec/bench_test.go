package codec

import (
	"math/rand/v2"
	"testing"

	"github.com/splitzip/splitzip/internal/synth"
)

// benchInputs are the named tensors the codec benchmarks run over.
var benchInputs = []struct {
	name   string
	values int
	sigma  float64
	spread float64
}{
	{"normal-64MiB", 32 << 20, 0.02, 0},
	{"rowscaled-64MiB", 32 << 20, 0.02, 1.5},
	{"normal-1MiB", 512 << 10, 0.02, 0},
}

func benchData(values int, sigma, spread float64) []byte {
	rng := rand.New(rand.NewPCG(7, 7))
	v := make([]byte, 2*values)
	synth.FillNormal(rng, v, sigma, spread, 4096)
	return v
}

func BenchmarkEncode(b *testing.B) {
	for _, in := range benchInputs {
		for _, w := range []int{1, 2} {
			b.Run(in.name+"/workers="+string(rune('0'+w)), func(b *testing.B) {
				v := benchData(in.values, in.sigma, in.spread)
				b.SetBytes(int64(len(v)))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := Encode(v, WithWorkers(w)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, in := range benchInputs {
		for _, w := range []int{1, 2} {
			b.Run(in.name+"/workers="+string(rune('0'+w)), func(b *testing.B) {
				v := benchData(in.values, in.sigma, in.spread)
				p, _, err := Encode(v)
				if err != nil {
					b.Fatal(err)
				}
				out := make([]byte, len(v))
				b.SetBytes(int64(len(v)))
				b.ReportAllocs()
				for b.Loop() {
					if err := Decode(out, p, WithWorkers(w)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

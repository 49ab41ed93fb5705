package load

import (
	"testing"

	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

// BenchmarkOpen is what a load costs before its first read: Open (specs,
// staging plan, arena, transports with their staging) and Close, a
// tensor, for a checkpoint of 100,000 tiny tensors, compressed and raw,
// on the host engine (whose staging is plain memory: on a GPU host,
// pinning adds its own cost).
func BenchmarkOpen(b *testing.B) {
	c, src := fixture.Compressed(b, synth.Config{Tiny: 100000, Shards: 4, Seed: 11}, pipeline.CompressOptions{})
	for _, raw := range []bool{false, true} {
		name := "compressed"
		if raw {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			eng := hostengine.New(2)
			defer eng.Close()
			b.ReportAllocs()
			for b.Loop() {
				l, err := Open(eng, c, src, Options{Raw: raw})
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100000), "ns/tensor")
		})
	}
}

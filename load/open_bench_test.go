package load

import (
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

// BenchmarkOpen is what a load costs before its first read: Open (specs,
// staging plan, arena, transports with their staging) and Close, a
// tensor, for a checkpoint of 100,000 tiny tensors, compressed and raw,
// on the host engine (staging in plain memory) and on the GPU where
// there is one (a VMM arena, pinned staging).
func BenchmarkOpen(b *testing.B) {
	c, src := fixture.Compressed(b, synth.Config{Tiny: 100000, Shards: 4, Seed: 11}, pipeline.CompressOptions{})
	n := 0
	for _, sh := range src.Shards {
		n += len(sh.Tensors)
	}
	for _, dev := range []string{"host", "cuda"} {
		for _, raw := range []bool{false, true} {
			name := dev + "/compressed"
			if raw {
				name = dev + "/raw"
			}
			b.Run(name, func(b *testing.B) {
				var eng engine.Engine
				if dev == "cuda" {
					eng = fixture.RequireCUDA(b, 2)
				} else {
					h := hostengine.New(2)
					defer h.Close()
					eng = h
				}
				b.ReportAllocs()
				for b.Loop() {
					l, err := Open(eng, c, src, Options{Raw: raw})
					if err != nil {
						b.Fatal(err)
					}
					l.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tensor")
			})
		}
	}
}

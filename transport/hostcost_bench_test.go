package transport

import (
	"context"
	"runtime"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

// nullEngine is the host engine with submissions that do nothing: a load
// through it costs what the host does for each tensor (lookups, plans,
// reads into staging, checks, submissions) without the copies and
// decodes that the CUDA engine hands to the GPU. For benchmarks only: the
// arena never receives the tensors.
type nullEngine struct{ *hostengine.Engine }

func (nullEngine) Submit(int, engine.Work) (engine.Event, error) { return doneFence{}, nil }
func (nullEngine) WaitEvent(int, engine.Event) error             { return nil }

var _ engine.Engine = nullEngine{}

// BenchmarkHostCost faults every tensor of a checkpoint of 100,000 tiny
// tensors (32 bytes to 4 KiB) in, a layer of 100 at a time, and evicts
// them, through the payload
// transport over a raw one (compressed; and with small payloads read
// through, PayloadOptions.ReadThrough) and through the raw one alone,
// on an engine that does no device work: the host's cost a tensor
// (ns/tensor of wall time, cpu-ns/tensor of the process's CPU time,
// allocs/tensor), which issue 34 wants under 0.5 us.
func BenchmarkHostCost(b *testing.B) {
	cache, src := fixture.Compressed(b, synth.Config{Tiny: 100000, Shards: 4, Seed: 11}, pipeline.CompressOptions{})
	specs, err := Specs(cache, src)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		po   *PayloadOptions // nil: the raw transport alone
	}{{"compressed", &PayloadOptions{}}, {"compressed-read-through", &PayloadOptions{ReadThrough: true}}, {"raw", nil}} {
		b.Run(c.name, func(b *testing.B) {
			eng := nullEngine{hostengine.New(2)}
			b.Cleanup(func() { eng.Close() }) // after what benchStore made (cleanups run last first)
			st, bs := benchStoreWith(b, eng, cache, specs, c.po)
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := cpuTime()
			n := 0
			fs := make([]Fence, 0, len(bs))
			for b.Loop() {
				// A layer of 100 tensors at a time, as a load faults its
				// layer groups in, all enqueued before the first wait.
				fs = fs[:0]
				for g := 0; g < len(bs); g += 100 {
					fs = append(fs, st.FaultIn(context.Background(), bs[g:min(g+100, len(bs))])...)
				}
				for i, f := range fs {
					if err := f.Wait(); err != nil {
						b.Fatalf("%s: %v", bs[i].Name, err)
					}
				}
				st.Evict(bs...)
				n++
			}
			cpu := cpuTime() - cpu0
			runtime.ReadMemStats(&ms1)
			per := float64(n * len(bs))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/tensor")
			if cpu > 0 {
				// Every thread's CPU time, the collector's included: what
				// the host spends a tensor, however many cores share it.
				b.ReportMetric(float64(cpu.Nanoseconds())/per, "cpu-ns/tensor")
			}
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/per, "allocs/tensor")
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/per, "B/tensor")
		})
	}
}

// BenchmarkSpecs is a load's set-up a tensor before its first fault: the
// arena specs of the 100,000-tensor checkpoint of BenchmarkHostCost, with
// its source present (one stat a shard) and moved away (each raw tensor's
// copy found in the cache).
func BenchmarkSpecs(b *testing.B) {
	cache, src := fixture.Compressed(b, synth.Config{Tiny: 100000, Shards: 4, Seed: 11}, pipeline.CompressOptions{SelfContained: true})
	for _, c := range []struct {
		name string
		root string
	}{{"present", src.Root}, {"absent", b.TempDir()}} {
		b.Run(c.name, func(b *testing.B) {
			moved := *src
			moved.Root = c.root
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				specs, err := Specs(cache, &moved)
				if err != nil {
					b.Fatal(err)
				}
				n = len(specs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tensor")
		})
	}
}

package transport

import (
	"context"
	"os"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// benchStore is stack with 4 readers (raw: the raw transport alone) and
// packing threshold small (0: the transports' default), its staging set
// up outside the timing; it returns the store and the arena's bindings.
func benchStore(b *testing.B, eng engine.Engine, cache *shardcache.Cache, specs []vmm.Spec, raw bool, small int64) (*Store, []*vmm.Binding) {
	b.Helper()
	var po *PayloadOptions
	if !raw {
		po = &PayloadOptions{SmallBytes: small}
	}
	return benchStoreWith(b, eng, cache, specs, po)
}

// benchStoreWith is benchStore with the payload transport's options po
// (nil: the raw transport alone), its packing threshold the raw one's and
// its readers 4.
func benchStoreWith(b *testing.B, eng engine.Engine, cache *shardcache.Cache, specs []vmm.Spec, po *PayloadOptions) (*Store, []*vmm.Binding) {
	b.Helper()
	var small int64
	if po != nil {
		q := *po
		q.Readers, small = 4, q.SmallBytes
		po = &q
	}
	a, tr, st := stack(b, eng, cache, specs, RawOptions{Readers: 4, SmallBytes: small}, po)
	if err := tr.(interface{ Prepare() error }).Prepare(); err != nil {
		b.Fatal(err)
	}
	return st, a.Bindings()
}

// BenchmarkHostLoad faults every tensor of a generated checkpoint in
// through a payload transport over a raw one on the host engine, and
// evicts them, from the page cache: the host's share of a load (reads,
// checks, the packer; the host engine's copies and decodes are in it
// too). Cases: small payloads packed from pack files (fixed; entropy,
// decoded by the host engine's batch), a mix of packed
// and streamed ones, and a self-contained cache's raw copies with the
// source gone.
func BenchmarkHostLoad(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  synth.Config
		opts pipeline.CompressOptions
		gone bool // the source moved away: raw copies from the cache
	}{
		{"small", synth.Config{Small: 2000, Shards: 2, Seed: 5}, pipeline.CompressOptions{}, false},
		{"small-entropy", synth.Config{Small: 2000, Shards: 2, Seed: 5}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy}, false},
		{"mix", synth.Config{Mix: 300, Shards: 2, Seed: 9}, pipeline.CompressOptions{}, false},
		{"rawcopies", synth.Config{Small: 2000, Shards: 2, Seed: 3}, pipeline.CompressOptions{SelfContained: true, MinSaving: 0.99}, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			cache, src := fixture.Compressed(b, c.cfg, c.opts)
			if c.gone {
				if err := os.Rename(src.Root, src.Root+".gone"); err != nil {
					b.Fatal(err)
				}
			}
			specs, err := Specs(cache, src)
			if err != nil {
				b.Fatal(err)
			}
			eng := hostengine.New(2)
			b.Cleanup(func() { eng.Close() }) // after what benchStore made (cleanups run last first)
			st, bs := benchStore(b, eng, cache, specs, false, 0)
			var total int64
			for _, x := range bs {
				total += int64(x.Size)
			}
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				for i, f := range st.FaultIn(context.Background(), bs) {
					if err := f.Wait(); err != nil {
						b.Fatalf("%s: %v", bs[i].Name, err)
					}
				}
				st.Evict(bs...)
			}
		})
	}
}

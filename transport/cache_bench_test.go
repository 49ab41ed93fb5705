package transport

import (
	"context"
	"os"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/cudaengine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/shardcache"
)

// BenchmarkCacheHostCost faults every tensor of the cache named by
// SPLITZIP_BENCH_CACHE in (its first source) and evicts them, through
// the payload transport over a raw one (compressed) and through the raw
// one alone: the host's share of a load of a real checkpoint. The engine
// does no device work (nullEngine), or, with SPLITZIP_BENCH_CUDA set, is
// the CUDA engine on device 0 (copies and decodes on the GPU too). Tensors
// stored in up to MaxSmallBytes are packed, as a load of a local cache
// packs them (load.DefaultSmallBytes).
func BenchmarkCacheHostCost(b *testing.B) {
	c := envCache(b)
	src := &c.Index().Sources[0]
	specs, err := Specs(c, src)
	if err != nil {
		b.Fatal(err)
	}
	for _, raw := range []bool{false, true} {
		b.Run(map[bool]string{false: "compressed", true: "raw"}[raw], func(b *testing.B) {
			var eng engine.Engine = nullEngine{hostengine.New(2)}
			if os.Getenv("SPLITZIP_BENCH_CUDA") != "" {
				if eng, err = cudaengine.New(0, 2); err != nil {
					b.Fatal(err)
				}
			}
			b.Cleanup(func() { eng.Close() }) // after what benchStore made (cleanups run last first)
			st, bs := benchStore(b, eng, c, specs, raw, MaxSmallBytes)
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

// envCache opens the cache in SPLITZIP_BENCH_CACHE, or skips the
// benchmark where it is not set.
func envCache(b *testing.B) *shardcache.Cache {
	b.Helper()
	dir := os.Getenv("SPLITZIP_BENCH_CACHE")
	if dir == "" {
		b.Skip("set SPLITZIP_BENCH_CACHE to a cache folder")
	}
	c, err := shardcache.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

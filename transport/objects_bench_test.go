package transport

import (
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// BenchmarkCacheReads reads the payload objects of a generated cache of
// small tensors from the page cache, one object an operation, as the
// payload transport does: opened and read whole (a streamed payload), or
// read as a range (the packer's staged read); from packs kept open, or
// from files of their own (a cache written without packs). Serially and
// from as many goroutines as GOMAXPROCS, which share the open packs.
func BenchmarkCacheReads(b *testing.B) {
	for _, c := range []struct {
		name    string
		packMax int64
	}{{"packed", 0}, {"own", -1}} {
		cache, src := fixture.Compressed(b, synth.Config{Small: 2000, Shards: 2, Seed: 5}, pipeline.CompressOptions{PackMax: c.packMax})
		var locs []shardcache.Location
		for _, sh := range src.Shards {
			for _, t := range sh.Tensors {
				if loc, _, err := cache.Locate(t.Key); err == nil && t.Payload() {
					locs = append(locs, loc)
				}
			}
		}
		objs := shardcache.NewObjectFiles(cache)
		defer objs.Close()
		reads := map[string]func(loc shardcache.Location, buf []byte) error{
			"open": func(loc shardcache.Location, buf []byte) error {
				f, err := objs.Open(loc)
				if err != nil {
					return err
				}
				_, err = f.ReadAt(buf, 0)
				f.Close()
				return err
			},
			"range": func(loc shardcache.Location, buf []byte) error { return objs.ReadAt(loc, buf, 0) },
		}
		for _, how := range []string{"open", "range"} {
			read := reads[how]
			b.Run(c.name+"/"+how, func(b *testing.B) {
				b.ReportAllocs()
				buf := make([]byte, 1<<20)
				i := 0
				for b.Loop() {
					loc := locs[i%len(locs)]
					if err := read(loc, buf[:loc.Size]); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
			b.Run(c.name+"/"+how+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				var next atomic.Int64
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, 1<<20)
					for pb.Next() {
						loc := locs[int(next.Add(1))%len(locs)]
						if err := read(loc, buf[:loc.Size]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

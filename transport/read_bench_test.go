package transport

import (
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/shardcache"
)

// BenchmarkReadObjects reads every object file of the cache in
// SPLITZIP_BENCH_CACHE (skipped when unset) from the page cache with 16
// goroutines, as a load's readers do, each opened for its read through
// shardcache.ObjectFiles: whole in one read, in crcStep reads, and in
// crcStep reads checksummed as they land (readChecked). It tells the
// host's share of a load apart from the device's.
func BenchmarkReadObjects(b *testing.B) {
	cache := envCache(b)
	// The files: every object stored in one of its own, packs included.
	var locs []shardcache.Location
	var total int64
	for k, o := range cache.Index().Objects {
		if o.Pack != "" {
			continue
		}
		loc, _, err := cache.Locate(k)
		if err != nil {
			b.Fatal(err)
		}
		locs = append(locs, loc)
		total += int64(o.Size)
	}
	if len(locs) == 0 {
		b.Fatalf("no objects in %s", cache.Dir())
	}
	slices.SortFunc(locs, func(x, y shardcache.Location) int { return strings.Compare(x.Path, y.Path) })
	objs := shardcache.NewObjectFiles(cache)
	defer objs.Close()
	for _, c := range []struct {
		name string
		read func(f io.ReaderAt, q []byte) error
	}{
		{"whole", func(f io.ReaderAt, q []byte) error { _, err := f.ReadAt(q, 0); return err }},
		{"steps", func(f io.ReaderAt, q []byte) error {
			for o := 0; o < len(q); o += crcStep {
				if _, err := f.ReadAt(q[o:min(o+crcStep, len(q))], int64(o)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"checked", func(f io.ReaderAt, q []byte) error { _, _, _, err := readChecked(f, q, 0); return err }},
		{"whole+crc", func(f io.ReaderAt, q []byte) error {
			if _, err := f.ReadAt(q, 0); err != nil {
				return err
			}
			codec.PieceChecksum(q, 0)
			return nil
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						buf := make([]byte, 0, 64<<20)
						for {
							i := next.Add(1) - 1
							if i >= int64(len(locs)) {
								return
							}
							f, err := objs.Open(locs[i])
							if err != nil {
								b.Error(err)
								return
							}
							if n := int(locs[i].Size); n > cap(buf) {
								buf = make([]byte, 0, n)
							}
							if err := c.read(f, buf[:locs[i].Size]); err != nil {
								b.Error(err)
							}
							f.Close()
						}
					})
				}
				wg.Wait()
			}
		})
	}
}

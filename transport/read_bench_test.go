package transport

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/codec"
)

// BenchmarkReadObjects reads every object file of the cache in
// SPLITZIP_BENCH_CACHE (skipped when unset) from the page cache with 16
// goroutines, as a load's readers do: whole in one read, in crcStep reads,
// and in crcStep reads checksummed as they land (readChecked). It tells
// the host's share of a load apart from the device's.
func BenchmarkReadObjects(b *testing.B) {
	dir := os.Getenv("SPLITZIP_BENCH_CACHE")
	if dir == "" {
		b.Skip("SPLITZIP_BENCH_CACHE is not set")
	}
	paths, err := filepath.Glob(filepath.Join(dir, "objects", "*", "*"))
	if err != nil || len(paths) == 0 {
		b.Fatalf("no objects in %s: %v", dir, err)
	}
	var total int64
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		total += st.Size()
	}
	for _, c := range []struct {
		name string
		read func(f *rawFile, q []byte) error
	}{
		{"whole", func(f *rawFile, q []byte) error { _, err := f.ReadAt(q, 0); return err }},
		{"steps", func(f *rawFile, q []byte) error {
			for o := 0; o < len(q); o += crcStep {
				if _, err := f.ReadAt(q[o:min(o+crcStep, len(q))], int64(o)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"checked", func(f *rawFile, q []byte) error { _, _, _, err := readChecked(f, q, 0); return err }},
		{"whole+crc", func(f *rawFile, q []byte) error {
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
							if i >= int64(len(paths)) {
								return
							}
							st, _ := os.Stat(paths[i])
							f, err := openRaw(paths[i])
							if err != nil {
								b.Error(err)
								return
							}
							if n := int(st.Size()); n > cap(buf) {
								buf = make([]byte, 0, n)
							}
							if err := c.read(f, buf[:st.Size()]); err != nil {
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

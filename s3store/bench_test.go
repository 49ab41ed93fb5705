package s3store

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/splitzip/splitzip/internal/s3test"
)

// BenchmarkGetRanges is the loopback GET rate a streamed load is held to:
// four objects on a real S3 server read by ranged GETs straight into
// memory, no files, no checksums: GETs of 8 MiB (a load's payload piece)
// 8, 16 or 32 in flight (a load has twice its readers), and of 16 and 32
// MiB, to show what a request costs. SPLITZIP_S3_BENCH_BYTES sets the
// bytes (default 1 GiB).
func BenchmarkGetRanges(b *testing.B) {
	size := s3test.BenchBytes(b, 1<<30)
	srv := s3test.Start(b)
	bucket := srv.Bucket(b, "bench")
	ctx := context.Background()
	s, err := New(ctx, URL{bucket, "get"}, Options{Endpoint: srv.Endpoint})
	if err != nil {
		b.Fatal(err)
	}
	const objects = 4
	each := size / objects
	data := random(int(min(each, 64<<20)), 3)
	for i := range objects {
		r := repeated{data, each}
		if err := s.Write(ctx, fmt.Sprint(i), r, each, nil); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct{ part, inFlight int64 }{{8 << 20, 8}, {8 << 20, 16}, {8 << 20, 32}, {16 << 20, 16}, {32 << 20, 8}, {32 << 20, 16}} {
		b.Run(fmt.Sprintf("part-%dMiB/in-flight-%d", c.part>>20, c.inFlight), func(b *testing.B) {
			b.SetBytes(objects * each)
			b.ReportAllocs()
			bufs := make(chan []byte, c.inFlight)
			for range c.inFlight {
				bufs <- make([]byte, c.part)
			}
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				var failed error
				for i := range objects {
					for off := int64(0); off < each; off += c.part {
						buf := <-bufs
						n := min(c.part, each-off)
						wg.Go(func() {
							defer func() { bufs <- buf }()
							body, err := s.Range(ctx, fmt.Sprint(i), off, n)
							if err == nil {
								_, err = io.ReadFull(body, buf[:n])
								body.Close()
							}
							if err != nil {
								mu.Lock()
								failed = err
								mu.Unlock()
							}
						})
					}
				}
				wg.Wait()
				if failed != nil {
					b.Fatal(failed)
				}
			}
		})
	}
}

// repeated is an io.ReaderAt of size bytes: data over and over.
type repeated struct {
	data []byte
	size int64
}

func (r repeated) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < r.size {
		m := copy(p[n:min(len(p), n+int(r.size-off))], r.data[off%int64(len(r.data)):])
		n += m
		off += int64(m)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

var _ io.ReaderAt = repeated{}

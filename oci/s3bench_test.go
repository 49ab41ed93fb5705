package oci

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/s3store"
)

// BenchmarkS3Pull measures, against a real S3 server on loopback, the
// time to a ready local copy of one checkpoint three ways: the raw
// safetensors shards as objects, fetched by the same ranged, read-ahead
// GETs a pull uses (raw-get: the loopback GET rate), and pulls of its
// fixed and entropy caches from OCI layouts (pull-fixed, pull-entropy:
// fetched, digest-checked and recorded), beside a pull of a cache that
// keeps every tensor raw (pull-raw: the checkpoint's bytes as an
// artifact, moved the same way); -nosync: pulls that do not flush the
// cache to disk. Every case counts the
// checkpoint's raw bytes, so MB/s compare times to ready directly; a
// compressed pull's ns/op over pull-raw's is the ratio the target (at
// most 0.8) holds. SPLITZIP_S3_BENCH_BYTES sets the checkpoint's size (default 1
// GiB).
func BenchmarkS3Pull(b *testing.B) {
	srv := s3test.Start(b)
	srv.Bucket(b, "bench")
	dir := b.TempDir()
	size := uint64(s3test.BenchBytes(b, 1<<30))
	ctx := context.Background()
	src := filepath.Join(dir, "ck")
	if _, err := synth.Write(ctx, src, synth.Config{Bytes: size, Shards: 4, Seed: 21}); err != nil {
		b.Fatal(err)
	}
	o := Options{S3: s3store.Options{Endpoint: srv.Endpoint}}
	st, err := s3store.New(ctx, s3store.URL{Bucket: "bench", Prefix: "raw"}, o.S3)
	if err != nil {
		b.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	var raw int64
	sizes := map[string]int64{}
	for _, p := range shards {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		fi, _ := f.Stat()
		if err := st.Write(ctx, filepath.Base(p), f, fi.Size(), nil); err != nil {
			b.Fatal(err)
		}
		f.Close()
		sizes[filepath.Base(p)] = fi.Size()
		raw += fi.Size()
	}
	for _, codec := range []string{pipeline.CodecFixed, pipeline.CodecEntropy, "raw"} {
		out := filepath.Join(dir, codec)
		co := pipeline.CompressOptions{Output: out, MinSaving: pipeline.DefaultMinSaving, NoSync: true, SelfContained: true, Codec: codec}
		if codec == "raw" { // every tensor raw: the checkpoint's own bytes as a cache
			co.Codec, co.MinSaving = pipeline.CodecFixed, 0.99
		}
		if _, err := pipeline.Compress(ctx, src, co); err != nil {
			b.Fatal(err)
		}
		if _, err := Push(ctx, out, "s3://bench/m:"+codec, o); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("raw-get", func(b *testing.B) {
		b.SetBytes(raw)
		b.ReportAllocs()
		for b.Loop() {
			to := filepath.Join(b.TempDir(), "raw")
			if err := os.Mkdir(to, 0o755); err != nil {
				b.Fatal(err)
			}
			// Every shard at once, each two ranged GETs ahead; a pull has
			// up to eight blobs so.
			var wg sync.WaitGroup
			errs := make([]error, len(shards))
			j := 0
			for name, n := range sizes {
				k := j
				wg.Go(func() { errs[k] = getFile(ctx, st, name, n, filepath.Join(to, name)) })
				j++
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			os.RemoveAll(to)
		}
	})
	for _, c := range []struct {
		codec  string
		noSync bool
	}{{"raw", false}, {pipeline.CodecFixed, false}, {pipeline.CodecEntropy, false}, {"raw", true}, {pipeline.CodecFixed, true}, {pipeline.CodecEntropy, true}} {
		codec, o := c.codec, o
		o.NoSync = c.noSync
		name := "pull-" + codec
		if c.noSync {
			name += "-nosync"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(raw)
			b.ReportAllocs()
			for b.Loop() {
				to := filepath.Join(b.TempDir(), "cache")
				if _, err := Pull(ctx, "s3://bench/m:"+codec, to, o); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(to)
			}
		})
	}
}

// getFile copies object name (n bytes) into the file at path.
func getFile(ctx context.Context, st *s3store.Store, name string, n int64, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	r := st.Open(ctx, name, 0, n)
	_, err = io.Copy(f, r)
	r.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

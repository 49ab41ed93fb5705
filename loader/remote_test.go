package loader

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/s3store"
)

// TestRemoteCache opens a cache in a real S3 server by its s3:// reference
// (what sz_open and Python's Cache take): every tensor reads back, decoded
// and stored, equal to its source, with no local copy; the source on
// this machine is never read for it.
func TestRemoteCache(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	ctx := context.Background()
	if _, err := synth.Write(ctx, src, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(ctx, src, pipeline.CompressOptions{Output: cache, Jobs: 2, MinSaving: 0.03, NoSync: true,
		SelfContained: true, Codec: pipeline.CodecAuto}); err != nil {
		t.Fatal(err)
	}
	ref := "s3://models/loader:v1"
	if _, err := oci.Push(ctx, cache, ref, oci.Options{S3: s3store.Options{Endpoint: srv.Endpoint}}); err != nil {
		t.Fatal(err)
	}
	// The source moves away: what reads back came from the bucket.
	if err := os.Rename(src, src+".gone"); err != nil {
		t.Fatal(err)
	}
	l, err := Open(ref, "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	compressed := 0
	for _, tn := range l.Tensors() {
		moved := tn
		moved.Shard = strings.Replace(tn.Shard, src, src+".gone", 1)
		want := source(t, &moved)
		got := make([]byte, tn.Size)
		if err := l.ReadHost(tn.Index, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: ReadHost differs from the source", tn.Name)
		}
		n, err := l.StoredSize(tn.Index)
		if err != nil {
			t.Fatal(err)
		}
		st := make([]byte, n)
		if _, err := l.ReadStored(tn.Index, st); err != nil {
			t.Fatal(err)
		}
		if err := l.DecodeHost(tn.Index, st, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: stored bytes decode to other bytes (%v)", tn.Name, err)
		}
		if tn.Compressed {
			compressed++
		}
	}
	if compressed == 0 {
		t.Fatal("no compressed tensors")
	}
	if _, err := Open("s3://models/loader:v2", ""); err == nil {
		t.Fatal("a missing tag opened")
	}
}

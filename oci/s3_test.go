package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/shardcache"
)

func TestParseLayoutRef(t *testing.T) {
	h := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct{ in, want string }{
		{"s3://models/llama", "s3://models/llama:latest"},
		{"s3://models/llama:v1", "s3://models/llama:v1"},
		{"s3://models/a/b/llama:v1.2_x-y", "s3://models/a/b/llama:v1.2_x-y"},
		{"s3://models/llama@" + h, "s3://models/llama@" + h},
		{"s3://models/llama:v1@" + h, ""}, // a tag and a digest
		{"s3://models:v1", ""},            // no prefix
		{"s3://models/llama:-v", ""},
		{"s3://models/llama:", ""},
		{"s3://models/llama@sha256:12", ""},
		{"s3://models/llama@md5:" + strings.Repeat("ab", 16), ""},
		{"s3://models/a:b/c:d", ""},
		{"s3://models/llama:a b", ""},
	} {
		r, err := parseLayoutRef(c.in)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%s: parsed as %s", c.in, r)
		case c.want == "" && !errors.Is(err, s3store.ErrURL) && !errors.Is(err, ErrLayoutRef):
			t.Errorf("%s: %v, want s3store.ErrURL or ErrLayoutRef (a usage error)", c.in, err)
		case c.want != "" && (err != nil || r.String() != c.want):
			t.Errorf("%s: %s, %v; want %s", c.in, r, err, c.want)
		}
	}
}

// s3Options points a push or pull at srv, with the smallest parts S3
// allows so that the test's blobs take several ranged GETs.
func s3Options(srv *s3test.Server) Options {
	o := opts()
	o.S3 = s3store.Options{Endpoint: srv.Endpoint, PartSize: s3store.MinPartSize}
	return o
}

// TestS3PushPull: a cache pushed to a real S3 server as an OCI layout and
// pulled back is the same cache; pushing again uploads nothing and
// pulling again downloads nothing; tags and digests find manifests; two
// tags pushed at once both land; the layout is one OCI tools read.
func TestS3PushPull(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	o := s3Options(srv)
	ctx := context.Background()
	dir := t.TempDir()
	cache := compress(t, filepath.Join(dir, "a"), synth.Config{Bytes: 64 << 20, Hidden: 2048, Shards: 2, Seed: 3})
	ref := "s3://models/team/mix:v1"
	pr, err := Push(ctx, cache, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Uploaded != pr.Blobs || pr.UploadedBytes+uint64(0) == 0 || !strings.HasPrefix(pr.Digest, "sha256:") || pr.Ref != ref {
		t.Errorf("first push: %+v", pr)
	}
	again, err := Push(ctx, cache, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Uploaded != 0 || again.UploadedBytes != 0 || again.Digest != pr.Digest {
		t.Errorf("second push: %+v", again)
	}
	out := filepath.Join(dir, "pulled")
	res, err := Pull(ctx, ref, out, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != res.Blobs || res.Digest != pr.Digest || len(res.Sources) != 1 {
		t.Errorf("pull: %+v", res)
	}
	sameCache(t, cache, out)
	res, err = Pull(ctx, "s3://models/team/mix@"+pr.Digest, out, o)
	if err != nil || res.Fetched != 0 {
		t.Fatalf("pull by digest into the pulled cache: %+v, %v", res, err)
	}
	if _, err := Pull(ctx, "s3://models/team/mix:v9", filepath.Join(dir, "none"), o); !errors.Is(err, ErrNoTag) {
		t.Fatalf("pull of a missing tag: %v", err)
	}
	if _, err := Pull(ctx, "s3://models/other:v1", filepath.Join(dir, "none"), o); !errors.Is(err, ErrNoTag) {
		t.Fatalf("pull from a prefix with no layout: %v", err)
	}

	// Two tags at once: the index's conditional writes keep both.
	other := compress(t, filepath.Join(dir, "b"), synth.Config{Mix: 20, Shards: 1, Seed: 4})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			c := cache
			if i%2 == 1 {
				c = other
			}
			_, errs[i] = Push(ctx, c, "s3://models/team/mix:t"+string(rune('a'+i)), o)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(srv.Root, "models", "team", "mix", layoutIndex))
	if err != nil {
		t.Fatal(err)
	}
	var ix v1.IndexManifest
	if err := json.Unmarshal(raw, &ix); err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, m := range ix.Manifests {
		tags[m.Annotations[RefAnnotation]] = m.Digest.String()
		if m.ArtifactType != ArtifactType {
			t.Errorf("manifest %s: artifact type %q", m.Digest, m.ArtifactType)
		}
		if _, err := os.Stat(filepath.Join(srv.Root, "models", "team", "mix", "blobs", "sha256", m.Digest.Hex)); err != nil {
			t.Errorf("manifest blob: %v", err)
		}
	}
	if len(tags) != 5 || tags["v1"] != pr.Digest || tags["ta"] != pr.Digest || tags["tb"] == pr.Digest {
		t.Errorf("index tags: %v", tags)
	}
	if b, err := os.ReadFile(filepath.Join(srv.Root, "models", "team", "mix", layoutMarker)); err != nil || !strings.Contains(string(b), `"1.0.0"`) {
		t.Errorf("oci-layout: %q, %v", b, err)
	}
}

// cutS3 is a transport to the S3 server that cuts GET bodies and answers
// 503 and 429 where a test asks it to.
type cutS3 struct {
	gets  atomic.Int64
	cutAt map[int64]int64 // GET number: bytes before the cut
	fail  map[int64]int   // GET number: status
}

func (c *cutS3) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		return http.DefaultTransport.RoundTrip(r)
	}
	n := c.gets.Add(1)
	if st, ok := c.fail[n]; ok {
		return &http.Response{StatusCode: st, Status: http.StatusText(st), Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if cut, ok := c.cutAt[n]; ok && err == nil {
		resp.Body = s3test.CutBody(resp.Body, cut)
	}
	return resp, err
}

// TestS3PullFaults: cut bodies, 503 and 429 answers are ridden out; a blob
// whose stored bytes changed fails the pull, and so does a server that
// disappears mid-pull, each leaving a cache with no sources, which a pull
// after the server is back (and the blob mended) completes.
func TestS3PullFaults(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	ctx := context.Background()
	dir := t.TempDir()
	cache := compress(t, filepath.Join(dir, "a"), synth.Config{Bytes: 48 << 20, Hidden: 2048, Shards: 2, Seed: 8})
	ref := "s3://models/faults:v1"
	if _, err := Push(ctx, cache, ref, s3Options(srv)); err != nil {
		t.Fatal(err)
	}

	o := s3Options(srv)
	cut := &cutS3{cutAt: map[int64]int64{3: 1000, 5: 70000, 9: 1}, fail: map[int64]int{4: 503, 7: 429}}
	o.S3.HTTPClient = &http.Client{Transport: cut}
	out := filepath.Join(dir, "cut")
	if _, err := Pull(ctx, ref, out, o); err != nil {
		t.Fatalf("pull through cuts and throttling: %v", err)
	}
	sameCache(t, cache, out)

	// A stored blob's bytes changed (same size): the pull refuses it.
	blobs, _ := filepath.Glob(filepath.Join(srv.Root, "models", "faults", "blobs", "sha256", "*"))
	var victim string
	var size int64
	for _, b := range blobs {
		if fi, err := os.Stat(b); err == nil && fi.Size() > size {
			victim, size = b, fi.Size()
		}
	}
	good, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x40
	if err := os.WriteFile(victim, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(dir, "damaged")
	_, err = Pull(ctx, ref, out, s3Options(srv))
	if !errors.Is(err, ErrBlob) {
		t.Fatalf("pull of a damaged blob: %v, want ErrBlob", err)
	}
	// It names the reference and how to replace the store's copy.
	if msg := err.Error(); !strings.HasPrefix(msg, "pull "+ref+": ") || !strings.Contains(msg, "/models/faults/blobs/sha256/HEX) and push again") {
		t.Errorf("pull of a damaged blob: %q", msg)
	}
	noSources(t, out)
	if err := os.WriteFile(victim, good, 0o644); err != nil {
		t.Fatal(err)
	}

	// The server disappears mid-pull, then comes back.
	out = filepath.Join(dir, "stopped")
	o = s3Options(srv)
	o.Jobs = 1
	o.S3.MaxAttempts = 1
	stop := &stopAfter{n: 1 << 20, stop: srv.Stop}
	o.Progress = stop
	if _, err := Pull(ctx, ref, out, o); err == nil {
		t.Fatal("a pull from a server that stopped succeeded")
	}
	noSources(t, out)
	srv.Restart(t)
	res, err := Pull(ctx, ref, out, s3Options(srv))
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched == 0 || res.Fetched >= res.Blobs {
		t.Errorf("resumed pull fetched %d of %d files", res.Fetched, res.Blobs)
	}
	sameCache(t, cache, out)
}

// noSources fails t if the cache in dir (if any) records a source: a
// pull that failed must leave nothing that verify or a load accepts as
// the checkpoint.
func noSources(t *testing.T, dir string) {
	t.Helper()
	c, err := shardcache.Open(dir)
	if err != nil {
		return // no cache at all
	}
	if n := len(c.Index().Sources); n != 0 {
		t.Fatalf("a failed pull left %d sources in %s", n, dir)
	}
}

// TestS3Open: a cache opened in place (no local copy) reads every object
// as the pushed cache holds it, through cut bodies, throttling and a 503;
// a read past a blob's end is refused.
func TestS3Open(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	ctx := context.Background()
	dir := t.TempDir()
	cache := compress(t, filepath.Join(dir, "a"), synth.Config{Mix: 80, Shards: 2, Seed: 13})
	ref := "s3://models/open:v1"
	if _, err := Push(ctx, cache, ref, s3Options(srv)); err != nil {
		t.Fatal(err)
	}
	o := s3Options(srv)
	o.S3.HTTPClient = &http.Client{Transport: &cutS3{cutAt: map[int64]int64{4: 100, 9: 5000}, fail: map[int64]int{6: 503, 12: 429}}}
	rc, err := Open(ctx, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	if !rc.Remote() {
		t.Fatal("an opened reference is not a remote cache")
	}
	local, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	remote := shardcache.NewObjectFiles(rc)
	defer remote.Close()
	n := 0
	for k, obj := range local.Index().Objects {
		if obj.Kind == shardcache.KindPack {
			continue
		}
		want, _, err := local.ReadObject(k)
		if err != nil {
			t.Fatal(err)
		}
		loc, _, err := rc.Locate(k)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if err := remote.ReadAt(loc, got, 0); err != nil {
			t.Fatalf("object %s: %v", k, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("object %s differs", k)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no object read")
	}
	if _, err := rc.FilePath(shardcache.Key("x")); !errors.Is(err, shardcache.ErrRemote) {
		t.Errorf("FilePath of a remote cache: %v", err)
	}
	if _, err := Open(ctx, "s3://models/open:v2", s3Options(srv)); !errors.Is(err, ErrNoTag) {
		t.Errorf("Open of a missing tag: %v", err)
	}
}

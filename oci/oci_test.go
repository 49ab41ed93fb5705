package oci

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/silent"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
)

// compress writes the checkpoint cfg describes and its self-contained
// cache under dir, and returns the cache's folder.
func compress(t testing.TB, dir string, cfg synth.Config) string {
	t.Helper()
	src, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), src, cfg); err != nil {
		t.Fatal(err)
	}
	compressTo(t, src, out)
	return out
}

// compressTo compresses the checkpoint in src into a self-contained
// cache at out.
func compressTo(t testing.TB, src, out string) {
	t.Helper()
	opts := pipeline.CompressOptions{Output: out, Jobs: 2, MinSaving: pipeline.DefaultMinSaving, NoSync: true, SelfContained: true}
	if _, err := pipeline.Compress(context.Background(), src, opts); err != nil {
		t.Fatal(err)
	}
}

// faults is an in-process registry (go-containerregistry's) behind a
// handler that counts blob uploads and downloads and injects faults.
type faults struct {
	reg       http.Handler
	uploads   atomic.Int64 // blob upload sessions started (POST)
	downloads atomic.Int64 // blob GETs
	// After okN more blob GETs (when okN is not negative), fail answers
	// the next failN ones with its status; corrupt flips a byte of every
	// blob GET's body.
	okN     atomic.Int64
	fail    atomic.Int64
	failN   atomic.Int64
	corrupt atomic.Bool
}

func (f *faults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	blob := strings.Contains(r.URL.Path, "/blobs/")
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/blobs/uploads/"):
		f.uploads.Add(1)
	case r.Method == http.MethodGet && blob:
		f.downloads.Add(1)
		if code := f.fail.Load(); code != 0 && f.okN.Add(-1) < 0 && f.failN.Add(-1) >= 0 {
			w.WriteHeader(int(code))
			return
		}
		if f.corrupt.Load() {
			rec := httptest.NewRecorder()
			f.reg.ServeHTTP(rec, r)
			b := rec.Body.Bytes()
			if len(b) > 0 {
				b[len(b)/2] ^= 1
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(b)
			return
		}
	}
	f.reg.ServeHTTP(w, r)
}

// cutBody answers r as h would, with a Content-Length of the whole blob,
// and closes the connection after half of it.
func cutBody(h http.Handler, w http.ResponseWriter, r *http.Request) { cutBodyAt(h, w, r, -1) }

// cutBodyAt is cutBody cutting after n bytes (-1: half); a body of n
// bytes or fewer is sent whole.
func cutBodyAt(h http.Handler, w http.ResponseWriter, r *http.Request, n int) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	b := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(rec.Code)
	if n < 0 {
		n = len(b) / 2
	}
	if n >= len(b) {
		w.Write(b)
		return
	}
	w.Write(b[:n])
	w.(http.Flusher).Flush()
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

func serve(t *testing.T) (*faults, string) {
	t.Helper()
	f := &faults{reg: registry.New(registry.Logger(nopLogger()))}
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return f, strings.TrimPrefix(s.URL, "http://")
}

func opts() Options { return Options{Insecure: true, Keychain: authn.NewMultiKeychain(), Jobs: 4} }

// sameCache fails t unless the caches in a and b hold the same index
// sources and object files, byte for byte.
func sameCache(t *testing.T, a, b string) {
	t.Helper()
	ca, err := shardcache.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	cb, err := shardcache.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if err := cb.CheckSelfContained(); err != nil {
		t.Fatal(err)
	}
	files, _ := ca.Index().Files()
	for _, k := range files {
		pa, _ := ca.FilePath(k)
		pb, _ := cb.FilePath(k)
		ba, err := os.ReadFile(pa)
		if err != nil {
			t.Fatal(err)
		}
		bb, err := os.ReadFile(pb)
		if err != nil {
			t.Fatalf("pulled cache lacks %s: %v", k, err)
		}
		if !bytes.Equal(ba, bb) {
			t.Fatalf("object %s differs", k)
		}
	}
	if len(cb.Index().Sources) != len(ca.Index().Sources) {
		t.Fatalf("%d sources pulled, want %d", len(cb.Index().Sources), len(ca.Index().Sources))
	}
	for _, s := range ca.Index().Sources {
		for _, sh := range s.Shards {
			for _, tn := range sh.Tensors {
				hit, err := cb.LookupName(tn.Name, "")
				if err != nil || hit.Tensor.Key != tn.Key {
					t.Fatalf("tensor %s: %v", tn.Name, err)
				}
			}
		}
	}
}

// TestPushPull: a cache pushed and pulled is the same cache; pushing it
// again uploads no blob, and pulling it again downloads none.
func TestPushPull(t *testing.T) {
	f, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 60, Shards: 2, Seed: 3})
	ref := host + "/models/mix:v1"
	pr, err := Push(context.Background(), cache, ref, opts())
	if err != nil {
		t.Fatal(err)
	}
	if pr.Uploaded != pr.Blobs || pr.UploadedBytes == 0 || !strings.HasPrefix(pr.Digest, "sha256:") {
		t.Errorf("first push: %+v", pr)
	}
	up := f.uploads.Load()
	again, err := Push(context.Background(), cache, ref, opts())
	if err != nil {
		t.Fatal(err)
	}
	if again.Uploaded != 0 || f.uploads.Load() != up || again.Digest != pr.Digest {
		t.Errorf("second push uploaded %d blobs (%d sessions): %+v", again.Uploaded, f.uploads.Load()-up, again)
	}
	out := filepath.Join(dir, "pulled")
	res, err := Pull(context.Background(), ref, out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != res.Blobs || res.Digest != pr.Digest || len(res.Sources) != 1 {
		t.Errorf("pull: %+v", res)
	}
	sameCache(t, cache, out)
	down := f.downloads.Load()
	res, err = Pull(context.Background(), ref, out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 0 || f.downloads.Load()-down != 1 { // the index only
		t.Errorf("second pull fetched %d blobs, %d GETs", res.Fetched, f.downloads.Load()-down)
	}
	// A copy here that is damaged (its size kept) is not the blob: the
	// next pull fetches it again and the cache is whole.
	var largest string
	var size int64
	filepath.Walk(filepath.Join(out, "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Size() > size {
			largest, size = p, info.Size()
		}
		return nil
	})
	b, _ := os.ReadFile(largest)
	b[len(b)/2] ^= 0x40
	os.WriteFile(largest, b, 0o644)
	res, err = Pull(context.Background(), ref, out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 1 {
		t.Errorf("pull over a damaged copy fetched %d blobs, want 1", res.Fetched)
	}
	if len(res.Mended) != 1 || !strings.Contains(res.Mended[0].Error, filepath.Base(largest)) || !strings.Contains(res.Mended[0].Error, "sha256:") {
		t.Errorf("pull over a damaged copy reports it mended as %+v", res.Mended)
	}
	sameCache(t, cache, out)
	// One cut short is mended the same way, and said to be.
	os.Truncate(largest, size/2)
	if res, err = Pull(context.Background(), ref, out, opts()); err != nil || res.Fetched != 1 || len(res.Mended) != 1 || !strings.Contains(res.Mended[0].Error, "bytes") {
		t.Errorf("pull over a cut copy: fetched %d, mended %+v, %v", res.Fetched, res.Mended, err)
	}
	sameCache(t, cache, out)
	if res, err = Pull(context.Background(), ref, out, opts()); err != nil || res.Fetched != 0 || len(res.Mended) != 0 {
		t.Errorf("a pull into the mended cache: fetched %d, mended %+v, %v", res.Fetched, res.Mended, err)
	}
	// A byte of a pack member: one damaged pack, not the pack and its
	// member counted apart.
	c, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	var member *shardcache.Object
	var memberKey shardcache.Key
	for k, o := range c.Index().Objects {
		// A payload member, which a pull without a payload check (as
		// here) trusts as held: its pack was then never fetched again.
		if o.Pack != "" && o.Kind != shardcache.KindRaw {
			member, memberKey = o, k
			break
		}
	}
	if member == nil {
		c.Close()
		t.Fatal("no payload among the pulled cache's pack members")
	}
	cachetest.Flip(t, c, memberKey, int64(member.Size/2), 0x40) // the pull mends it
	c.Close()
	res, err = Pull(context.Background(), ref, out, opts())
	if err != nil || res.Fetched != 1 || len(res.Mended) != 1 || res.Mended[0].Key != member.Pack {
		t.Errorf("pull over a damaged pack member: fetched %d, mended %+v (want the pack %s alone), %v", res.Fetched, res.Mended, member.Pack, err)
	}
	sameCache(t, cache, out)
}

// TestDedupe: a checkpoint sharing most tensors with one pushed before
// pushes only its new files, and a pull into the cache holding the first
// fetches only those.
func TestDedupe(t *testing.T) {
	f, host := serve(t)
	dir := t.TempDir()
	base := compress(t, filepath.Join(dir, "a"), synth.Config{Mix: 80, Shards: 1, Seed: 5})
	if _, err := Push(context.Background(), base, host+"/m/base:1", opts()); err != nil {
		t.Fatal(err)
	}
	// The tune: the same checkpoint with one shard's first tensor changed.
	src := filepath.Join(dir, "b", "ck")
	if _, err := synth.Write(context.Background(), src, synth.Config{Mix: 80, Shards: 1, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(src)
	var shard string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			shard = filepath.Join(src, e.Name())
		}
	}
	b, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0x10 // a value of the last tensor
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tune := filepath.Join(dir, "b", "cache")
	compressTo(t, src, tune)
	pr, err := Push(context.Background(), tune, host+"/m/tune:1", opts())
	if err != nil {
		t.Fatal(err)
	}
	if pr.Uploaded == 0 || pr.UploadedBytes*2 > pr.Bytes {
		t.Errorf("the tune uploaded %d of %d blobs, %d of %d bytes", pr.Uploaded, pr.Blobs, pr.UploadedBytes, pr.Bytes)
	}
	out := filepath.Join(dir, "pulled")
	if _, err := Pull(context.Background(), host+"/m/base:1", out, opts()); err != nil {
		t.Fatal(err)
	}
	res, err := Pull(context.Background(), host+"/m/tune:1", out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched == 0 || res.FetchedBytes*2 > res.Bytes {
		t.Errorf("the tune's pull fetched %d of %d blobs, %d of %d bytes", res.Fetched, res.Blobs, res.FetchedBytes, res.Bytes)
	}
	c, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Index().Sources) != 2 {
		t.Errorf("%d sources after pulling both", len(c.Index().Sources))
	}
	_ = f
}

// TestPullFaults: a blob whose bytes are not its digest's fails the pull
// naming it, and leaves no source in the cache; a pull cut off by
// server errors resumes, fetching only what it lacked; a transient 503 is
// retried.
func TestPullFaults(t *testing.T) {
	f, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 60, Shards: 2, Seed: 7})
	ref := host + "/models/mix:v1"
	pr, err := Push(context.Background(), cache, ref, opts())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pulled")

	f.corrupt.Store(true)
	_, err = Pull(context.Background(), ref, out, opts())
	f.corrupt.Store(false)
	if err == nil {
		t.Fatal("a corrupt blob was accepted")
	}
	if c, oerr := shardcache.Open(out); oerr == nil {
		c.Close()
		if len(c.Index().Sources) != 0 {
			t.Fatalf("a failed pull left a cache with sources: %v", c.Index().Sources)
		}
	}

	// After the index and two objects every blob GET fails: the pull
	// stops keeping those two; run again with one 503 on the way (retried),
	// it fetches only the rest.
	o := opts()
	o.Jobs = 1
	f.okN.Store(3)
	f.failN.Store(1 << 30)
	f.fail.Store(http.StatusInternalServerError)
	_, err = Pull(context.Background(), ref, out, o)
	if err == nil {
		t.Fatal("a pull whose blobs failed succeeded")
	}
	// gc keeps what the unfinished pull fetched, for the next pull (its
	// pin says whose they are); a dry run of gc --unfinished would let
	// them go.
	w, err := shardcache.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	g, err := w.GC(context.Background(), shardcache.GCOptions{})
	w.Close()
	if err != nil || g.Pinned != 2 || g.Objects != 0 || len(g.Pins) != 1 || !strings.Contains(g.Pins[0].Note, "/models/mix:v1") {
		t.Fatalf("gc after an unfinished pull: %+v, %v; want its 2 objects kept by its pin", g, err)
	}
	if dry, err := shardcache.DryRunGC(context.Background(), out, shardcache.GCOptions{DropPins: true}); err != nil || dry.Objects != 2 || dry.Pinned != 0 || len(dry.Dropped) != 1 {
		t.Fatalf("dry run of gc --unfinished: %+v, %v; want the 2 objects", dry, err)
	}
	f.okN.Store(1)
	f.failN.Store(1)
	f.fail.Store(http.StatusServiceUnavailable)
	res, err := Pull(context.Background(), ref, out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != pr.Blobs-2 {
		t.Errorf("resumed pull fetched %d of %d objects, want all but the 2 kept", res.Fetched, pr.Blobs)
	}
	sameCache(t, cache, out)
	if ents, err := os.ReadDir(filepath.Join(out, shardcache.PinsDir)); err != nil || len(ents) != 0 {
		t.Errorf("the finished pull left pins %v (%v)", ents, err)
	}
}

// TestPullCutAndThrottled: a blob whose connection is cut half way is
// resumed in the same pull, from the byte it stopped at (a Range GET);
// a blob cut every time fails the pull with an error naming it, keeping
// no checkpoint; the pull run again resumes, and a registry's 429 (too
// many requests) on the way is waited out and retried, as 503 is.
func TestPullCutAndThrottled(t *testing.T) {
	f, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 60, Shards: 2, Seed: 8})
	if _, err := Push(context.Background(), cache, host+"/models/cut:v1", opts()); err != nil {
		t.Fatal(err)
	}
	// The third blob GET is cut (the index and one object arrive whole);
	// with cutAll, every GET of that blob.
	var gets, ranged atomic.Int64
	var cutPath atomic.Value
	var cutAll atomic.Bool
	var chunk atomic.Int64  // where set, every blob GET is cut after so many bytes
	var refuse atomic.Int64 // so many ranged GETs are closed unanswered (a server gone for a moment)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			if r.Header.Get("Range") != "" {
				ranged.Add(1)
				if refuse.Add(-1) >= 0 {
					if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
						conn.Close()
					}
					return
				}
			}
			if n := chunk.Load(); n > 0 {
				cutBodyAt(f.reg, w, r, int(n))
				return
			}
			if gets.Add(1) == 3 {
				cutPath.Store(r.URL.Path)
			}
			if p, _ := cutPath.Load().(string); p == r.URL.Path && (cutAll.Load() || gets.Load() == 3) {
				cutBody(f.reg, w, r)
				return
			}
		}
		f.ServeHTTP(w, r)
	}))
	defer s.Close()
	ref := strings.TrimPrefix(s.URL, "http://") + "/models/cut:v1"
	o := opts()
	o.Jobs = 1
	// The resume finds the server gone twice, then back.
	refuse.Store(2)
	pr, err := Pull(context.Background(), ref, filepath.Join(dir, "resumed"), o)
	if err != nil {
		t.Fatalf("a pull with one blob cut half way, then the server gone for two requests: %v", err)
	}
	if ranged.Load() != 3 {
		t.Errorf("%d range requests, want the 3 that resume the cut blob", ranged.Load())
	}
	refuse.Store(0)
	sameCache(t, cache, filepath.Join(dir, "resumed"))

	// A link that drops every 64 KiB: each body brings bytes before it
	// breaks, so the pull goes on however many times its largest blob
	// is resumed (a count of resumes in all failed it).
	chunk.Store(64 << 10)
	ranged.Store(0)
	if _, err := Pull(context.Background(), ref, filepath.Join(dir, "dropping"), o); err != nil {
		t.Fatalf("a pull over a link that drops every 64 KiB: %v", err)
	}
	if ranged.Load() <= resumeTries {
		t.Errorf("%d range requests: the blobs are too small to test resuming more than %d times", ranged.Load(), resumeTries)
	}
	// One that drops after a few bytes fails the pull after a few
	// requests a blob, rather than asking a byte at a time.
	chunk.Store(100)
	ranged.Store(0)
	if _, err := Pull(context.Background(), ref, filepath.Join(dir, "trickle"), o); err == nil {
		t.Error("a pull over a link that drops every 100 bytes succeeded")
	}
	if n := ranged.Load(); n > 2*resumeTries*int64(o.Jobs+1) {
		t.Errorf("%d range requests over a link that drops every 100 bytes", n)
	}
	chunk.Store(0)
	sameCache(t, cache, filepath.Join(dir, "dropping"))

	out := filepath.Join(dir, "pulled")
	gets.Store(0)
	cutAll.Store(true)
	_, err = Pull(context.Background(), ref, out, o)
	if err == nil {
		t.Fatal("a pull whose blob was cut every time succeeded")
	}
	if !strings.Contains(err.Error(), "blob sha256:") {
		t.Errorf("the error does not name the blob: %v", err)
	}
	c, oerr := shardcache.Open(out)
	if oerr != nil {
		t.Fatal(oerr)
	}
	c.Close() // its index is all this reads
	if len(c.Index().Sources) != 0 {
		t.Fatalf("a cut pull left a checkpoint in the cache: %v", c.Index().Sources)
	}
	// What verify and load then say: the pull is to be run again.
	if err := c.RequireCheckpoint(); !errors.Is(err, shardcache.ErrNoCheckpoint) || !strings.Contains(err.Error(), "unfinished pull of") || !strings.Contains(err.Error(), "run the pull again") {
		t.Errorf("a cache a cut pull left: %v", err)
	}
	kept, _ := c.Index().Files()
	if len(kept) != 1 {
		t.Errorf("the cut pull kept %d objects, want the 1 that arrived whole", len(kept))
	}

	cutAll.Store(false)
	cutPath.Store("")
	f.okN.Store(1)
	f.failN.Store(1)
	f.fail.Store(http.StatusTooManyRequests)
	res, err := Pull(context.Background(), ref, out, opts())
	f.fail.Store(0)
	if err != nil {
		t.Fatalf("a pull with one 429 on the way: %v", err)
	}
	if f.failN.Load() >= 0 {
		t.Error("the 429 was never answered")
	}
	if res.Fetched != pr.Blobs-len(kept) {
		t.Errorf("resumed pull fetched %d of %d objects, want all but the %d kept", res.Fetched, pr.Blobs, len(kept))
	}
	sameCache(t, cache, out)
}

// TestPushRefusesCacheWithSource: a cache that needs its source is not
// pushed (a pulled copy could not load).
func TestPushRefusesCacheWithSource(t *testing.T) {
	_, host := serve(t)
	dir := t.TempDir()
	src, out := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), src, synth.Config{Mix: 40, Shards: 1, Seed: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: out, Jobs: 2, MinSaving: 0.5, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	// The source is there: the cache is refused all the same, as one
	// whose tensors are only in it (not as one whose source is missing).
	for _, ref := range []string{host + "/m/x:1", "oci://" + host + "/m/x:1"} {
		_, err := Push(context.Background(), out, ref, opts())
		if !errors.Is(err, shardcache.ErrNotSelfContained) || errors.Is(err, shardcache.ErrSourceMissing) || !strings.Contains(err.Error(), "--self-contained") {
			t.Fatalf("push of a cache needing its source to %s: %v", ref, err)
		}
	}
}

// putImage tags an image manifest, not a splitzip cache's, as m/x:1 in
// the registry at host.
func putImage(t *testing.T, host string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+host+"/v2/m/x/manifests/1", strings.NewReader(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"},"layers":[]}`))
	req.Header.Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestPullNotArtifact: an image that is not a splitzip cache is refused.
func TestPullNotArtifact(t *testing.T) {
	_, host := serve(t)
	putImage(t, host)
	if _, err := Pull(context.Background(), host+"/m/x:1", filepath.Join(t.TempDir(), "c"), opts()); !errors.Is(err, ErrNotArtifact) {
		t.Fatalf("pull of an image: %v", err)
	}
}

// TestStat: Stat of a reference that names nothing yet is ErrNotFound (a
// new repository, a new tag of one, a new layout, a new tag of one); of
// a pushed cache it gives the push's digest, blobs and checkpoints, and
// the reference by digest, which names it after the tag moves on; of an
// image, ErrNotArtifact. On the in-process registry and an S3 layout.
func TestStat(t *testing.T) {
	ctx := context.Background()
	cache := compress(t, t.TempDir(), synth.Config{Bytes: 1 << 20, Shards: 2, Seed: 5})
	other := compress(t, t.TempDir(), synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 6})
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (repo string, o Options)
	}{
		{"registry", func(t *testing.T) (string, Options) { _, host := serve(t); return host + "/m/x", opts() }},
		{"s3", func(t *testing.T) (string, Options) {
			srv := s3test.Start(t)
			srv.Bucket(t, "models")
			return "s3://models/x", s3Options(srv)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo, o := c.start(t)
			if _, err := Stat(ctx, repo+":v1", o); !errors.Is(err, ErrNotFound) {
				t.Fatalf("stat of a new repository: %v", err)
			}
			pr, err := Push(ctx, cache, repo+":v1", o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Stat(ctx, repo+":v2", o); !errors.Is(err, ErrNotFound) {
				t.Errorf("stat of a new tag: %v", err)
			}
			a, err := Stat(ctx, repo+":v1", o)
			if err != nil || a.Digest != pr.Digest || a.Blobs != pr.Blobs || len(a.Sources) != 1 || a.ByDigest != repo+"@"+pr.Digest {
				t.Errorf("stat of the pushed tag: %+v, %v; push %+v", a, err, pr)
			}
			// The artifact by digest, after the tag moved on.
			if _, err := Push(ctx, other, repo+":v1", o); err != nil {
				t.Fatal(err)
			}
			if b, err := Stat(ctx, a.ByDigest, o); err != nil || b.Digest != a.Digest {
				t.Errorf("stat by digest after the tag moved: %+v, %v", b, err)
			}
		})
	}
	_, host := serve(t)
	putImage(t, host)
	if _, err := Stat(ctx, host+"/m/x:1", opts()); !errors.Is(err, ErrNotArtifact) || errors.Is(err, ErrNotFound) {
		t.Errorf("stat of an image: %v", err)
	}
}

// TestPullKilledBeforeCommit: a pull killed before its first commit
// leaves whole files in place, no index, and its pin: gc refuses the
// folder, naming the pull, and removes nothing; the pull run again adopts
// the files whose bytes are their blobs and fetches only the rest.
func TestPullKilledBeforeCommit(t *testing.T) {
	f, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 60, Shards: 2, Seed: 8})
	ref := host + "/models/killed:v1"
	pr, err := Push(context.Background(), cache, ref, opts())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pulled")
	o := opts()
	o.Jobs = 1
	f.okN.Store(3) // the index and two files, then every blob GET fails
	f.failN.Store(1 << 30)
	f.fail.Store(http.StatusInternalServerError)
	if _, err := Pull(context.Background(), ref, out, o); err == nil {
		t.Fatal("a pull whose blobs failed succeeded")
	}
	f.fail.Store(0)
	// What a kill before the commit leaves: the files, the pin, no index.
	for _, name := range []string{shardcache.IndexName, shardcache.BackupName} {
		if err := os.Remove(filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := shardcache.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.GC(context.Background(), shardcache.GCOptions{})
	w.Close()
	if !errors.Is(err, shardcache.ErrNotCache) || !strings.Contains(err.Error(), "an unfinished pull of") || !strings.Contains(err.Error(), "run the pull again") {
		t.Fatalf("gc of a pull killed before its first commit: %v", err)
	}
	res, err := Pull(context.Background(), ref, out, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != pr.Blobs-2 {
		t.Errorf("the pull run again fetched %d of %d files, want all but the 2 in place", res.Fetched, pr.Blobs)
	}
	sameCache(t, cache, out)
}

// TestPulledRoots: a pull records a checkpoint under the cache's own
// checkpoints/ folder (PulledRoot), whatever lies at the folder it was
// compressed from on the pushing machine: a file there of the recorded
// size and time but other bytes is not read in the cache's stead, and
// the cache verifies; a cache's own checkpoint of that path stays beside
// it. A pull of another version of it replaces it, and says so; the
// same pull again replaces nothing. With KeepRoots the checkpoint keeps
// its folder and replaces the cache's own of that path (two machines
// compressing from /data/model), as compress -o onto a tag needs.
func TestPulledRoots(t *testing.T) {
	_, host := serve(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	mine, theirs, theirs2 := filepath.Join(dir, "mine"), filepath.Join(dir, "theirs"), filepath.Join(dir, "theirs2")
	var shard string
	var mtime time.Time
	for _, c := range []struct {
		seed  uint64
		cache string
	}{{1, theirs}, {3, theirs2}, {2, mine}} {
		os.RemoveAll(src)
		if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: c.seed}); err != nil {
			t.Fatal(err)
		}
		if c.seed == 1 {
			shard = filepath.Join(src, "model.safetensors")
			st, err := os.Stat(shard)
			if err != nil {
				t.Fatal(err)
			}
			mtime = st.ModTime()
		}
		compressTo(t, src, c.cache)
	}
	// Another checkpoint of the same size lies where theirs was
	// compressed, with its time.
	if err := os.Chtimes(shard, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	ref := host + "/models/theirs:v1"
	if _, err := Push(context.Background(), theirs, ref, opts()); err != nil {
		t.Fatal(err)
	}
	res, err := Pull(context.Background(), ref, mine, opts())
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(mine)
	root := shardcache.PulledRoot(abs, src)
	if len(res.Replaced) != 0 || len(res.Sources) != 1 || filepath.Dir(res.Sources[0]) != root {
		t.Fatalf("pull beside a checkpoint of the folder it was compressed from: replaced %q, sources %q, want one under %s", res.Replaced, res.Sources, root)
	}
	c, err := shardcache.Open(mine)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Index().Sources); n != 2 {
		t.Errorf("%d checkpoints, want the cache's own and the pulled one", n)
	}
	pulled, err := c.PickSource(root)
	if err != nil {
		t.Fatal(err)
	}
	sh := &pulled.Shards[0]
	if present, err := c.SourcePresent(sh, filepath.Join(pulled.Root, sh.Name)); present || err != nil {
		t.Errorf("the pulled checkpoint's source: present %v, %v; want absent", present, err)
	}
	c.Close()
	vr, err := pipeline.Verify(context.Background(), mine, pipeline.VerifyOptions{Source: root, Jobs: 2})
	if err != nil || !vr.OK() {
		t.Fatalf("verify of the pulled checkpoint: %v, %+v", err, vr)
	}
	if len(vr.Absent) != 0 {
		t.Errorf("verify lists a pulled checkpoint's files as absent: %q", vr.Absent)
	}
	// Named by the folder it was compressed from, where other files lie
	// now, in a cache of it alone: its record, not those files taken for
	// a moved copy.
	fresh := filepath.Join(dir, "fresh")
	if _, err := Pull(context.Background(), ref, fresh, opts()); err != nil {
		t.Fatal(err)
	}
	c, err = shardcache.Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	freshAbs, _ := filepath.Abs(fresh)
	if s, err := c.PickSource(src); err != nil || s.Root != shardcache.PulledRoot(freshAbs, src) {
		t.Errorf("PickSource(%s) of a pulled cache: %v; want its record under checkpoints/", src, err)
		if err == nil {
			t.Logf("root %s", s.Root)
		}
	}
	c.Close()
	if res, err = Pull(context.Background(), ref, mine, opts()); err != nil || len(res.Replaced) != 0 {
		t.Errorf("the same pull again: replaced %q, %v", res.Replaced, err)
	}
	ref2 := host + "/models/theirs:v2"
	if _, err := Push(context.Background(), theirs2, ref2, opts()); err != nil {
		t.Fatal(err)
	}
	if res, err = Pull(context.Background(), ref2, mine, opts()); err != nil || len(res.Replaced) != 1 || res.Replaced[0] != res.Sources[0] {
		t.Errorf("a pull of another version: replaced %q, sources %q, %v", res.Replaced, res.Sources, err)
	}

	kept := filepath.Join(dir, "kept")
	compressTo(t, src, kept) // the cache's own checkpoint of src
	o := opts()
	o.KeepRoots = true
	res, err = Pull(context.Background(), ref, kept, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replaced) != 1 || res.Replaced[0] != res.Sources[0] || filepath.Dir(res.Sources[0]) != src {
		t.Errorf("a pull keeping roots over a checkpoint of the same path: replaced %q, sources %q", res.Replaced, res.Sources)
	}
	// One record a checkpoint, whichever form pulls left it in: a pull
	// after one that kept the roots (as pulls did before PulledRoot), and
	// one keeping them after a plain pull (load --local-cache D, then
	// compress -o onto the tag through D).
	for _, keep := range []bool{false, true} {
		o.KeepRoots = keep
		if _, err := Pull(context.Background(), ref, kept, o); err != nil {
			t.Fatal(err)
		}
		c, err := shardcache.Open(kept)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(c.Index().Sources); n != 1 {
			t.Errorf("keep roots %v: %d checkpoints recorded, want 1: %v", keep, n, c.Index().Sources)
		}
		c.Close()
	}
}

// TestPullSilentRegistry: a registry that accepts connections and never
// answers fails a pull once the retries have each waited Options.Idle,
// with an error that times out (a resource, exit 4, for the CLI), where
// the pull waited forever.
func TestPullSilentRegistry(t *testing.T) {
	addr := silent.Start(t)
	o := opts()
	o.Idle = 200 * time.Millisecond
	start := time.Now()
	_, err := Pull(context.Background(), addr+"/models/silent:v1", filepath.Join(t.TempDir(), "c"), o)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a pull from a silent registry: %v after %v, want a timeout", err, time.Since(start))
	}
	t.Logf("gave up after %v: %v", time.Since(start), err)
}

// TestRoomFor: a pull that needs more than the file system has free
// fails before it fetches, as a full disk (ENOSPC); one that fits goes.
func TestRoomFor(t *testing.T) {
	dir := t.TempDir()
	if err := roomFor(dir, 1<<62); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "nothing was fetched") {
		t.Errorf("4 EiB to fetch: %v, want ENOSPC", err)
	}
	if err := roomFor(dir, 1<<10); err != nil {
		t.Errorf("1 KiB to fetch: %v", err)
	}
}

// TestPulledAlready: a cache a pull filled holds its artifact whole, as a
// pull into a cache it may not write checks; one whose object is gone,
// or whose checkpoint is not recorded as the artifact records it, does
// not.
func TestPulledAlready(t *testing.T) {
	_, host := serve(t)
	dir := t.TempDir()
	cache := compress(t, dir, synth.Config{Mix: 30, Shards: 1, Seed: 4})
	ref := host + "/models/ro:v1"
	if _, err := Push(context.Background(), cache, ref, opts()); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pulled")
	if _, err := Pull(context.Background(), ref, out, opts()); err != nil {
		t.Fatal(err)
	}
	art := pulledArtifact(t, ref, out)
	abs, _ := filepath.Abs(out)
	if !pulledAlready(context.Background(), out, art.ix, art.files, art.layers) {
		t.Fatal("a cache a pull filled does not hold its artifact")
	}
	root := art.ix.Sources[0].Root
	art.ix.Sources[0].Root = shardcache.PulledRoot(abs, "/elsewhere")
	if pulledAlready(context.Background(), out, art.ix, art.files, art.layers) {
		t.Error("a checkpoint recorded elsewhere counted as held")
	}
	art.ix.Sources[0].Root = root
	c, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	path, err := c.FilePath(art.files[0])
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if pulledAlready(context.Background(), out, art.ix, art.files, art.layers) {
		t.Error("a cache missing an object counted as holding the artifact")
	}
}

// TestPullOtherForm: a cache that holds the bytes of a pulled artifact's
// tensor in another form (a zero BF16 bias's fixed payload where the
// artifact has a zero BOOL mask's raw copy; a BF16 tensor's fixed payload
// where the artifact has its entropy payload), in a file of its own or a
// pack, keeps its object, and the pulled checkpoint takes its form: the
// pull took the cache's file for damaged and replaced it, and the cache's
// own records then named a form its object no longer had (review 70b).
func TestPullOtherForm(t *testing.T) {
	_, host := serve(t)
	n := 1 << 20
	bf16 := synth.Normal(rand.New(rand.NewPCG(3, 4)), n/2, 0.02)
	for i, c := range []struct {
		name          string
		local, remote string // dtype:codec
		data          []byte
		packMax       int64
	}{
		{"zeros", "BF16:fixed", "BOOL:fixed", make([]byte, n), -1},
		{"zeros-packed", "BF16:fixed", "BOOL:fixed", make([]byte, n), 2 << 20},
		{"codecs", "BF16:fixed", "BF16:entropy", bf16, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			local, remote := filepath.Join(dir, "local"), filepath.Join(dir, "remote")
			for _, side := range []struct{ spec, src, out string }{{c.local, "a", local}, {c.remote, "b", remote}} {
				dtype, codecName, _ := strings.Cut(side.spec, ":")
				values := n / 2
				if dtype == "BOOL" {
					values = n
				}
				header := fmt.Sprintf(`{"t":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}`, dtype, values, n)
				header += strings.Repeat(" ", -len(header)&7)
				b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
				src := filepath.Join(dir, side.src)
				os.MkdirAll(src, 0o755)
				if err := os.WriteFile(filepath.Join(src, "model.safetensors"), append(append(b, header...), c.data...), 0o644); err != nil {
					t.Fatal(err)
				}
				o := pipeline.CompressOptions{Output: side.out, Codec: codecName, SelfContained: true, NoSync: true, PackMax: c.packMax}
				if _, err := pipeline.Compress(context.Background(), src, o); err != nil {
					t.Fatal(err)
				}
			}
			ref := fmt.Sprintf("%s/models/other%d:v1", host, i)
			if _, err := Push(context.Background(), remote, ref, opts()); err != nil {
				t.Fatal(err)
			}
			if _, err := Pull(context.Background(), ref, local, opts()); err != nil {
				t.Fatalf("pull: %v", err)
			}
			v, err := pipeline.Verify(context.Background(), local, pipeline.VerifyOptions{})
			if err != nil || !v.OK() || v.Tensors != 2 {
				t.Fatalf("the cache after the pull: %v %+v", err, v)
			}
			out := filepath.Join(dir, "out")
			if _, err := pipeline.Decompress(context.Background(), local, pipeline.DecompressOptions{Output: out, Source: shardcache.PulledRoot(local, filepath.Join(dir, "b"))}); err != nil {
				t.Fatalf("decompress of the pulled checkpoint: %v", err)
			}
			// What a pull into it, read-only, asks (review 70c).
			art := pulledArtifact(t, ref, local)
			if !pulledAlready(context.Background(), local, art.ix, art.files, art.layers) {
				t.Error("the cache the pull filled does not hold its artifact")
			}
		})
	}
}

// TestPullOtherFormRefusedOrDamaged: an artifact whose gap has bytes the
// cache holds as a payload is refused (ErrOtherForm) and changes nothing;
// a cache whose payload of an artifact's bytes is damaged keeps its form
// and its damage, for verify to report, where the pull stopped with an
// inconsistent index (review 70c).
func TestPullOtherFormRefusedOrDamaged(t *testing.T) {
	_, host := serve(t)
	n := 1 << 16
	write := func(dir, header string, data []byte) {
		header += strings.Repeat(" ", -len(header)&7)
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), append(append(b, header...), data...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cacheOf := func(dir, src, out string) {
		if _, err := pipeline.Compress(context.Background(), filepath.Join(dir, src), pipeline.CompressOptions{Output: filepath.Join(dir, out), SelfContained: true, NoSync: true}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write(filepath.Join(dir, "a"), fmt.Sprintf(`{"z":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]}}`, n/2, n), make([]byte, n))
	write(filepath.Join(dir, "g"), fmt.Sprintf(`{"w":{"dtype":"U8","shape":[8],"data_offsets":[%d,%d]}}`, n, n+8), make([]byte, n+8)) // a gap of n zeros
	write(filepath.Join(dir, "m"), fmt.Sprintf(`{"m":{"dtype":"BOOL","shape":[%d],"data_offsets":[0,%d]}}`, n, n), make([]byte, n))
	cacheOf(dir, "a", "local")
	cacheOf(dir, "g", "gap")
	cacheOf(dir, "m", "mask")
	local := filepath.Join(dir, "local")
	before, _ := os.ReadFile(filepath.Join(local, shardcache.IndexName))
	ref := host + "/models/gap:v1"
	if _, err := Push(context.Background(), filepath.Join(dir, "gap"), ref, opts()); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(context.Background(), ref, local, opts()); !errors.Is(err, shardcache.ErrOtherForm) || !strings.Contains(err.Error(), "a gap of model.safetensors") {
		t.Fatalf("pull of a gap the cache holds as a payload: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(local, shardcache.IndexName)); !bytes.Equal(before, after) {
		t.Fatal("the refused pull changed the index")
	}
	// The fixed payload of a damaged (it lies in a pack), then the mask's
	// raw copy pulled.
	c, err := shardcache.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	zo := c.Index().Objects[c.Index().Sources[0].Shards[0].Tensors[0].Key]
	p, err := c.FilePath(zo.Pack)
	c.Close()
	if err != nil || zo.Kind != shardcache.KindFixed {
		t.Fatalf("the payload's pack: %v (%+v)", err, zo)
	}
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	os.WriteFile(p, b, 0o644)
	ref = host + "/models/mask:v1"
	if _, err := Push(context.Background(), filepath.Join(dir, "mask"), ref, opts()); err != nil {
		t.Fatal(err)
	}
	o := opts()
	o.Check = pipeline.CheckStoredPayload
	if _, err := Pull(context.Background(), ref, local, o); err != nil {
		t.Fatalf("pull into a cache whose payload of its bytes is damaged: %v", err)
	}
	if v, err := pipeline.Verify(context.Background(), local, pipeline.VerifyOptions{}); err != nil || v.OK() {
		t.Fatalf("verify after the pull: %v, problems %v (want the damage reported)", err, v)
	}
}

// pulledArtifact reads the artifact at ref as a pull into dir sees it:
// its checkpoints recorded at their PulledRoot there.
func pulledArtifact(t *testing.T, ref, dir string) *artifactOf {
	t.Helper()
	o := opts()
	src, err := o.source(context.Background(), ref, false)
	if err != nil {
		t.Fatal(err)
	}
	art, err := readArtifact(context.Background(), src, "pull")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	for i := range art.ix.Sources {
		art.ix.Sources[i].Root = shardcache.PulledRoot(abs, art.ix.Sources[i].Root)
	}
	return art
}

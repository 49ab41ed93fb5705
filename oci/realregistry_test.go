package oci

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/internal/regtest"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/shardcache"
)

// TestRealRegistry pushes and pulls through the CNCF Distribution
// registry (a separate process on loopback): the round trip is byte for
// byte, a second push uploads nothing, and a pull whose registry goes
// away mid-pull fails, leaves no checkpoint in the cache, and completes
// once the registry is back, fetching only what it lacked.
func TestRealRegistry(t *testing.T) {
	bin := regtest.Bin(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	host, stop := regtest.Run(t, bin, store)
	cache := compress(t, dir, synth.Config{Mix: 120, Shards: 2, Seed: 9})
	ref := host + "/splitzip/mix:v1"
	pr, err := Push(context.Background(), cache, ref, opts())
	if err != nil {
		t.Fatal(err)
	}
	again, err := Push(context.Background(), cache, ref, opts())
	if err != nil || again.Uploaded != 0 || again.Digest != pr.Digest {
		t.Fatalf("second push: %+v, %v", again, err)
	}
	out := filepath.Join(dir, "pulled")
	if _, err := Pull(context.Background(), ref, out, opts()); err != nil {
		t.Fatal(err)
	}
	sameCache(t, cache, out)

	// Through a proxy that cuts the second blob GET half way: the pull
	// resumes it with a Range GET, which the registry answers.
	u, _ := url.Parse("http://" + host)
	proxy := httputil.NewSingleHostReverseProxy(u)
	var gets, ranged atomic.Int64
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			if r.Header.Get("Range") != "" {
				ranged.Add(1)
			}
			if gets.Add(1) == 2 {
				cutBody(proxy, w, r)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer ps.Close()
	cutOut := filepath.Join(dir, "pulled-cut")
	if _, err := Pull(context.Background(), strings.Replace(ref, host, strings.TrimPrefix(ps.URL, "http://"), 1), cutOut, opts()); err != nil {
		t.Fatalf("a pull with a blob cut half way: %v", err)
	}
	if ranged.Load() != 1 {
		t.Errorf("%d range requests, want 1", ranged.Load())
	}
	sameCache(t, cache, cutOut)

	// The registry goes away while a second cache pulls; then it is back.
	out2 := filepath.Join(dir, "pulled2")
	o := opts()
	o.Jobs = 1
	o.Progress = &stopAfter{n: 2 << 20, stop: stop}
	if _, err := Pull(context.Background(), ref, out2, o); err == nil {
		t.Fatal("a pull whose registry went away succeeded")
	}
	if c, err := shardcache.Open(out2); err == nil {
		c.Close() // its index is all this reads
		if len(c.Index().Sources) != 0 {
			t.Fatal("an interrupted pull left a checkpoint in the cache")
		}
	}
	host2, _ := regtest.Run(t, bin, store)
	res, err := Pull(context.Background(), strings.Replace(ref, host, host2, 1), out2, opts())
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched == 0 || res.Fetched >= res.Blobs {
		t.Errorf("resumed pull fetched %d of %d files", res.Fetched, res.Blobs)
	}
	sameCache(t, cache, out2)
}

// stopAfter is a Progress that stops the registry once n bytes arrived.
type stopAfter struct {
	n, got uint64
	stop   func()
}

func (s *stopAfter) Start(string, uint64) {}
func (s *stopAfter) Finish()              {}
func (s *stopAfter) Add(n uint64) {
	s.got += n
	if s.got >= s.n && s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

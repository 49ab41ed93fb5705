package s3store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/silent"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want URL
		err  bool
	}{
		{"s3://models/llama/8b", URL{"models", "llama/8b"}, false},
		{"s3://models", URL{"models", ""}, false},
		{"s3://models/", URL{"models", ""}, false},
		{"s3://my.bucket-1/a/", URL{"my.bucket-1", "a"}, false},
		{"s3://Models/a", URL{}, true},
		{"s3://ab/a", URL{}, true},
		{"s3://models/a//b", URL{}, true},
		{"models/a", URL{}, true},
		{"s3:/models", URL{}, true},
	} {
		got, err := ParseURL(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !errors.Is(err, ErrURL) {
			t.Errorf("ParseURL(%q): %v is not ErrURL", c.in, err)
		}
		if err == nil && got.String() != strings.TrimSuffix(c.in, "/") {
			t.Errorf("%+v.String() = %q", got, got.String())
		}
	}
	if _, err := New(context.Background(), URL{"models", ""}, Options{PartSize: 1 << 20}); !errors.Is(err, ErrOptions) {
		t.Errorf("a 1 MiB part: %v, want ErrOptions", err)
	}
}

// faults is a transport that passes requests to the server, changing the
// answers a test asks it to.
type faults struct {
	next http.RoundTripper
	// answer, if set, may answer a request itself (status > 0) or cut
	// the body after cut bytes (cut > 0).
	answer   func(r *http.Request) (status int, cut int64)
	requests atomic.Int64
}

func (f *faults) RoundTrip(r *http.Request) (*http.Response, error) {
	f.requests.Add(1)
	var status int
	var cut int64
	if f.answer != nil {
		status, cut = f.answer(r)
	}
	if status > 0 {
		return &http.Response{StatusCode: status, Status: http.StatusText(status), Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	resp, err := f.next.RoundTrip(r)
	if err == nil && cut > 0 {
		resp.Body = s3test.CutBody(resp.Body, cut)
	}
	return resp, err
}

func newStore(t *testing.T, prefix string, f *faults) *Store {
	t.Helper()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "store-test")
	o := Options{Endpoint: srv.Endpoint, PartSize: MinPartSize, Ahead: 3}
	if f != nil {
		f.next = http.DefaultTransport
		o.HTTPClient = &http.Client{Transport: f}
	}
	s, err := New(context.Background(), URL{bucket, prefix}, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func random(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestStore writes, reads and conditionally writes objects on a real
// server: a small object in one PUT, a large one in a multipart upload,
// ranged and streamed reads from several offsets.
func TestStore(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, "a/b", nil)
	if _, _, err := s.Stat(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat of a missing object: %v", err)
	}
	if _, err := s.Range(ctx, "missing", 0, -1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Range of a missing object: %v", err)
	}
	for _, n := range []int{0, 1, 1000, MinPartSize, 2*MinPartSize + 12345} {
		data := random(n, uint64(n))
		var sent atomic.Int64
		if err := s.Write(ctx, "obj", bytes.NewReader(data), int64(n), func(k int64) { sent.Add(k) }); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if sent.Load() != int64(n) {
			t.Errorf("%d bytes: told %d sent", n, sent.Load())
		}
		size, _, err := s.Stat(ctx, "obj")
		if err != nil || size != int64(n) {
			t.Fatalf("Stat: %d, %v; want %d", size, err, n)
		}
		for _, off := range []int64{0, 1, int64(n) / 2, int64(n)} {
			if off > int64(n) {
				continue
			}
			r := s.Open(ctx, "obj", off, int64(n))
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data[off:]) {
				t.Fatalf("%d bytes from %d: %d bytes, %v", n, off, len(got), err)
			}
		}
		if n > 10 {
			b, err := s.Range(ctx, "obj", 3, 7)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(b)
			b.Close()
			if !bytes.Equal(got, data[3:10]) {
				t.Fatalf("Range(3, 7) = %x, want %x", got, data[3:10])
			}
		}
	}
	// Conditional writes: absent, then matching the ETag read.
	if err := s.Put(ctx, "index.json", []byte("one"), Cond{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "index.json", []byte("two"), Cond{IfAbsent: true}); !errors.Is(err, ErrChanged) {
		t.Fatalf("a second write if absent: %v, want ErrChanged", err)
	}
	b, etag, err := s.ReadAll(ctx, "index.json", 100)
	if err != nil || string(b) != "one" {
		t.Fatalf("ReadAll: %q, %v", b, err)
	}
	if _, _, err := s.ReadAll(ctx, "index.json", 2); err == nil {
		t.Fatal("ReadAll took 3 bytes under a limit of 2")
	}
	if err := s.Put(ctx, "index.json", []byte("three"), Cond{IfMatch: etag}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "index.json", []byte("four"), Cond{IfMatch: etag}); !errors.Is(err, ErrChanged) {
		t.Fatalf("a write over a stale ETag: %v, want ErrChanged", err)
	}
	if err := s.Delete(ctx, "index.json"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Stat(ctx, "index.json"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat after Delete: %v", err)
	}
}

// TestStoreDenied: a request with the wrong secret, refused by the real
// server, is ErrDenied, naming the object.
func TestStoreDenied(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t, "denied-test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	s, err := New(context.Background(), URL{bucket, "denied"}, Options{Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Stat(context.Background(), "index.json"); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "denied/index.json") {
		t.Fatalf("Stat with the wrong secret: %v, want ErrDenied naming the object", err)
	}
}

// TestStoreNoCredentials: a request with no credentials anywhere the AWS
// CLI looks (the environment, the files; the instance metadata service
// off) is ErrNoCredentials, before it is sent (so no server is needed).
func TestStoreNoCredentials(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	s, err := New(context.Background(), URL{"nocreds", "x"}, Options{Endpoint: "http://127.0.0.1:1", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Stat(context.Background(), "index.json"); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Stat without credentials: %v, want ErrNoCredentials", err)
	}
}

// TestStoreSilentServer: a server that accepts connections and never
// answers fails a request once its retries have each waited Idle, with
// an error that times out, rather than holding it forever.
func TestStoreSilentServer(t *testing.T) {
	addr := silent.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	s, err := New(context.Background(), URL{"silent", "x"}, Options{Endpoint: "http://" + addr, Idle: 200 * time.Millisecond, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = s.Stat(context.Background(), "index.json")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Stat from a silent server: %v after %v, want a timeout", err, time.Since(start))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stat from a silent server took %v", d)
	}
}

// TestStoreFaults: bodies cut mid-part are resumed from the byte they
// stopped at, 503 and 429 answers are retried, and a part that keeps
// failing fails the read with an error naming the object.
func TestStoreFaults(t *testing.T) {
	ctx := context.Background()
	f := &faults{}
	s := newStore(t, "faults", f)
	data := random(3*MinPartSize+777, 5)
	if err := s.Write(ctx, "blob", bytes.NewReader(data), int64(len(data)), nil); err != nil {
		t.Fatal(err)
	}
	var gets, cuts, throttled atomic.Int64
	f.answer = func(r *http.Request) (int, int64) {
		if r.Method != http.MethodGet {
			return 0, 0
		}
		switch gets.Add(1) {
		case 1:
			throttled.Add(1)
			return http.StatusServiceUnavailable, 0
		case 2:
			throttled.Add(1)
			return http.StatusTooManyRequests, 0
		case 4, 6:
			cuts.Add(1)
			return 0, 100000
		}
		return 0, 0
	}
	r := s.Open(ctx, "blob", 0, int64(len(data)))
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through faults: %d bytes, %v", len(got), err)
	}
	if cuts.Load() != 2 || throttled.Load() != 2 {
		t.Fatalf("%d cuts and %d throttled answers, want 2 and 2", cuts.Load(), throttled.Load())
	}
	// Every GET cut: the read fails after resumeTries, naming the object.
	f.answer = func(r *http.Request) (int, int64) {
		if r.Method == http.MethodGet {
			return 0, 1000
		}
		return 0, 0
	}
	r = s.Open(ctx, "blob", 0, int64(len(data)))
	_, err = io.ReadAll(r)
	r.Close()
	if err == nil || !strings.Contains(err.Error(), "faults/blob") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("every GET cut: %v", err)
	}
	// A multipart upload whose part keeps failing is aborted: no object.
	f.answer = func(r *http.Request) (int, int64) {
		if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2" {
			return http.StatusInternalServerError, 0
		}
		return 0, 0
	}
	if err := s.Write(ctx, "failed", bytes.NewReader(data), int64(len(data)), nil); err == nil {
		t.Fatal("an upload whose part failed succeeded")
	}
	f.answer = nil
	if _, _, err := s.Stat(ctx, "failed"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a failed upload: %v, want ErrNotFound", err)
	}
}

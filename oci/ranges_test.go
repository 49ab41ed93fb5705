package oci

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitzip/splitzip/internal/s3test"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/shardcache"
)

func TestPartFor(t *testing.T) {
	for _, c := range []struct {
		request, rate float64
		want          int64
	}{
		{1e-3, 1e9, 8 << 20},                 // 8 MB: below the floor, raised to it
		{30e-3, 100e6, 23 << 20},             // an object store across a region: 24 MB
		{1e-4, 2e9, minRangePart},            // loopback: 1.6 MB, the floor
		{1e-5, 1e9, minRangePart},            // below the floor
		{1, 1e9, maxRangePart},               // above the ceiling
		{1e-3, 1.5e9, 12 << 20},              // 12 MB: 12 MiB
		{0, 1e9, minRangePart},               // no request cost at all
		{2e-3, 16 << 20, minRangePart},       // a slow link: 256 KiB, the floor
		{1.0 / 256, 1 << 30, 32 << 20},       // exactly 32 MiB
		{1.0 / 256, 1<<30 + 1<<10, 33 << 20}, // 32 bytes more: the next MiB
	} {
		if got := partFor(c.request, c.rate); got != c.want {
			t.Errorf("partFor(%g s, %g B/s) = %d, want %d", c.request, c.rate, got, c.want)
		}
	}
}

func TestSplitRange(t *testing.T) {
	const part = 8 << 20
	for _, c := range []struct {
		n     int64
		parts int
	}{{1, 1}, {part, 1}, {part + part/2, 1}, {part + part/2 + 1, 2}, {3 * part, 3}, {3*part + 1, 4}, {100 << 20, 13}} {
		got := splitRange(c.n, part)
		var sum int64
		for _, p := range got {
			if p <= 0 || p > part+part/2 || (len(got) > 1 && p > part) {
				t.Errorf("splitRange(%d): part of %d bytes", c.n, p)
			}
			sum += p
		}
		if sum != c.n || len(got) != c.parts {
			t.Errorf("splitRange(%d) = %d parts summing to %d, want %d parts", c.n, len(got), sum, c.parts)
		}
	}
}

func TestRangeCost(t *testing.T) {
	var c rangeCost
	if got := c.part(); got != defaultRangePart {
		t.Errorf("unmeasured part %d, want the default %d", got, defaultRangePart)
	}
	c.observe(time.Second, rateMinBody-1, time.Millisecond) // too small to count
	if got := c.part(); got != defaultRangePart {
		t.Errorf("part after a small body: %d, want the default", got)
	}
	// 30 ms a request, 100 MB/s: 24 MB parts, approached from 1 ms, 1 GB/s.
	c.observe(time.Millisecond, 1e9, time.Second)
	if got := c.part(); got != 8<<20 {
		t.Errorf("part after one GET: %d, want 8 MiB", got)
	}
	for range 60 {
		c.observe(30*time.Millisecond, 100e6, time.Second)
	}
	if got := c.part(); got != 23<<20 {
		t.Errorf("part after slow GETs: %d, want 23 MiB", got)
	}
}

// rangeLog is an HTTP transport that records the Range headers of GETs
// and the most it saw in flight at once.
type rangeLog struct {
	mu            sync.Mutex
	ranges        []string
	now, mostSeen int
	deny          int // ranged GETs from this one on (counted in ranges) are answered 404
}

func (l *rangeLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet || r.Header.Get("Range") == "" {
		return http.DefaultTransport.RoundTrip(r)
	}
	l.mu.Lock()
	l.ranges = append(l.ranges, r.Header.Get("Range"))
	if l.deny > 0 && len(l.ranges) >= l.deny {
		l.mu.Unlock()
		return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	}
	l.now++
	l.mostSeen = max(l.mostSeen, l.now)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.now--
		l.mu.Unlock()
	}()
	// Hold every GET a moment, so that parts issued together are seen
	// in flight together.
	time.Sleep(20 * time.Millisecond)
	return http.DefaultTransport.RoundTrip(r)
}

// TestRemoteReadParts: a remote cache's read larger than the part size
// is read as parts of at most that size, in parallel, against the real S3
// server, and its bytes are the object's.
func TestRemoteReadParts(t *testing.T) {
	srv := s3test.Start(t)
	srv.Bucket(t, "models")
	ctx := context.Background()
	cache := compress(t, filepath.Join(t.TempDir(), "a"), synth.Config{Bytes: 64 << 20, Hidden: 4096, Shards: 1, Seed: 21})
	ref := "s3://models/parts:v1"
	if _, err := Push(ctx, cache, ref, s3Options(srv)); err != nil {
		t.Fatal(err)
	}
	local, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	var big shardcache.Key
	for k, o := range local.Index().Objects {
		if o.Kind != shardcache.KindPack && (big == "" || o.Size > local.Index().Objects[big].Size) {
			big = k
		}
	}
	want, _, err := local.ReadObject(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 3*defaultRangePart {
		t.Fatalf("largest object %d bytes: too small for the test", len(want))
	}
	log := &rangeLog{}
	rc, files := openFiles(t, ref, s3Options(srv), log)
	loc, _, err := rc.Locate(big)
	if err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.ranges = nil // Open's own reads: the manifest and the index
	log.mu.Unlock()
	got := make([]byte, len(want))
	if err := files.ReadAt(loc, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("object read in parts differs")
	}
	parts := splitRange(int64(len(want)), defaultRangePart)
	if len(log.ranges) != len(parts) {
		t.Errorf("%d ranged GETs %v, want %d parts", len(log.ranges), log.ranges, len(parts))
	}
	for _, r := range log.ranges {
		var a, b int64
		if _, err := fmt.Sscanf(r, "bytes=%d-%d", &a, &b); err != nil || b-a+1 > defaultRangePart {
			t.Errorf("range %q: more than a part", r)
		}
	}
	if log.mostSeen < 2 {
		t.Errorf("at most %d GET in flight: the parts were not read in parallel", log.mostSeen)
	}
	// The same read telling its stretches as they land, on a cache
	// opened afresh (the first read's GETs taught this one larger parts).
	_, runFiles := openFiles(t, ref, s3Options(srv), nil)
	checkStretches(t, runFiles, loc, want, len(parts))
	// Again with each part's first GET broken off inside a span: the
	// GET that resumes it continues its stretch.
	cut := &cutOnce{cut: spanBytes + 17, seen: map[string]bool{}}
	_, cutFiles := openFiles(t, ref, s3Options(srv), cut)
	cut.cuts.Store(0) // Open's own reads, broken off and resumed too
	checkStretches(t, cutFiles, loc, want, len(parts))
	if n := cut.cuts.Load(); n != int64(len(parts)) {
		t.Errorf("%d bodies broken off, want one a part (%d)", n, len(parts))
	}
	// A part refused (and the parts after it) fails the read with the
	// refusal, not with the cancellation it sends to the other parts.
	// A cache opened afresh, whose parts are the default's again.
	_, files2 := openFiles(t, ref, s3Options(srv), log)
	log.mu.Lock()
	log.ranges, log.deny = nil, 5 // the first four in flight when the fifth fails
	log.mu.Unlock()
	err = files2.ReadAt(loc, got, 0)
	if err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("a read with a part refused: %v; want the refusal", err)
	}
}

// checkStretches reads the object at loc through
// ObjectBytes.ReadAtStretches and checks what it tells: one stretch a
// part, each told in order in spans of at most spanBytes that are in
// place (equal to want) when told, the stretches tiling the object.
func checkStretches(t *testing.T, files *shardcache.ObjectFiles, loc shardcache.Location, want []byte, parts int) {
	t.Helper()
	ob, err := files.Open(loc)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	type stretch struct {
		off, n int64
		bad    string
	}
	var mu sync.Mutex
	var stretches []*stretch
	got := make([]byte, len(want))
	err = ob.ReadAtStretches(got, 0, func(off int64) func([]byte) {
		s := &stretch{off: off}
		mu.Lock()
		stretches = append(stretches, s)
		mu.Unlock()
		return func(q []byte) {
			at := s.off + s.n
			switch {
			case len(q) == 0 || len(q) > spanBytes:
				s.bad = fmt.Sprintf("a span of %d bytes", len(q))
			case &q[0] != &got[at]:
				s.bad = fmt.Sprintf("a span out of place at %d", at)
			case !bytes.Equal(q, want[at:at+int64(len(q))]):
				s.bad = fmt.Sprintf("a span at %d told before its bytes were in place", at)
			}
			s.n += int64(len(q))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("object read with runs differs")
	}
	if len(stretches) != parts {
		t.Errorf("%d stretches, want one a part (%d)", len(stretches), parts)
	}
	slices.SortFunc(stretches, func(a, b *stretch) int { return cmp.Compare(a.off, b.off) })
	var at int64
	for _, s := range stretches {
		if s.bad != "" || s.off != at {
			t.Errorf("stretch at %d (%d bytes, want it at %d): %s", s.off, s.n, at, s.bad)
		}
		at = s.off + s.n
	}
	if at != int64(len(want)) {
		t.Errorf("stretches end at %d of %d bytes", at, len(want))
	}
}

// cutReader gives its bytes in reads of at most step bytes, then fails
// with err after cut bytes.
type cutReader struct {
	b         []byte
	step, cut int
	err       error
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.cut == 0 {
		return 0, r.err
	}
	n := copy(p[:min(len(p), r.step, r.cut)], r.b)
	r.b, r.cut = r.b[n:], r.cut-n
	return n, nil
}

// TestReadSpans: readSpans fills p as io.ReadFull does, telling each
// span of at most spanBytes once it is in p, and reports a body that
// ends early as io.ErrUnexpectedEOF with the bytes that arrived told.
func TestReadSpans(t *testing.T) {
	b := make([]byte, 3*spanBytes+5)
	for i := range b {
		b[i] = byte(i * 7)
	}
	reset := errors.New("connection reset")
	for _, c := range []struct {
		step, cut int
		err       error
		want      error
	}{
		{1 << 20, len(b), io.EOF, nil},
		{1000, len(b), io.EOF, nil},
		{1 << 20, spanBytes, io.EOF, io.ErrUnexpectedEOF},   // ends on a span's end
		{4096, spanBytes + 17, io.EOF, io.ErrUnexpectedEOF}, // ends within a span
		{4096, 0, io.EOF, io.EOF},                           // nothing arrived
		{4096, 999, reset, reset},                           // a broken connection
	} {
		p := make([]byte, len(b))
		told := 0
		n, _, err := readSpans(&cutReader{b: b, step: c.step, cut: c.cut, err: c.err}, p, func(q []byte) {
			if len(q) > spanBytes || !bytes.Equal(q, b[told:told+len(q)]) || &q[0] != &p[told] {
				t.Errorf("step %d, cut %d: span of %d bytes at %d not in place", c.step, c.cut, len(q), told)
			}
			told += len(q)
		})
		switch {
		case c.want == nil && c.cut == len(b) && (err != nil || n != len(b)):
			t.Errorf("step %d: %d bytes, %v; want all %d", c.step, n, err, len(b))
		case c.cut < len(b) && (n != c.cut || err == nil || c.want != nil && !errors.Is(err, c.want)):
			t.Errorf("step %d, cut %d: %d bytes, %v; want %d, %v", c.step, c.cut, n, err, c.cut, c.want)
		}
		if told != n {
			t.Errorf("step %d, cut %d: told %d bytes of %d read", c.step, c.cut, told, n)
		}
	}
}

// cutOnce carries requests to the server, breaking off the body of the
// first GET of each part (the ranges that end on one byte: a resumed GET
// asks for the rest of its part) after cut bytes, as a connection that
// drops does.
type cutOnce struct {
	mu   sync.Mutex
	seen map[string]bool
	cut  int64
	cuts atomic.Int64
}

func (c *cutOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	rg := r.Header.Get("Range")
	if err != nil || r.Method != http.MethodGet || rg == "" || resp.StatusCode != http.StatusPartialContent {
		return resp, err
	}
	_, end, _ := strings.Cut(rg, "-")
	c.mu.Lock()
	first := !c.seen[end]
	c.seen[end] = true
	c.mu.Unlock()
	if first {
		c.cuts.Add(1)
		resp.Body = s3test.CutBody(resp.Body, c.cut)
	}
	return resp, nil
}

// openFiles opens the remote cache at ref with o, its requests carried
// by rt where set, and its object reader, closed when the test ends.
func openFiles(t *testing.T, ref string, o Options, rt http.RoundTripper) (*shardcache.Cache, *shardcache.ObjectFiles) {
	t.Helper()
	if rt != nil {
		o.S3.HTTPClient = &http.Client{Transport: rt}
	}
	c, err := Open(context.Background(), ref, o)
	if err != nil {
		t.Fatal(err)
	}
	files := shardcache.NewObjectFiles(c)
	t.Cleanup(func() { files.Close() })
	return c, files
}

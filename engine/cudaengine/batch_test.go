package cudaengine

import (
	"bytes"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/internal/enginetest"
)

// TestBatchedSubmissions holds the submitter's role while submissions
// queue, so that one drain enqueues them all: payload copies with their
// decodes and raw copies on both streams go in batched calls, a copy
// over a held copy's destination in a later one, and every event must
// follow its own work. An engine without decode streams does not batch.
func TestBatchedSubmissions(t *testing.T) {
	requireDriver(t)
	e, err := newEngine(0, 2, true) // batches go with decode streams
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.ctx.Library().HasBatchCopy() {
		t.Skip("the driver has no batched copies")
	}
	values, p, h := enginetest.Payload(t, 1<<19+33)
	const n, rawBytes = 12, 256 << 10
	slot := (uint64(len(values)) + e.gran - 1) / e.gran * e.gran
	size := slot*n + e.gran
	base, err := e.Reserve(size)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release(base, size)
	if err := e.Map(base, size); err != nil {
		t.Fatal(err)
	}
	defer e.Unmap(base, size)
	host, err := e.Pinned(n*uint64(len(p)) + 2*rawBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer e.FreePinned(host)
	rawA, rawB := host[n*len(p):n*len(p)+rawBytes], host[n*len(p)+rawBytes:]
	for i := range rawA {
		rawA[i], rawB[i] = byte(i), byte(i*7+1)
	}
	rawAt := base + engine.DevPtr(slot*n)

	e.qmu.Lock()
	e.draining = true // this goroutine is the submitter until drain
	e.qmu.Unlock()
	var evs []engine.Event
	add := func(s int, w engine.Work) {
		ev, err := e.Submit(s, w)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	for i := range n {
		src := host[i*len(p) : (i+1)*len(p)]
		copy(src, p)
		add(i%2, engine.Work{Dst: base + engine.DevPtr(uint64(i)*slot), Src: src, Decode: &payload.Fixed{Header: h}})
		if i == n/2 {
			add(0, engine.Work{Dst: rawAt, Src: rawA})
			add(0, engine.Work{Dst: rawAt, Src: rawB}) // overlaps: must land last
		}
	}
	e.drain()
	if got := e.batched.Load(); got < n {
		t.Fatalf("%d copies went in batches, want at least %d", got, n)
	}
	for _, ev := range evs {
		if err := ev.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.DecodeErrors(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		got := make([]byte, len(values))
		if err := e.ReadBack(got, base+engine.DevPtr(uint64(i)*slot)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, values) {
			t.Fatalf("payload %d: a batched copy's decode differs from the reference", i)
		}
	}
	got := make([]byte, rawBytes)
	if err := e.ReadBack(got, rawAt); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, rawB) {
		t.Fatal("of two copies to one place, the later did not land last")
	}
}

// TestOverlaps: a copy is held back from a batch when it lands on what a
// held request writes, its copy's destination or its decode's output,
// and only then.
func TestOverlaps(t *testing.T) {
	src := make([]byte, 100)
	h := codec.Header{Values: 150} // decodes to 300 bytes
	held := []*request{{w: engine.Work{Dst: 1000, Src: src, Decode: &payload.Fixed{Header: h}}}, {w: engine.Work{Dst: 2000, Src: src}}}
	for _, c := range []struct {
		dst  engine.DevPtr
		n    int
		want bool
	}{
		{900, 100, false},  // ends where the first begins
		{950, 100, true},   // into its payload
		{1200, 50, true},   // past its payload, into its decode's output
		{1300, 700, false}, // from its output's end to the second's start
		{2099, 1, true},    // the second's last byte
		{2100, 10, false},  // after the second, which has no decode
	} {
		if got := overlaps(held, engine.Work{Dst: c.dst, Src: make([]byte, c.n)}); got != c.want {
			t.Errorf("a copy of %d bytes to %d: overlaps %v, want %v", c.n, c.dst, got, c.want)
		}
	}
}

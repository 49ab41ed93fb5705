package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/splitzip/splitzip/vmm"
)

// gatedTransport uploads nothing: each binding's fence completes when
// the test opens its batch's gate, with the error set for its name.
type gatedTransport struct {
	mu      sync.Mutex
	batches [][]string // names of each UploadBatch call
	gate    chan struct{}
	fail    map[string]error
}

type gatedFence struct {
	gate <-chan struct{}
	err  error
}

func (f gatedFence) Wait() error { <-f.gate; return f.err }
func (f gatedFence) Done() bool {
	select {
	case <-f.gate:
		return true
	default:
		return false
	}
}

func (g *gatedTransport) UploadBatch(_ context.Context, bs []*vmm.Binding) []Fence {
	g.mu.Lock()
	defer g.mu.Unlock()
	var names []string
	out := make([]Fence, len(bs))
	for i, b := range bs {
		names = append(names, b.Name)
		out[i] = gatedFence{g.gate, g.fail[b.Name]}
	}
	g.batches = append(g.batches, names)
	return out
}

func (g *gatedTransport) uploads() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, b := range g.batches {
		n += len(b)
	}
	return n
}

func (*gatedTransport) Stats() Stats        { return Stats{} }
func (*gatedTransport) PinnedBytes() uint64 { return 0 }
func (*gatedTransport) Close() error        { return nil }

func bindings(names ...string) []*vmm.Binding {
	var bs []*vmm.Binding
	for _, n := range names {
		bs = append(bs, &vmm.Binding{Spec: vmm.Spec{Name: n, Size: 2}})
	}
	return bs
}

// TestStoreFlights follows a binding's upload through the store: faults
// that find it loading share its fence, its end sets the state whoever
// waits first, an upload that failed is tried again by the next fault,
// and a binding evicted while it loads stays evicted.
func TestStoreFlights(t *testing.T) {
	g := &gatedTransport{gate: make(chan struct{}), fail: map[string]error{"bad": errors.New("read failed")}}
	st := NewStore(nil, g)
	bs := bindings("a", "bad", "c", "a2")
	bs[3] = bs[0] // a binding twice in one batch is uploaded once
	first := st.FaultIn(context.Background(), bs)
	second := st.FaultIn(context.Background(), bs[:2])
	if n := g.uploads(); n != 3 {
		t.Fatalf("%d uploads for 3 bindings faulted twice, want 3", n)
	}
	for i, f := range first {
		if f.Done() {
			t.Errorf("fence %d done before its upload", i)
		}
		if bs[i].State() != vmm.Loading {
			t.Errorf("%s is %v while loading", bs[i].Name, bs[i].State())
		}
	}
	close(g.gate)
	for i, f := range append(first, second...) {
		err := f.Wait()
		if name := bs[i%len(bs)].Name; (name == "bad") != (err != nil) {
			t.Errorf("fence %d (%s): %v", i, name, err)
		}
		if !f.Done() {
			t.Errorf("fence %d not done after Wait", i)
		}
	}
	if bs[0].State() != vmm.Resident || bs[1].State() != vmm.Evicted || bs[2].State() != vmm.Resident {
		t.Errorf("states %v %v %v, want resident, evicted, resident", bs[0].State(), bs[1].State(), bs[2].State())
	}
	// Resident bindings are not uploaded again; the failed one is.
	g.gate, g.fail = make(chan struct{}), nil
	again := st.FaultIn(context.Background(), bs[:3])
	close(g.gate)
	if err := waitAllErr(again); err != nil {
		t.Fatal(err)
	}
	if n := g.uploads(); n != 4 || g.batches[1][0] != "bad" {
		t.Errorf("re-fault uploaded %v, want only bad", g.batches[1:])
	}
	if bs[1].State() != vmm.Resident {
		t.Errorf("bad is %v after its second upload", bs[1].State())
	}
}

// TestStoreEvictedWhileLoading: a binding evicted (Arena.Evict) while
// its upload is in flight stays evicted when the upload ends, and the
// next fault uploads it again rather than sharing the old upload.
func TestStoreEvictedWhileLoading(t *testing.T) {
	g := &gatedTransport{gate: make(chan struct{})}
	st := NewStore(nil, g)
	bs := bindings("w")
	old := st.FaultIn(context.Background(), bs)
	(&vmm.Arena{}).Evict(bs...)
	gate := g.gate
	g.gate = make(chan struct{})
	renewed := st.FaultIn(context.Background(), bs)
	if n := g.uploads(); n != 2 {
		t.Fatalf("%d uploads, want 2: the evicted binding's fault shared the old upload", n)
	}
	close(gate)
	if err := old[0].Wait(); err != nil {
		t.Fatal(err)
	}
	if s := bs[0].State(); s != vmm.Loading {
		t.Errorf("the old upload's end left the binding %v, want loading (the new upload's)", s)
	}
	close(g.gate)
	if err := renewed[0].Wait(); err != nil {
		t.Fatal(err)
	}
	if s := bs[0].State(); s != vmm.Resident {
		t.Errorf("%v after the new upload", s)
	}
	// Evicted during an upload with nothing after: it stays evicted.
	g.gate = make(chan struct{})
	st.Evict(bs...)
	f := st.FaultIn(context.Background(), bs)
	(&vmm.Arena{}).Evict(bs...)
	close(g.gate)
	if err := f[0].Wait(); err != nil {
		t.Fatal(err)
	}
	if s := bs[0].State(); s != vmm.Evicted {
		t.Errorf("evicted while loading, then %v", s)
	}
}

// TestStoreFlightsEndUnwaited: every upload ends, setting its binding's
// state, though nobody waits for its fence.
func TestStoreFlightsEndUnwaited(t *testing.T) {
	g := &gatedTransport{gate: make(chan struct{})}
	st := NewStore(nil, g)
	bs := bindings("x", "y")
	st.FaultIn(context.Background(), bs)
	close(g.gate)
	deadline := time.Now().Add(10 * time.Second)
	for bs[0].State() != vmm.Resident || bs[1].State() != vmm.Resident {
		if time.Now().After(deadline) {
			t.Fatalf("states %v %v 10 s after the uploads ended", bs[0].State(), bs[1].State())
		}
		time.Sleep(time.Millisecond)
	}
}

func waitAllErr(fs []Fence) error {
	for _, f := range fs {
		if err := f.Wait(); err != nil {
			return err
		}
	}
	return nil
}

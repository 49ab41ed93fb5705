package transport

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// TestResidentPacks: with ResidentPacks, the first fault reads each
// payload into its place in a region and uploads it as it would without
// (small ones packed, streamed ones on their own); later faults of the
// whole batch upload each region with one scatter of all its members,
// bit for bit. A failed region fails each of its bindings,
// names them and leaves them evicted, and the next fault works.
func TestResidentPacks(t *testing.T) {
	// Streamed payloads only, and small ones too (staged by the packer
	// on the first fault, kept in their places).
	for _, small := range []int64{-1, 0} {
		t.Run(map[int64]string{-1: "Streamed", 0: "WithSmall"}[small], func(t *testing.T) { residentPacks(t, small) })
	}
}

func residentPacks(t *testing.T, small int64) {
	c, src := llama(t)
	payloads := 0
	for _, sh := range src.Shards {
		for _, tn := range sh.Tensors {
			if tn.Stored == shardcache.StoredFixed {
				payloads++
			}
		}
	}
	var scattered atomic.Int64 // payload items scattered
	var fail atomic.Bool
	eng, a, st, tr := setupWith(t, c, src, hostengine.Hooks{Scatter: func(its []scatter.Item) error {
		if fail.Load() {
			return engine.ErrInjected
		}
		for _, it := range its {
			if it.Header != nil {
				scattered.Add(1)
			}
		}
		return nil
	}}, PayloadOptions{Resident: true, ResidentPacks: true, SmallBytes: small, Readers: 3})
	bs := a.Bindings()
	faultAll := func(what string) { t.Helper(); faultCheckEvict(t, eng, st, bs, src, what) }
	faultAll("first fault")
	if n := scattered.Load(); small < 0 && n != 0 {
		t.Fatalf("the first fault scattered %d payloads, want each uploaded on its own", n)
	}
	scattered.Store(0)
	faultAll("re-fault")
	if n := scattered.Load(); n != int64(payloads) {
		t.Fatalf("a re-fault scattered %d payloads of %d", n, payloads)
	}

	// Half of them (as an offload runtime may evict): no region is
	// whole, and each payload is uploaded from its place on its own.
	var half []*vmm.Binding
	for i, b := range bs {
		if i%2 == 0 {
			half = append(half, b)
		}
	}
	scattered.Store(0)
	faultCheckEvict(t, eng, st, half, src, "half")
	if n := scattered.Load(); small < 0 && n != 0 {
		t.Fatalf("half the bindings: %d payloads scattered, want none (no region whole)", n)
	}

	// Every binding with a payload fails (raw ones too where the raw
	// transport packs them).
	fail.Store(true)
	failed := 0
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		hit, herr := c.LookupSlice(bs[i].Shard, bs[i].Offset, bs[i].Size)
		hasPayload := herr == nil && hit.Tensor.Stored == shardcache.StoredFixed
		if err == nil && !hasPayload {
			continue
		}
		if hasPayload {
			failed++
		}
		var te *Error
		if !errors.As(err, &te) || te.Tensor != bs[i].Name || !errors.Is(err, engine.ErrInjected) {
			t.Fatalf("failed region: %s: %v", bs[i].Name, err)
		}
		if bs[i].State() != vmm.Evicted {
			t.Fatalf("failed region: %s is %v", bs[i].Name, bs[i].State())
		}
	}
	if failed != payloads {
		t.Fatalf("%d bindings with payloads failed, want %d", failed, payloads)
	}
	fail.Store(false)
	st.Evict(bs...)
	faultAll("after a failed region")

	tr.Close()
	if eng.PinnedBytes() != 0 {
		t.Errorf("%d pinned bytes left after closing the transports", eng.PinnedBytes())
	}
}

// TestResidentPacksNeedResident: the option alone is refused.
func TestResidentPacksNeedResident(t *testing.T) {
	c, _ := llama(t)
	if _, err := NewPayloads(hostengine.New(1), c, nil, PayloadOptions{ResidentPacks: true}); !errors.Is(err, ErrOption) {
		t.Fatalf("ResidentPacks without Resident: %v", err)
	}
}

// TestPackMembers: members are taken while the region, table room
// included, stays within residentPackBytes.
func TestPackMembers(t *testing.T) {
	mib := uint64(1 << 20)
	for _, c := range []struct {
		sizes []uint64
		n     int
	}{
		{[]uint64{5 * mib, 5 * mib, 5 * mib, 5 * mib}, 3},
		{[]uint64{16 * mib}, 0},
		{[]uint64{8 * mib, 8 * mib}, 1}, // the table does not fit beside both
		{[]uint64{1, 2, 3}, 3},
	} {
		n := packMembers(c.sizes)
		rel, end := packLayout(c.sizes[:n])
		if n != c.n || end > residentPackBytes || end%16 != 0 {
			t.Errorf("%v: %d members in %d bytes, want %d within %d", c.sizes, n, end, c.n, residentPackBytes)
		}
		// Members after the table's room, 16-byte aligned, each clear of
		// the one before, the last inside the region.
		at := align16(scatter.TableBytes(n))
		for i, r := range rel {
			if r != at || r%16 != 0 {
				t.Errorf("%v: member %d at %d, want %d", c.sizes, i, r, at)
			}
			at += align16(c.sizes[i])
		}
		if at != end {
			t.Errorf("%v: members end at %d, the region at %d", c.sizes, at, end)
		}
	}
}

// TestResidentRuns: with ResidentRuns, a raw transport's re-fault of
// bindings side by side in the arena is one copy a run, bit for bit, and
// a failed copy fails each member by name and leaves it evicted.
func TestResidentRuns(t *testing.T) {
	c, src := llama(t)
	var copies atomic.Int64
	var fail atomic.Bool
	eng := hostengine.New(2, hostengine.WithHooks(hostengine.Hooks{Copy: func(engine.DevPtr, int) error {
		if fail.Load() {
			return engine.ErrInjected
		}
		copies.Add(1)
		return nil
	}}))
	defer eng.Close()
	a, err := vmm.New(eng, mustSpecs(t, c, src), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	raw, err := NewRaw(eng, RawOptions{Resident: true, ResidentRuns: true, SmallBytes: -1, Readers: 3})
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(eng, raw)
	bs := a.Bindings()
	faultAll := func(what string) { t.Helper(); faultCheckEvict(t, eng, st, bs, src, what) }
	faultAll("first fault")
	first := copies.Load()
	if first < int64(len(bs))-2 {
		t.Fatalf("the first fault made %d copies for %d bindings, want one each", first, len(bs))
	}
	copies.Store(0)
	faultAll("re-fault")
	if n := copies.Load(); n == 0 || n > first/4 {
		t.Fatalf("a re-fault made %d copies, the first %d: runs were not copied whole", n, first)
	}

	fail.Store(true)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		var te *Error
		if bs[i].Size > 0 && (!errors.As(err, &te) || te.Tensor != bs[i].Name || !errors.Is(err, engine.ErrInjected)) {
			t.Fatalf("failed run copy: %s: %v", bs[i].Name, err)
		}
		if bs[i].Size > 0 && bs[i].State() != vmm.Evicted {
			t.Fatalf("failed run copy: %s is %v", bs[i].Name, bs[i].State())
		}
	}
	fail.Store(false)
	faultAll("after a failed copy")
	raw.Close()
	if eng.PinnedBytes() != 0 {
		t.Errorf("%d pinned bytes left after closing the transport", eng.PinnedBytes())
	}
}

// TestPlanRuns: on random layouts, a run holds two bindings or more, each
// starting where the one before it ends (rounded up to the arena's
// alignment), within residentPackBytes, and no binding is in two runs;
// bindings placed in an earlier batch keep their runs.
func TestPlanRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	runs := 0
	for round := range 50 {
		r, err := NewRaw(hostengine.New(1), RawOptions{Resident: true, ResidentRuns: true})
		if err != nil {
			t.Fatal(err)
		}
		var bs []*vmm.Binding
		addr := uint64(1 << 20)
		for i := range 40 {
			size := uint64(rng.IntN(3<<20)) + 1
			if rng.IntN(8) == 0 {
				addr += vmm.Align // a gap: another transport's binding
			}
			bs = append(bs, &vmm.Binding{Spec: vmm.Spec{Size: size}, Index: i, Addr: vmm.Ptr(addr)})
			addr = (addr + size + vmm.Align - 1) &^ (vmm.Align - 1)
		}
		rng.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		if err := r.planRuns(bs[:20]); err != nil {
			t.Fatal(err)
		}
		before := maps.Clone(r.runs)
		if err := r.planRuns(bs); err != nil {
			t.Fatal(err)
		}
		for b, u := range before {
			if r.runs[b] != u {
				t.Fatalf("round %d: binding %d moved to another run", round, b.Index)
			}
		}
		for _, u := range uniqueRuns(r.runs) {
			runs++
			if len(u.members) < 2 || u.span() > residentPackBytes || u.base != u.members[0].Addr {
				t.Fatalf("round %d: a run of %d members over %d bytes", round, len(u.members), u.span())
			}
			for k := 1; k < len(u.members); k++ {
				p, b := u.members[k-1], u.members[k]
				if uint64(b.Addr) != (uint64(p.Addr)+p.Size+vmm.Align-1)&^(vmm.Align-1) {
					t.Fatalf("round %d: binding %d does not follow binding %d in its run", round, b.Index, p.Index)
				}
				if r.runs[b] != u {
					t.Fatalf("round %d: binding %d is in two runs", round, b.Index)
				}
			}
		}
		r.Close()
	}
	if runs < 50 {
		t.Fatalf("%d runs in 50 layouts: the layouts hardly test anything", runs)
	}
}

// uniqueRuns returns the runs of a binding-to-run map, each once.
func uniqueRuns(m map[*vmm.Binding]*rawRun) []*rawRun {
	seen := map[*rawRun]bool{}
	var out []*rawRun
	for _, u := range m {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out
}

// faultCheckEvict faults bs in, checks them against the source, and
// evicts them; what names the step in failures.
func faultCheckEvict(t *testing.T, eng engine.Engine, st *Store, bs []*vmm.Binding, src *shardcache.Source, what string) {
	t.Helper()
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("%s: %s: %v", what, bs[i].Name, err)
		}
	}
	if err := CheckArena(eng, bs, src); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	st.Evict(bs...)
}

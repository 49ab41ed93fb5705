package transport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// fixture generates and compresses a small checkpoint.
func llama(t *testing.T) (*shardcache.Cache, *shardcache.Source) {
	return fixtureOf(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 11})
}

// fixtureOf generates the checkpoint cfg describes and compresses it.
func fixtureOf(t *testing.T, cfg synth.Config) (*shardcache.Cache, *shardcache.Source) {
	t.Helper()
	return fixture.Compressed(t, cfg, pipeline.CompressOptions{})
}

// mustSpecs returns the arena specs of a source or fails the test.
func mustSpecs(t *testing.T, c *shardcache.Cache, src *shardcache.Source) []vmm.Spec {
	t.Helper()
	specs, err := Specs(c, src)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// setup builds an arena, a payload transport over a raw one, and a store.
func setup(t *testing.T, c *shardcache.Cache, src *shardcache.Source, hooks hostengine.Hooks, resident bool) (*hostengine.Engine, *vmm.Arena, *Store, Transport) {
	t.Helper()
	return setupWith(t, c, src, hooks, PayloadOptions{Resident: resident, Readers: 3})
}

// setupWith is setup with the payload transport's options.
func setupWith(t *testing.T, c *shardcache.Cache, src *shardcache.Source, hooks hostengine.Hooks, opts PayloadOptions) (*hostengine.Engine, *vmm.Arena, *Store, Transport) {
	t.Helper()
	eng := hostengine.New(2, hostengine.WithHooks(hooks))
	t.Cleanup(func() { eng.Close() }) // after what stack made on it (cleanups run last first)
	a, tr, st := stack(t, eng, c, mustSpecs(t, c, src), RawOptions{SlotBytes: 64 << 10, Readers: 3}, &opts)
	return eng, a, st, tr
}

// stack lays specs out in an arena of eng and builds a store over a
// payload transport (po) wrapping a raw one (ro), or over the raw one
// alone when po is nil; the transport and the arena are closed when the
// test ends (the engine is the caller's).
func stack(tb testing.TB, eng engine.Engine, c *shardcache.Cache, specs []vmm.Spec, ro RawOptions, po *PayloadOptions) (*vmm.Arena, Transport, *Store) {
	tb.Helper()
	a, err := vmm.New(eng, specs, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	raw, err := NewRaw(eng, ro)
	if err != nil {
		tb.Fatal(err)
	}
	var tr Transport = raw
	if po != nil {
		if tr, err = NewPayloads(eng, c, raw, *po); err != nil {
			raw.Close()
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() { tr.Close() })
	return a, tr, NewStore(eng, tr)
}

// loadAll faults every tensor of src in through a payload transport over
// a raw one (keeping payloads resident or not), twice with an eviction
// between, checks the arena each time, and that closing the transports
// frees every pinned byte.
func loadAll(t *testing.T, c *shardcache.Cache, src *shardcache.Source, resident bool) {
	t.Helper()
	loadAllWith(t, c, src, hostengine.Hooks{}, PayloadOptions{Resident: resident, Readers: 3})
}

// loadAllWith is loadAll with the engine's hooks and the payload
// transport's options.
func loadAllWith(t *testing.T, c *shardcache.Cache, src *shardcache.Source, hooks hostengine.Hooks, opts PayloadOptions) {
	t.Helper()
	eng, a, st, tr := setupWith(t, c, src, hooks, opts)
	bs := a.Bindings()
	for run := range 2 {
		for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
			if err != nil {
				t.Fatalf("run %d: %s: %v", run+1, bs[i].Name, err)
			}
		}
		if err := CheckArena(eng, bs, src); err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		st.Evict(bs...)
	}
	tr.Close()
	if eng.PinnedBytes() != 0 {
		t.Errorf("%d pinned bytes left after closing the transports", eng.PinnedBytes())
	}
}

func waitAll(fs []Fence) []error {
	errs := make([]error, len(fs))
	for i, f := range fs {
		errs[i] = f.Wait()
	}
	return errs
}

func TestConcurrentFaultsUploadOnce(t *testing.T) {
	c, src := llama(t)
	// A binding's upload copies to its start once (raw) or decodes there
	// once (payload), whether packed or not.
	var mu sync.Mutex
	copies, decodes := map[engine.DevPtr]int{}, map[engine.DevPtr]int{}
	count := func(m map[engine.DevPtr]int, p engine.DevPtr) error { mu.Lock(); m[p]++; mu.Unlock(); return nil }
	_, a, st, _ := setup(t, c, src, hostengine.Hooks{
		Copy:   func(p engine.DevPtr, _ int) error { return count(copies, p) },
		Decode: func(p engine.DevPtr, _ payload.Head) error { return count(decodes, p) },
	}, true)
	bs := a.Bindings()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
				if err != nil {
					t.Errorf("%s: %v", bs[i].Name, err)
				}
			}
		})
	}
	wg.Wait()
	for _, b := range bs {
		m, what := copies, "copies"
		if hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size); err == nil && hit.Tensor.Stored == shardcache.StoredFixed {
			m, what = decodes, "decodes"
		}
		if m[b.Addr] != 1 {
			t.Errorf("%s: %d %s for 8 concurrent fault-ins, want 1", b.Name, m[b.Addr], what)
		}
	}
	for _, b := range bs {
		if b.State() != vmm.Resident {
			t.Fatalf("%s is %v", b.Name, b.State())
		}
	}
}

// payloadBinding returns a binding served by a payload and one that is not.
func payloadBinding(t *testing.T, c *shardcache.Cache, a *vmm.Arena) (pz, raw *vmm.Binding) {
	for _, b := range a.Bindings() {
		hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size)
		if err == nil && hit.Tensor.Stored == shardcache.StoredFixed {
			if pz == nil || b.Size > pz.Size {
				pz = b
			}
		} else if raw == nil {
			raw = b
		}
	}
	if pz == nil || raw == nil {
		t.Fatal("fixture lacks payload or raw tensors")
	}
	return pz, raw
}

func TestFaults(t *testing.T) {
	c, src := llama(t)
	var failCopy, failDecode atomic.Uint64
	hooks := hostengine.Hooks{
		Copy: func(dst engine.DevPtr, n int) error {
			if uint64(dst) == failCopy.Load() {
				return engine.ErrInjected
			}
			return nil
		},
		Decode: func(dst engine.DevPtr, h payload.Head) error {
			if uint64(dst) == failDecode.Load() {
				return engine.ErrInjected
			}
			return nil
		},
	}
	eng, a, st, tr := setup(t, c, src, hooks, false)
	pz, raw := payloadBinding(t, c, a)
	others := func() []*vmm.Binding {
		var out []*vmm.Binding
		for _, b := range a.Bindings() {
			if b != pz && b != raw {
				out = append(out, b)
			}
		}
		return out
	}()

	expectFail := func(what string, b *vmm.Binding, target error) {
		t.Helper()
		err := st.FaultIn(context.Background(), []*vmm.Binding{b})[0].Wait()
		var te *Error
		if !errors.As(err, &te) || te.Tensor != b.Name || !errors.Is(err, target) {
			t.Fatalf("%s: %v, want an error naming %q matching %v", what, err, b.Name, target)
		}
		if b.State() != vmm.Evicted {
			t.Fatalf("%s: binding is %v after a failed fault", what, b.State())
		}
		// Other bindings still fault in.
		for i, err := range waitAll(st.FaultIn(context.Background(), others)) {
			if err != nil {
				t.Fatalf("%s: then %s: %v", what, others[i].Name, err)
			}
		}
		st.Evict(others...)
	}

	failCopy.Store(uint64(pz.Addr))
	expectFail("failed DMA of a payload", pz, engine.ErrInjected)
	failCopy.Store(uint64(raw.Addr))
	expectFail("failed DMA of a raw tensor", raw, engine.ErrInjected)
	failCopy.Store(0)
	failDecode.Store(uint64(pz.Addr))
	expectFail("failed decode", pz, engine.ErrInjected)
	failDecode.Store(0)

	// A payload whose bytes changed on disk fails its checksum.
	hit, _ := c.LookupSlice(pz.Shard, pz.Offset, pz.Size)
	o, _ := c.Lookup(hit.Tensor.Key)
	restore := cachetest.Flip(t, c, hit.Tensor.Key, int64(o.Size/2), 0x08)
	expectFail("corrupt payload", pz, codec.ErrChecksum)
	restore()
	if err := st.FaultIn(context.Background(), []*vmm.Binding{pz})[0].Wait(); err != nil {
		t.Fatalf("after repair: %v", err)
	}

	// A truncated source shard: raw tensors fail with a short read.
	last := a.Bindings()[0]
	for _, b := range a.Bindings() {
		if b.Shard == raw.Shard && b.Offset > last.Offset {
			last = b
		}
	}
	// An arena made before the shard is truncated faults in from it after.
	_, a2, st2, _ := setup(t, c, src, hostengine.Hooks{}, false)
	if err := os.Truncate(raw.Shard, int64(last.Offset+last.Size/2)); err != nil {
		t.Fatal(err)
	}
	// A new arena refuses the changed shard before it is sized from it.
	if _, err := Specs(c, src); !errors.Is(err, shardcache.ErrSourceChanged) {
		t.Errorf("specs of a truncated shard: %v", err)
	}
	b2, _ := a2.Lookup(last.Name)
	err := st2.FaultIn(context.Background(), []*vmm.Binding{b2})[0].Wait()
	if err == nil {
		t.Fatal("fault from a truncated shard succeeded")
	}
	var te *Error
	if !errors.As(err, &te) || te.Tensor != last.Name {
		t.Errorf("truncated shard: %v does not name %q", err, last.Name)
	}
	if !errors.Is(err, ErrShortRead) && !errors.Is(err, shardcache.ErrSourceChanged) {
		t.Errorf("truncated shard: %v", err)
	}
	if tr.PinnedBytes() == 0 || eng.PinnedBytes() != tr.PinnedBytes() {
		t.Errorf("pinned accounting: transport %d, engine %d", tr.PinnedBytes(), eng.PinnedBytes())
	}
}

func TestArenaOutOfMemory(t *testing.T) {
	c, src := llama(t)
	calls := 0
	eng := hostengine.New(1, hostengine.WithHooks(hostengine.Hooks{Map: func(uint64) error {
		calls++
		if calls > 1 {
			return engine.ErrInjected
		}
		return nil
	}}))
	defer eng.Close()
	specs := mustSpecs(t, c, src)
	specs = append(specs, vmm.Spec{Name: "huge", Size: 1 << 30})
	if _, err := vmm.New(eng, specs, 64<<10); !errors.Is(err, engine.ErrInjected) {
		t.Fatalf("arena out of memory: %v", err)
	}
	if n := eng.ReservedRanges(); n != 0 {
		t.Errorf("%d ranges left reserved after a failed arena", n)
	}
}

func TestResidentReFaultReadsNoFile(t *testing.T) {
	c, src := llama(t)
	_, a, st, _ := setup(t, c, src, hostengine.Hooks{}, true)
	bs := a.Bindings()
	for _, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Remove every payload object: re-faults must come from pinned memory.
	pz, _ := payloadBinding(t, c, a)
	hit, _ := c.LookupSlice(pz.Shard, pz.Offset, pz.Size)
	cachetest.Remove(t, c, hit.Tensor.Key)
	st.Evict(pz)
	if err := st.FaultIn(context.Background(), []*vmm.Binding{pz})[0].Wait(); err != nil {
		t.Fatalf("resident re-fault read a file: %v", err)
	}
	if err := CheckArena(st.eng, []*vmm.Binding{pz}, src); err != nil {
		t.Fatal(err)
	}
}

// TestOptionsRefused: options out of range are errors where they are
// built, not silently clamped; zero means the default.
func TestOptionsRefused(t *testing.T) {
	c, _ := llama(t)
	eng := hostengine.New(2)
	defer eng.Close()
	for name, o := range map[string]RawOptions{
		"negative readers":  {Readers: -1},
		"negative slots":    {Slots: -2},
		"odd slot size":     {SlotBytes: 1000},
		"too large packing": {SmallBytes: MaxSmallBytes + 1},
	} {
		if _, err := NewRaw(eng, o); !errors.Is(err, ErrOption) {
			t.Errorf("NewRaw, %s: %v", name, err)
		}
	}
	raw, err := NewRaw(eng, RawOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := NewPayloads(eng, c, raw, PayloadOptions{RingPieces: -1}); !errors.Is(err, ErrOption) {
		t.Errorf("NewPayloads with negative ring pieces: %v", err)
	}
}

// TestCancel: a context ended in the middle of a batch stops the reads not
// yet started; their bindings stay evicted with an error naming the tensor
// and the context's error, staging returns to what it was, and later
// faults work.
func TestCancel(t *testing.T) {
	c, src := llama(t)
	var copies atomic.Int64
	var cancel atomic.Pointer[context.CancelFunc]
	hooks := hostengine.Hooks{Copy: func(engine.DevPtr, int) error {
		if copies.Add(1) == 3 {
			if f := cancel.Load(); f != nil {
				(*f)()
			}
		}
		return nil
	}}
	eng, a, st, tr := setup(t, c, src, hooks, false)
	bs := a.Bindings()
	for _, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	st.Evict(bs...)
	pinned := tr.PinnedBytes()
	// Bindings faulted one batch at a time, as a loader asks layer by
	// layer; the context ends during the third copy, so later batches,
	// and reads of the batch in flight not yet started, are not read.
	ctx, stop := context.WithCancel(context.Background())
	cancel.Store(&stop)
	copies.Store(0)
	failed := 0
	for _, b := range bs {
		err := st.FaultIn(ctx, []*vmm.Binding{b})[0].Wait()
		if err == nil {
			continue
		}
		failed++
		var te *Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &te) || te.Tensor != b.Name {
			t.Errorf("%s: %v", b.Name, err)
		}
		if b.State() != vmm.Evicted {
			t.Errorf("%s: state %v after a canceled fault", b.Name, b.State())
		}
	}
	if failed == 0 || failed == len(bs) {
		t.Fatalf("%d of %d bindings canceled, want some", failed, len(bs))
	}
	// A whole batch under an ended context reads nothing.
	st.Evict(bs...)
	for i, err := range waitAll(st.FaultIn(ctx, bs)) {
		if !errors.Is(err, context.Canceled) || bs[i].State() != vmm.Evicted {
			t.Errorf("%s under an ended context: %v, state %v", bs[i].Name, err, bs[i].State())
		}
	}
	if tr.PinnedBytes() != pinned {
		t.Errorf("pinned %d bytes after a canceled batch, %d before", tr.PinnedBytes(), pinned)
	}
	cancel.Store(nil)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("%s after a canceled batch: %v", bs[i].Name, err)
		}
	}
	if err := CheckArena(eng, bs, src); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d bindings canceled", failed, len(bs))
}

// TestPinnedLimit: the staging rings shrink, the largest first, to fit the
// cap; a cap below the smallest staging is refused.
func TestPinnedLimit(t *testing.T) {
	full := Staging{RawSlots: 16, Pieces: 18, PackSlots: 18}
	got, err := capStaging(full, 128<<20, false)
	if err != nil || got.PinnedBytes() > 128<<20 || got.RawSlots < 1 || got.Pieces < 2 || got.PackSlots < 2 {
		t.Fatalf("capped to %+v (%d bytes), %v", got, got.PinnedBytes(), err)
	}
	if got, _ := capStaging(full, 1<<40, false); got != full {
		t.Errorf("a cap above the need changed the rings: %+v", got)
	}
	if r, err := capStaging(full, 64<<20, true); err != nil || r.Pieces != 0 || r.PinnedBytes() > 64<<20 {
		t.Errorf("raw staging under 64 MiB: %+v, %v", r, err)
	}
	if _, err := capStaging(full, 1<<20, false); !errors.Is(err, ErrOption) {
		t.Errorf("a 1 MiB cap: %v", err)
	}
}

// TestRemotePieces: a remote cache's payloads are staged and read in
// pieces of remotePiece (a read each), a local cache's of readPiece; a
// load from the remote view is bit for bit the source's.
func TestRemotePieces(t *testing.T) {
	// Hidden 2048: MLP tensors of 22.5 MB, payloads of just over 16 MiB.
	// Self-contained, as a pushed cache is.
	c, src := fixture.Compressed(t, synth.Config{Bytes: 96 << 20, Hidden: 2048, Shards: 1, Seed: 5}, pipeline.CompressOptions{SelfContained: true})
	rc, files := fixture.Remote(c)
	rsrc, err := rc.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	specs := mustSpecs(t, rc, rsrc)
	for _, tc := range []struct {
		c     *shardcache.Cache
		piece uint64
	}{{c, readPiece}, {rc, remotePiece}} {
		s, err := PlanStaging(tc.c, specs, 2, 0, false, true, -1)
		if err != nil || s.PieceBytes != tc.piece || s.PinnedBytes() != uint64(s.RawSlots)*rawSlotBytes+uint64(s.Pieces)*tc.piece+uint64(s.PackSlots)*packBytes {
			t.Fatalf("remote %v: staging %+v (%d pinned bytes), %v; want pieces of %d", tc.c.Remote(), s, s.PinnedBytes(), err, tc.piece)
		}
	}
	// Capping counts pieces at their size: room for 4 of 16 MiB keeps 4
	// (pieces of 8 MiB counted would keep 8).
	full := Staging{RawSlots: 1, Pieces: 10, PackSlots: 2, PieceBytes: remotePiece}
	if got, err := capStaging(full, rawSlotBytes+4*remotePiece+2*packBytes, false); err != nil || got.Pieces != 4 || got.RawSlots != 1 || got.PackSlots != 2 {
		t.Errorf("capped to %+v, %v; want 4 pieces", got, err)
	}
	stage, err := PlanStaging(rc, specs, 3, 0, false, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	eng := hostengine.New(2)
	t.Cleanup(func() { eng.Close() })
	a, _, st := stack(t, eng, rc, specs, RawOptions{Readers: 3, Cache: rc}, &PayloadOptions{Readers: 3, RingPieces: stage.Pieces})
	bs := a.Bindings()
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("%s: %v", bs[i].Name, err)
		}
	}
	if err := CheckArena(eng, bs, src); err != nil {
		t.Fatal(err)
	}
	whole := 0
	for _, n := range files.Reads() {
		if n > remotePiece {
			t.Fatalf("a read of %d bytes from the remote cache, pieces are %d", n, remotePiece)
		}
		whole += btoi(n == remotePiece)
	}
	if whole == 0 {
		t.Errorf("no payload read in a whole %d-byte piece (%d reads)", remotePiece, len(files.Reads()))
	}
}

// TestStagingCopies: a streamed load of a remote cache whose tensors are
// all stored raw stages their copies in payload pieces, as many as its
// payloads would get (it had two: a streamed raw cache loaded at a fifth
// of a payload cache's rate on an H100); a resident load's copies go
// through the raw ring, as before.
func TestStagingCopies(t *testing.T) {
	c, _ := fixture.Compressed(t, synth.Config{Bytes: 96 << 20, Hidden: 2048, Shards: 1, Seed: 5}, pipeline.CompressOptions{SelfContained: true, MinSaving: 0.99})
	rc, _ := fixture.Remote(c)
	rsrc, err := rc.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	specs := mustSpecs(t, rc, rsrc)
	const readers = 4
	streamed, err := PlanStaging(rc, specs, readers, 0, false, true, -1)
	if err != nil {
		t.Fatal(err)
	}
	var bytes uint64
	for _, s := range specs {
		bytes += s.Size
	}
	if want := min(piecesPerReader*readers+2, int((bytes+remotePiece-1)/remotePiece)+2); streamed.Pieces != want || want <= 2 {
		t.Errorf("streamed: %d payload pieces, want %d (%+v)", streamed.Pieces, want, streamed)
	}
	resident, err := PlanStaging(rc, specs, readers, 0, false, false, -1)
	if err != nil {
		t.Fatal(err)
	}
	if want := min(2*readers, int((bytes+rawSlotBytes-1)/rawSlotBytes)+1); resident.Pieces != 2 || resident.RawSlots != want {
		t.Errorf("resident: %d payload pieces and %d raw slots, want 2 and %d (%+v)", resident.Pieces, resident.RawSlots, want, resident)
	}
}

// TestCheckRemoteArena: a load of a remote cache is checked against the
// content keys alone, whatever lies at its sources' paths on this machine
// (another checkpoint of the same size here); CheckArena, which takes a
// file there for the source, finds it differs.
func TestCheckRemoteArena(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Bytes: 8 << 20, Shards: 1, Seed: 6}, pipeline.CompressOptions{SelfContained: true})
	rc, _ := fixture.Remote(c)
	rsrc, err := rc.PickSource("")
	if err != nil {
		t.Fatal(err)
	}
	specs := mustSpecs(t, rc, rsrc)
	eng := hostengine.New(2)
	t.Cleanup(func() { eng.Close() })
	a, _, st := stack(t, eng, rc, specs, RawOptions{Readers: 2, Cache: rc}, &PayloadOptions{Readers: 2})
	bs := a.Bindings()
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("%s: %v", bs[i].Name, err)
		}
	}
	// Another checkpoint of the same size where the source was.
	shard := filepath.Join(src.Root, src.Shards[0].Name)
	other := filepath.Join(t.TempDir(), "other")
	if _, err := synth.Write(context.Background(), other, synth.Config{Bytes: 8 << 20, Shards: 1, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(other, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shard, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckArenaOf(eng, rc, bs, rsrc); err != nil {
		t.Errorf("a remote cache's arena, another file at its source's path: %v", err)
	}
	if err := CheckArena(eng, bs, rsrc); err == nil {
		t.Error("CheckArena took the other file for the source and found it the same")
	}
}

// TestLayerOf: the layer of "model.layers.N." names, and none for others.
func TestLayerOf(t *testing.T) {
	for name, want := range map[string]int{
		"model.layers.0.self_attn.q_proj.weight": 0,
		"model.layers.31.mlp.down_proj.weight":   31,
		"model.layers.007.x":                     7,
		"model.layers.12.":                       12,
		"model.embed_tokens.weight":              -1,
		"model.layers.x.weight":                  -1,
		"model.layers.+1.weight":                 -1,
		"model.layers.-1.weight":                 -1,
		"model.layers.3":                         -1,
		"model.layers..weight":                   -1,
		"model.layers.99999999999999999999.w":    -1,
		"lm_head.weight":                         -1,
	} {
		n, ok := LayerOf(name)
		if got := map[bool]int{true: n, false: -1}[ok]; got != want {
			t.Errorf("LayerOf(%q) = %d, %v; want %d", name, n, ok, want)
		}
	}
}

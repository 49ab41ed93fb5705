package transport

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// smallFixture is a checkpoint of n small tensors (1-64 KiB), compressed.
func smallFixture(t *testing.T, n int) (*shardcache.Cache, *shardcache.Source) {
	return fixtureOf(t, synth.Config{Small: n, Shards: 2, Seed: 5})
}

func TestSingleSmallBindingCopiesDirectly(t *testing.T) {
	c, src := smallFixture(t, 4)
	var scatters atomic.Int64
	_, a, st, _ := setup(t, c, src, hostengine.Hooks{Scatter: func([]scatter.Item) error { scatters.Add(1); return nil }}, false)
	for _, b := range a.Bindings() {
		if err := st.FaultIn(context.Background(), []*vmm.Binding{b})[0].Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckArena(st.eng, a.Bindings(), src); err != nil {
		t.Fatal(err)
	}
	if scatters.Load() != 0 {
		t.Errorf("%d scatters for single bindings, want direct copies", scatters.Load())
	}
}

// failingScatter returns engine hooks whose scatters fail with
// engine.ErrInjected while the flag is set.
func failingScatter() (*atomic.Bool, hostengine.Hooks) {
	fail := new(atomic.Bool)
	return fail, hostengine.Hooks{Scatter: func([]scatter.Item) error {
		if fail.Load() {
			return engine.ErrInjected
		}
		return nil
	}}
}

func TestSmallFaults(t *testing.T) {
	c, src := smallFixture(t, 40)
	failScatter, hooks := failingScatter()
	eng, a, st, tr := setup(t, c, src, hooks, false)
	bs := a.Bindings()

	// A failed pack fails each of its bindings, names them, leaves them
	// evicted; the next fault-in works.
	failScatter.Store(true)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		var te *Error
		if !errors.As(err, &te) || te.Tensor != bs[i].Name || !errors.Is(err, engine.ErrInjected) {
			t.Fatalf("failed pack: %s: %v", bs[i].Name, err)
		}
		if bs[i].State() != vmm.Evicted {
			t.Fatalf("failed pack: %s is %v", bs[i].Name, bs[i].State())
		}
	}
	failScatter.Store(false)
	for _, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("after a failed pack: %v", err)
		}
	}
	st.Evict(bs...)

	// A corrupt payload fails only its own binding; its pack mates land.
	victim := bs[len(bs)/2]
	hit, _ := c.LookupSlice(victim.Shard, victim.Offset, victim.Size)
	restore := cachetest.Flip(t, c, hit.Tensor.Key, -1, 0x40)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if bs[i] == victim {
			var te *Error
			if !errors.As(err, &te) || te.Tensor != victim.Name || !errors.Is(err, codec.ErrChecksum) {
				t.Fatalf("corrupt small payload: %v", err)
			}
			// A pack member's error says where in its pack it lies.
			if loc, _, _ := c.Locate(hit.Tensor.Key); loc.Pack == "" || !strings.Contains(err.Error(), fmt.Sprintf("bytes [%d:+%d] of the pack", loc.Offset, loc.Size)) {
				t.Errorf("corrupt pack member at [%d:+%d]: %v", loc.Offset, loc.Size, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s next to a corrupt payload: %v", bs[i].Name, err)
		}
	}
	if victim.State() != vmm.Evicted {
		t.Errorf("corrupt payload's binding is %v", victim.State())
	}
	restore()
	if err := st.FaultIn(context.Background(), []*vmm.Binding{victim})[0].Wait(); err != nil {
		t.Fatalf("after repair: %v", err)
	}
	if err := CheckArena(eng, bs, src); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	if eng.PinnedBytes() != 0 {
		t.Errorf("%d pinned bytes leaked", eng.PinnedBytes())
	}
}

// TestPlanPacks: items side by side in a file, at offsets 16 bytes apart
// or a multiple of that, share one read; a misaligned neighbour joins a
// short read bounced (each item in a slot of its own); a wide gap or
// another file starts a new one; items with their own fill are staged
// after the reads; no plan outgrows a staging buffer.
func TestPlanPacks(t *testing.T) {
	b := &vmm.Binding{}
	item := func(file string, off, n uint64) smallItem {
		it := smallItem{b: b, stored: n, file: file, off: off}
		if file == "" {
			it.fill = func([]byte) (*codec.Header, error) { return nil, nil }
		}
		return it
	}
	pls := planPacks([]smallItem{
		item("p", 4096, 100), // sorted before the next
		item("", 0, 50),
		item("p", 0, 1000),
		item("p", 1008, 3000), // aligned after the first
		item("p", 4096+112+maxGap+16, 10),
		item("p", 4096+112+maxGap+16+24, 10), // misaligned
		item("q", 0, 10),
	})
	if len(pls) != 1 {
		t.Fatalf("%d plans", len(pls))
	}
	pl := pls[0]
	var got []string
	for _, r := range pl.reads {
		got = append(got, fmt.Sprintf("%s@%d+%d:%d-%d", r.file, r.off, r.n, r.first, r.last))
	}
	want := []string{"p@0+4196:0-3", "p@20608+34:3-5", "q@0+10:5-6"}
	if !slices.Equal(got, want) {
		t.Errorf("reads %v, want %v", got, want)
	}
	for k, it := range pl.items {
		if pl.rel[k]%16 != 0 {
			t.Errorf("item %d at %d, not aligned", k, pl.rel[k])
		}
		if k > 0 && pl.rel[k] < pl.rel[k-1]+pl.items[k-1].stored {
			t.Errorf("item %d at %d overlaps its predecessor", k, pl.rel[k])
		}
		if it.file != "" && k >= len(pl.items)-1 {
			t.Errorf("a file item staged after the fill item")
		}
	}
	for _, r := range pl.reads {
		if r.bounce != (r.first == 3) {
			t.Errorf("read of items %d-%d: bounce %v", r.first, r.last, r.bounce)
		}
		for k := r.first; k < r.last && !r.bounce; k++ {
			if pl.rel[k]-r.rel != pl.items[k].off-r.off {
				t.Errorf("item %d does not lie where its read puts it", k)
			}
		}
	}
	// Tiny neighbours 8 bytes apart (int64 counters beside odd-length
	// tensors): one bounced read a bounceBytes run, an aligned item after
	// a misaligned one in a slot of its own, no slots overlapping.
	var tiny []smallItem
	for i := range uint64(6000) {
		tiny = append(tiny, item("p", i*24, 8), item("p", i*24+8, 16))
	}
	pl = planPacks(tiny)[0]
	for _, r := range pl.reads {
		if !r.bounce || r.n > bounceBytes || r.n < bounceBytes-24 && r.last < len(pl.items) {
			t.Errorf("tiny neighbours: read @%d+%d of items %d-%d, bounce %v", r.off, r.n, r.first, r.last, r.bounce)
		}
	}
	if want := (len(tiny)*12 + bounceBytes - 1) / bounceBytes; len(pl.reads) != want {
		t.Errorf("tiny neighbours: %d reads, want %d", len(pl.reads), want)
	}
	for k := 1; k < len(pl.items); k++ {
		if pl.rel[k]%16 != 0 || pl.rel[k] < pl.rel[k-1]+pl.items[k-1].stored {
			t.Fatalf("tiny item %d at %d: misaligned or over its predecessor", k, pl.rel[k])
		}
	}
	// Many items: several plans, each within a staging buffer.
	var many []smallItem
	for i := range 2000 {
		many = append(many, item("p", uint64(i)*8192, 8000))
	}
	pls = planPacks(many)
	n := 0
	for _, pl := range pls {
		n += len(pl.items)
		if pl.bytes() > packBytes {
			t.Errorf("plan of %d bytes", pl.bytes())
		}
		if len(pl.reads) != 1 {
			t.Errorf("plan of contiguous items in %d reads", len(pl.reads))
		}
	}
	if n != 2000 || len(pls) > 2000*8192/packBytes+1 {
		t.Errorf("%d items in %d plans", n, len(pls))
	}
	// Payloads decoded in place (read set): one whose slot is larger than
	// its bytes joins the read before it and ends it; one whose slot is
	// its bytes lets the next join.
	inPlace := func(off, read, stored uint64) smallItem {
		it := item("p", off, stored)
		it.read = read
		return it
	}
	pl = planPacks([]smallItem{
		item("p", 0, 100),
		inPlace(112, 50, 400), // joins, then ends the read
		item("p", 176, 64),    // a read of its own, after the slot
		inPlace(240, 32, 32),  // joins: its slot is its bytes
		item("p", 272, 16),    // joins
	})[0]
	got = got[:0]
	for _, r := range pl.reads {
		got = append(got, fmt.Sprintf("%s@%d+%d:%d-%d", r.file, r.off, r.n, r.first, r.last))
	}
	want = []string{"p@0+162:0-2", "p@176+112:2-5"}
	if !slices.Equal(got, want) {
		t.Errorf("in-place reads %v, want %v", got, want)
	}
	for k := 1; k < len(pl.items); k++ {
		if pl.rel[k] < pl.rel[k-1]+pl.items[k-1].stored {
			t.Errorf("in-place item %d at %d overlaps its predecessor", k, pl.rel[k])
		}
	}
}

// TestSmallMisaligned loads checkpoints whose tensors lie at offsets that
// are not multiples of 16 (int64 counters and three-value tensors between
// weights, as in a network with batch norms; and random layouts of tiny
// tensors of odd byte lengths): the bounced reads land every tensor bit
// for bit, raw and through payloads in packs.
func TestSmallMisaligned(t *testing.T) {
	t.Run("batch-norms", func(t *testing.T) {
		loadMisaligned(t, 3, func(add func(name, dtype, shape string, b []byte), rng *rand.Rand) {
			for i := range 150 {
				add(fmt.Sprintf("l%d.weight", i), "BF16", "32,32", bf16Normal(rng, 1024))
				add(fmt.Sprintf("l%d.steps", i), "I64", "", []byte{byte(i), 0, 0, 0, 0, 0, 0, 1})
				add(fmt.Sprintf("l%d.scale", i), "BF16", "3", bf16Normal(rng, 3))
			}
		})
	})
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("random-%d", seed), func(t *testing.T) {
			loadMisaligned(t, seed, func(add func(name, dtype, shape string, b []byte), rng *rand.Rand) {
				for i := range 400 {
					switch rng.IntN(4) {
					case 0: // a weight its payload codes
						n := 16 * (32 + rng.IntN(512))
						add(fmt.Sprintf("t%d", i), "BF16", fmt.Sprint(n), bf16Normal(rng, n))
					case 1: // bytes of any length
						b := make([]byte, 1+rng.IntN(300))
						for k := range b {
							b[k] = byte(rng.Uint32())
						}
						add(fmt.Sprintf("t%d", i), "U8", fmt.Sprint(len(b)), b)
					case 2:
						n := 1 + rng.IntN(9)
						add(fmt.Sprintf("t%d", i), "BF16", fmt.Sprint(n), bf16Normal(rng, n))
					default:
						add(fmt.Sprintf("t%d", i), "I64", "", binary.LittleEndian.AppendUint64(nil, rng.Uint64()))
					}
				}
			})
		})
	}
}

// bf16Normal returns n BF16 values drawn from N(0, 0.02).
func bf16Normal(rng *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		v := math.Float32bits(float32(rng.NormFloat64() * 0.02))
		b[2*i], b[2*i+1] = byte(v>>16), byte(v>>24)
	}
	return b
}

// loadMisaligned writes the checkpoint build lays out (one file, tensors
// in the order added), compresses it and loads it through a payload
// transport and through a raw one, checking every tensor.
func loadMisaligned(t *testing.T, seed uint64, build func(add func(name, dtype, shape string, b []byte), rng *rand.Rand)) {
	dir, out := t.TempDir(), filepath.Join(t.TempDir(), "cache")
	path := filepath.Join(dir, "model.safetensors")
	var specs []string
	var data []byte
	build(func(name, dtype, shape string, b []byte) {
		specs = append(specs, fmt.Sprintf("%q:{\"dtype\":%q,\"shape\":[%s],\"data_offsets\":[%d,%d]}", name, dtype, shape, len(data), len(data)+len(b)))
		data = append(data, b...)
	}, rand.New(rand.NewPCG(seed, 4)))
	hdr := []byte("{" + strings.Join(specs, ",") + "}")
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	if err := os.WriteFile(path, append(append(file, hdr...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(context.Background(), path, pipeline.CompressOptions{Output: out, Jobs: 2, MinSaving: pipeline.DefaultMinSaving, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Index().Packs().Packs == 0 {
		t.Fatal("no packs in the fixture")
	}
	src := &c.Index().Sources[0]
	loadAll(t, c, src, false)
	eng := hostengine.New(2)
	t.Cleanup(func() { eng.Close() })
	a, _, st := stack(t, eng, c, mustSpecs(t, c, src), RawOptions{SlotBytes: 64 << 10, Readers: 3}, nil)
	for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
		if err != nil {
			t.Fatalf("raw: %s: %v", a.Bindings()[i].Name, err)
		}
	}
	if err := CheckArena(eng, a.Bindings(), src); err != nil {
		t.Fatalf("raw: %v", err)
	}
}

// TestResidentSmallFromPacks: a resident transport stages its first fault
// of packed small payloads from the pack files, with a read per run of
// members, and keeps them: with every pack file gone, re-faults still
// land bit for bit.
func TestResidentSmallFromPacks(t *testing.T) {
	c, src := smallFixture(t, 300)
	if c.Index().Packs().Packs == 0 {
		t.Fatal("no packs in the fixture")
	}
	eng, a, st, tr := setup(t, c, src, hostengine.Hooks{}, true)
	bs := a.Bindings()
	for _, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatal(err)
		}
	}
	removed := map[string]bool{}
	for _, b := range bs {
		hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size)
		if err != nil {
			continue
		}
		loc, _, err := c.Locate(hit.Tensor.Key)
		if err == nil && !removed[loc.Path] {
			removed[loc.Path] = true
			os.Remove(loc.Path)
		}
	}
	st.Evict(bs...)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		if err != nil {
			t.Fatalf("%s re-faulted from resident memory: %v", bs[i].Name, err)
		}
	}
	if err := CheckArena(eng, bs, src); err != nil {
		t.Fatal(err)
	}
	if s := tr.Stats(); s.Read == 0 {
		t.Error("no read time recorded for the first fault")
	}
}

// TestStreamedPackMembers: payloads too large to pack with others at load
// time (above SmallBytes) but stored in packs (a cache written with a
// large --pack-max) stream from their pack's range, kept open, and land
// bit for bit; a corrupt one fails naming its range of the pack.
func TestStreamedPackMembers(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Mix: 80, Shards: 2, Seed: 9}, pipeline.CompressOptions{PackMax: shardcache.MaxPackMax})
	var streamed *vmm.Binding
	_, a, st, _ := setup(t, c, src, hostengine.Hooks{}, false)
	for _, b := range a.Bindings() {
		hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size)
		if err != nil || hit.Tensor.Stored != shardcache.StoredFixed {
			continue
		}
		if o, _ := c.Lookup(hit.Tensor.Key); o.Pack != "" && o.Size > DefaultSmallBytes {
			streamed = b
			break
		}
	}
	if streamed == nil {
		t.Fatal("no packed payload above the packing threshold in the fixture")
	}
	fds := fixture.OpenFiles(t)
	loadAll(t, c, src, false)
	if n := fixture.OpenFiles(t); n > fds {
		t.Errorf("%d descriptors open after the load, %d before", n, fds)
	}
	hit, _ := c.LookupSlice(streamed.Shard, streamed.Offset, streamed.Size)
	restore := cachetest.Flip(t, c, hit.Tensor.Key, -1, 0x40)
	err := st.FaultIn(context.Background(), []*vmm.Binding{streamed})[0].Wait()
	loc, _, _ := c.Locate(hit.Tensor.Key)
	if !errors.Is(err, codec.ErrChecksum) || !strings.Contains(err.Error(), loc.Name()) {
		t.Errorf("corrupt streamed pack member: %v; want a checksum error naming %s", err, loc.Name())
	}
	restore()
	if err := st.FaultIn(context.Background(), []*vmm.Binding{streamed})[0].Wait(); err != nil {
		t.Fatalf("after repair: %v", err)
	}
}

// TestSortItems: sortItems orders like a stable sort by file (none last)
// then offset, for batches of few and of many files, in order or not.
func TestSortItems(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for r := range 500 {
		nf := 1 + rng.IntN(12) // past maxSortFiles too
		n := rng.IntN(200)
		items := make([]smallItem, n)
		for k := range items {
			f := rng.IntN(nf + 1)
			if f < nf {
				items[k].file = fmt.Sprintf("f%02d", f)
			}
			items[k].off = uint64(rng.IntN(50))
			switch r % 3 {
			case 0:
				items[k].off = uint64(k) // in offset order within each file
			case 1:
				// Two runs in offset order (items read through after a
				// shard's own), equal offsets in both.
				items[k].off = uint64(k % (n/2 + 1))
			}
			items[k].i = k
		}
		want := slices.Clone(items)
		slices.SortStableFunc(want, func(a, b smallItem) int { return fileOrder(&a, &b) })
		sortItems(items)
		for k := range items {
			if items[k].i != want[k].i {
				t.Fatalf("run %d (%d files, %d items): item %d is %d, want %d", r, nf, n, k, items[k].i, want[k].i)
			}
		}
	}
}

// TestReadThrough: a payload item whose tensor's source bytes lie within
// a staged read of its shard, or next to one, becomes that raw item,
// joining the read (a mirrored one where it keeps 16-byte places, a
// bounced one anyway); one farther than maxGap, or misaligned in a
// mirrored read, stays a payload; the reads of the plans laid out again
// are the shard's, widened, and the pack's without the items read
// through.
func TestReadThrough(t *testing.T) {
	raw := func(off, n uint64) smallItem {
		return smallItem{b: &vmm.Binding{Spec: vmm.Spec{Size: n}}, stored: n, file: "s", off: off}
	}
	payload := func(pack, stored, src, size uint64) smallItem {
		return smallItem{b: &vmm.Binding{Spec: vmm.Spec{Size: size}}, stored: stored, file: "p", off: pack, cached: true, check: &Payloads{}, src: "s", srcOff: src, from: PathFixed}
	}
	items := []smallItem{
		raw(0, 48), raw(96, 32), // a mirrored read s@0+128
		raw(40000, 16), raw(40032, 16), // a mirrored read s@40000+48
		raw(80000, 8), raw(80012, 4), // a bounced read s@80000+16
		payload(0, 36, 48, 48),      // within s@0+128, aligned: read through
		payload(48, 12, 128, 16),    // just past its end: read through
		payload(64, 6, 40020, 8),    // within s@40000+48, misaligned: a payload
		payload(80, 4, 80008, 4),    // within the bounced read: read through
		payload(96, 10, 39984, 16),  // just before s@40000+48: read through
		payload(112, 10, 20000, 16), // farther than maxGap from either: a payload
	}
	reads := func(pls []*plan) []string {
		var got []string
		for _, pl := range pls {
			for _, r := range pl.reads {
				got = append(got, fmt.Sprintf("%s@%d+%d", r.file, r.off, r.n))
			}
		}
		return got
	}
	if n := readThrough(items, planPacks(items)); n != 4 {
		t.Errorf("%d items read through, want 4", n)
	}
	through := map[uint64]bool{}
	for _, it := range items {
		if it.through {
			through[it.off] = true
			if it.file != "s" || it.stored != it.b.Size || it.check != nil || it.cached || it.from != PathFixed {
				t.Errorf("item read through: %+v", it)
			}
		}
	}
	if !through[48] || !through[128] || !through[80008] || !through[39984] {
		t.Errorf("read through: %v, want s@48, s@128, s@80008 and s@39984", through)
	}
	got := reads(planPacks(items))
	want := []string{"p@64+58", "s@0+144", "s@39984+64", "s@80000+16"}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("reads %v, want %v", got, want)
	}
	// An item past maxGap of a read comes within reach once its
	// neighbour joined (a second pass); one that would make a bounced
	// read longer than bounceBytes stays; so does one whose source has no
	// read, or whose bytes a read of the cache's files (a pack's) covers.
	at := func(it smallItem, file string) smallItem {
		it.file = file
		return it
	}
	pay := func(pack, src, size uint64, source string) smallItem {
		it := payload(pack, 8, src, size)
		it.src = source
		return it
	}
	items = []smallItem{
		at(raw(0, 16), "c"),                                              // a mirrored read c@0+16
		pay(0, 16016, 1000, "c"),                                         // 17,000 bytes past its end: joins after the next
		pay(16, 16, 16000, "c"),                                          // next to it: joins, widening it to c@0+16016
		at(raw(0, 8), "d"), at(raw(12, 4), "d"), at(raw(16, 60000), "d"), // a bounced read d@0+60016
		pay(32, 60016, 8000, "d"), // within maxGap of its end, past bounceBytes: a payload
		pay(48, 0, 16, "e"),       // no read of e: a payload
		pay(64, 8, 8, "p"),        // within p's read, a pack's: a payload
	}
	if n := readThrough(items, planPacks(items)); n != 2 {
		t.Errorf("chains and refusals: %d items read through, want 2", n)
	}
	for _, it := range items {
		if want := it.file == "c" && it.off > 0; it.through != want {
			t.Errorf("item of %s@%d: read through %v, want %v", it.file, it.off, it.through, want)
		}
	}
	// Nothing with a source: nothing changes.
	items = []smallItem{raw(0, 48), payload(0, 36, 48, 48)}
	items[1].src = ""
	if n := readThrough(items, planPacks(items)); n != 0 {
		t.Errorf("%d items without a source read through", n)
	}
}

// TestReadRun: stage hands reads to goroutines in runs of at least
// parallelReadBytes, the last run taking what is left.
func TestReadRun(t *testing.T) {
	sizes := func(ns ...uint64) []stagedRead {
		rs := make([]stagedRead, len(ns))
		for k, n := range ns {
			rs[k].n = n
		}
		return rs
	}
	const p = parallelReadBytes
	for _, c := range []struct {
		name  string
		reads []stagedRead
		want  int
	}{
		{"less than a run: all of them", sizes(100, 200, 300), 3},
		{"one read makes a run", sizes(p, 1), 1},
		{"two halves make one", sizes(p/2, p/2, p/2), 2},
		{"exactly a run", sizes(p-1, 1, p), 2},
		{"the read that reaches it ends the run", sizes(10, p-11, 1, 5), 3},
		{"no reads", sizes(), 0},
	} {
		if got := readRun(c.reads); got != c.want {
			t.Errorf("%s: readRun %d, want %d", c.name, got, c.want)
		}
	}
}

// TestPlanPacksEntropyRoom: a pack keeps room for the descriptor of each
// entropy payload the engine may decode (smallItem.dev) after its staged
// bytes, and none is planned past its staging buffer with that room.
func TestPlanPacksEntropyRoom(t *testing.T) {
	b := &vmm.Binding{}
	var items []smallItem
	for k := range 3000 {
		// Payloads of 1,000 bytes in slots of 1,344 (their tensors'), a
		// descriptor each: as many as fit 4 MiB without the descriptors'
		// room would overflow with it.
		items = append(items, smallItem{b: b, stored: 1344, read: 1000, dev: true, file: "p", off: uint64(k) * 1008})
	}
	pls := planPacks(items)
	n := 0
	for _, pl := range pls {
		n += len(pl.items)
		if pl.devs != len(pl.items) {
			t.Errorf("a plan of %d entropy payloads keeps room for %d descriptors", len(pl.items), pl.devs)
		}
		if end := align16(align16(scatter.TableBytes(len(pl.items)))+pl.end) + scatter.EntropyBytes(pl.devs); pl.bytes() != end || end > packBytes {
			t.Errorf("a plan of %d items takes %d bytes (room for descriptors included: %d), a staging buffer has %d", len(pl.items), pl.bytes(), end, packBytes)
		}
	}
	if n != len(items) || len(pls) < 2 {
		t.Errorf("%d plans of %d items, want all %d in two or more", len(pls), n, len(items))
	}
}

// TestPackFallback: an item of a pack whose check (or fill) answers
// errFallback is uploaded by the packer's fallback after the pack, once,
// beside items that land from the pack, and also when the pack's own
// upload fails; every item gets exactly its own fence.
func TestPackFallback(t *testing.T) {
	c, src := smallFixture(t, 6)
	failScatter, hooks := failingScatter()
	eng, a, _, _ := setup(t, c, src, hooks, false)
	bs := a.Bindings()[:4]
	p := newPacker(eng, 2, 0)
	defer p.Close()
	var calls []string
	var mu sync.Mutex
	p.fallback = func(_ context.Context, it *smallItem) Fence {
		mu.Lock()
		calls = append(calls, it.b.Name)
		mu.Unlock()
		return doneFence{}
	}
	for _, fail := range []bool{false, true} {
		failScatter.Store(fail)
		calls = nil
		items := make([]smallItem, len(bs))
		for k, b := range bs {
			items[k] = smallItem{i: k, b: b, stored: b.Size, fill: func(dst []byte) (*codec.Header, error) {
				for i := range dst {
					dst[i] = byte(k + 1)
				}
				if k == 1 {
					return nil, errFallback
				}
				return nil, nil
			}}
		}
		out := make([]Fence, len(bs))
		p.upload(context.Background(), items, out)
		if len(calls) != 1 || calls[0] != bs[1].Name {
			t.Fatalf("fail %v: fallback called for %v, want %s once", fail, calls, bs[1].Name)
		}
		if _, ok := out[1].(doneFence); !ok {
			t.Errorf("fail %v: the fallen-back item's fence is %T, not the fallback's", fail, out[1])
		}
		for k, b := range bs {
			if k == 1 {
				continue
			}
			err := out[k].Wait()
			if fail != (err != nil) {
				t.Errorf("fail %v: %s: %v", fail, b.Name, err)
			}
			if fail {
				continue
			}
			got := make([]byte, b.Size)
			if err := eng.ReadBack(got, b.Addr); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(k + 1)}, int(b.Size))) {
				t.Errorf("%s: its bytes did not land (%v)", b.Name, err)
			}
		}
	}
}

// TestReadStagedParts: readStaged reads a staged read of more than
// splitReadBytes in parts, on other goroutines while p.fills has room and
// here when it has none, the same bytes either way; a part past the
// file's end fails the read.
func TestReadStagedParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shard")
	want := make([]byte, 3*splitReadBytes+12345)
	for i := range want {
		want[i] = byte(i*7 + i>>11)
	}
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	p := newPacker(nil, 2, 0)
	defer p.files.close()
	for _, c := range []struct {
		name      string
		off, n    uint64
		fillsHeld int
	}{
		{"one part", 100, splitReadBytes, 0},
		{"parts, goroutines free", 5, uint64(len(want)) - 5, 0},
		{"parts, some goroutines", 0, uint64(len(want)), cap(p.fills) - 1},
		{"parts, all here", 1, 2*splitReadBytes + 1, cap(p.fills)},
	} {
		for range c.fillsHeld {
			p.fills <- struct{}{}
		}
		got := make([]byte, c.n)
		err := p.readStaged(stagedRead{file: path, off: c.off, n: c.n}, got)
		for range c.fillsHeld {
			<-p.fills
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got, want[c.off:c.off+c.n]) {
			t.Errorf("%s: bytes differ from the file's", c.name)
		}
	}
	err := p.readStaged(stagedRead{file: path, off: splitReadBytes, n: 3 * splitReadBytes}, make([]byte, 3*splitReadBytes))
	if !errors.Is(err, ErrShortRead) {
		t.Errorf("a read past the end: %v, want ErrShortRead", err)
	}
}

// TestReadThroughLoads: loads of checkpoints of tiny tensors, payloads
// (fixed; entropy) between raw ones in a shard, land every tensor bit for
// bit; with ReadThrough, payloads whose bytes the shard's reads pass over
// come raw from the source (counted as raw), so one damaged in the cache
// still loads right; by default, or with the payloads kept resident, none
// is read through, and the damaged one fails its tensor.
func TestReadThroughLoads(t *testing.T) {
	for _, name := range []string{pipeline.CodecFixed, pipeline.CodecEntropy} {
		t.Run(cmp.Or(name, "fixed"), func(t *testing.T) {
			c, src := fixture.Compressed(t, synth.Config{Tiny: 600, Shards: 1, Seed: 21}, pipeline.CompressOptions{Codec: name})
			stored := map[string]int{}
			var damaged shardcache.Key
			for _, tn := range src.Shards[0].Tensors {
				stored[tn.Stored]++
				if tn.Payload() && damaged == "" {
					damaged = tn.Key
				}
			}
			if stored[shardcache.StoredRaw] == 0 || stored[shardcache.StoredRaw] == len(src.Shards[0].Tensors) {
				t.Fatalf("fixture: %v, want payloads and raw tensors", stored)
			}
			defer cachetest.Flip(t, c, damaged, -1, 0xff)()
			payloads := len(src.Shards[0].Tensors) - stored[shardcache.StoredRaw]
			for _, o := range []PayloadOptions{{ReadThrough: true}, {ReadThrough: true, HostEntropy: true}, {}, {ReadThrough: true, Resident: true}} {
				what := fmt.Sprintf("%+v", o)
				o.Readers = 3
				eng := hostengine.New(2)
				t.Cleanup(func() { eng.Close() })
				a, tr, st := stack(t, eng, c, mustSpecs(t, c, src), RawOptions{Readers: 3}, &o)
				failed := 0
				for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
					switch {
					case err == nil:
					case errors.Is(err, codec.ErrChecksum) || errors.Is(err, codec.ErrCorrupt):
						failed++
					default:
						t.Fatalf("%s: %s: %v", what, a.Bindings()[i].Name, err)
					}
				}
				through := int(tr.(*Payloads).Stats().Paths[PathRaw].Tensors) - stored[shardcache.StoredRaw]
				switch {
				case o.ReadThrough && !o.Resident && (through < payloads*9/10 || failed != 0):
					t.Errorf("%s: %d payloads of %d read through, %d tensors failed; want nearly all read through, the damaged one among them", what, through, payloads, failed)
				case (!o.ReadThrough || o.Resident) && (through != 0 || failed != 1):
					t.Errorf("%s: %d payloads read through, %d tensors failed; want none, and the damaged one", what, through, failed)
				}
				if failed == 0 {
					if err := CheckArena(eng, a.Bindings(), src); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
			}
		})
	}
}

package transport

import (
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// TestSharedPacks: a shared copy's layout puts each layer's fixed
// payloads in regions laid out as resident packs, and a transport using
// the copy, mapped read-only as processes that attach map it, uploads
// each whole region with one scatter (its table in the transport's own
// pinned memory) from the first fault on, bit for bit; without
// ResidentPacks it uploads the same payloads one by one.
func TestSharedPacks(t *testing.T) {
	c, src := llama(t)
	specs := mustSpecs(t, c, src)
	l := LayoutShared(c, specs)
	checkSharedLayout(t, c, l)
	layerOfKey := map[shardcache.Key]int{} // the first binding's, as LayoutShared
	for _, s := range specs {
		if hit, err := c.LookupSpec(s.Ref, s.Shard, s.Offset, s.Size); err == nil {
			if _, ok := layerOfKey[hit.Tensor.Key]; !ok {
				layerOfKey[hit.Tensor.Key] = layerOrNone(s.Name)
			}
		}
	}
	members := 0
	for _, pk := range l.Packs {
		members += pk.N
		for j := pk.First; j < pk.First+pk.N; j++ {
			if layerOfKey[l.Keys[j]] != layerOfKey[l.Keys[pk.First]] {
				t.Fatalf("pack at %d holds payloads of layers %d and %d", pk.Off, layerOfKey[l.Keys[pk.First]], layerOfKey[l.Keys[j]])
			}
		}
	}
	if len(l.Packs) < 2 || members < 2*len(l.Packs) {
		t.Fatalf("%d packs of %d payloads in all, of %d payloads: want layers packed", len(l.Packs), members, len(l.Keys))
	}
	if again := LayoutShared(c, specs); again.ID != l.ID || again.Size != l.Size {
		t.Fatalf("the same specs laid out again: %s (%d bytes), first %s (%d)", again.ID, again.Size, l.ID, l.Size)
	}

	buf, err := syscall.Mmap(-1, 0, int(l.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(buf) })
	for _, packs := range []bool{true, false} {
		host := hostengine.New(2)
		t.Cleanup(func() { host.Close() })
		eng := &tableCounter{Engine: host}
		a, tr, st := stack(t, eng, c, specs, RawOptions{SlotBytes: 64 << 10, Readers: 3}, &PayloadOptions{Resident: true, ResidentPacks: packs, Readers: 3})
		z := tr.(*Payloads)
		if packs {
			if err := z.FillShared(l, buf); err != nil {
				t.Fatal(err)
			}
			// From here on a write to the copy faults.
			if err := syscall.Mprotect(buf, syscall.PROT_READ); err != nil {
				t.Fatal(err)
			}
		}
		if err := z.UseShared(l, buf); err != nil {
			t.Fatal(err)
		}
		verify := z.Stats().Verify
		bs := a.Bindings()
		want, wantMembers := 0, 0
		if packs {
			want, wantMembers = len(l.Packs), members
		}
		faults := func(what string, batches [][]*vmm.Binding, want, members int) {
			t.Helper()
			eng.packs.Store(0)
			eng.members.Store(0)
			for _, b := range batches {
				faultCheckEvict(t, eng, st, b, src, what)
			}
			if n, m := eng.packs.Load(), eng.members.Load(); n != int64(want) || m != int64(members) {
				t.Fatalf("packs %v, %s: %d scatters with their tables apart, of %d items; want %d of %d", packs, what, n, m, want, members)
			}
		}
		faults("first fault", [][]*vmm.Binding{bs}, want, wantMembers)
		faults("re-fault", [][]*vmm.Binding{bs}, want, wantMembers)
		// A layer at a time, as loads fault them: each region is whole in
		// its layer's batch.
		byLayer := map[int][]*vmm.Binding{}
		for _, b := range bs {
			byLayer[layerOrNone(b.Name)] = append(byLayer[layerOrNone(b.Name)], b)
		}
		faults("by layer", slices.Collect(maps.Values(byLayer)), want, wantMembers)
		// Half of the bindings: no region is whole, each payload is
		// uploaded from the copy on its own.
		var half []*vmm.Binding
		for i, b := range bs {
			if i%2 == 0 {
				half = append(half, b)
			}
		}
		faults("half", [][]*vmm.Binding{half}, 0, 0)
		if got := z.Stats().Verify; got != verify {
			t.Errorf("packs %v: faults from the shared copy checked payloads for %v", packs, got-verify)
		}
	}
}

// tableCounter counts the submissions whose scatter table is apart from
// their bytes (engine.Work.Table), and their items.
type tableCounter struct {
	*hostengine.Engine
	packs, members atomic.Int64
}

func (e *tableCounter) Submit(s int, w engine.Work) (engine.Event, error) {
	if w.Table != nil {
		e.packs.Add(1)
		e.members.Add(int64(len(w.Items)))
	}
	return e.Engine.Submit(s, w)
}

// layerOrNone is LayerOf's layer, or -1 for a name of no layer.
func layerOrNone(name string) int {
	if n, ok := LayerOf(name); ok {
		return n
	}
	return -1
}

// TestSharedLayoutChecked: a layout whose payloads or packs are not where
// LayoutShared puts them is refused, naming ErrLayout, before the buffer
// is read or written; a layout without packs (entropy payloads only) is
// used as it is.
func TestSharedLayoutChecked(t *testing.T) {
	c, src := llama(t)
	l := LayoutShared(c, mustSpecs(t, c, src))
	_, _, _, tr := setupWith(t, c, src, hostengine.Hooks{}, PayloadOptions{Resident: true, ResidentPacks: true, Readers: 2})
	z := tr.(*Payloads)
	for name, damage := range map[string]func(l *SharedLayout){
		"an offset not 16-byte aligned": func(l *SharedLayout) { l.Offs[len(l.Offs)-1] += 8 },
		"a payload past the buffer":     func(l *SharedLayout) { l.Sizes[len(l.Sizes)-1] = l.Size },
		"two payloads overlapping":      func(l *SharedLayout) { l.Offs[1] = l.Offs[0] },
		"a key twice":                   func(l *SharedLayout) { l.Keys[1] = l.Keys[0] },
		"a pack of one":                 func(l *SharedLayout) { l.Packs[0].N = 1 },
		"a pack of more than there are": func(l *SharedLayout) { l.Packs[0].N = len(l.Keys) + 1 },
		"a pack's bytes short":          func(l *SharedLayout) { l.Packs[0].Bytes -= 16 },
		"packs overlapping":             func(l *SharedLayout) { l.Packs[1].First = l.Packs[0].First },
		"a member moved":                func(l *SharedLayout) { l.Offs[l.Packs[0].First+1] += 16 },
		"fewer sizes than keys":         func(l *SharedLayout) { l.Sizes = l.Sizes[1:] },
	} {
		bad := l
		bad.Keys, bad.Offs, bad.Sizes, bad.Packs = slices.Clone(l.Keys), slices.Clone(l.Offs), slices.Clone(l.Sizes), slices.Clone(l.Packs)
		damage(&bad)
		buf := make([]byte, bad.Size)
		if err := z.FillShared(bad, buf); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: FillShared: %v, want ErrLayout", name, err)
		}
		if err := z.UseShared(bad, buf); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: UseShared: %v, want ErrLayout", name, err)
		}
	}

	ce, srce := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 11}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	le := LayoutShared(ce, mustSpecs(t, ce, srce))
	checkSharedLayout(t, ce, le)
	if len(le.Packs) != 0 {
		t.Fatalf("entropy payloads only: %d packs", len(le.Packs))
	}
	eng, a, st, tre := setupWith(t, ce, srce, hostengine.Hooks{}, PayloadOptions{Resident: true, ResidentPacks: true, Readers: 2})
	ze := tre.(*Payloads)
	buf := make([]byte, le.Size)
	if err := ze.FillShared(le, buf); err != nil {
		t.Fatal(err)
	}
	if err := ze.UseShared(le, buf); err != nil {
		t.Fatal(err)
	}
	faultCheckEvict(t, eng, st, a.Bindings(), srce, "entropy payloads from the shared copy")
}

// checkSharedLayout checks that l places each payload once, 16-byte
// aligned, inside the buffer and clear of the others, the members of
// each pack after room for its table, inside the pack.
func checkSharedLayout(t *testing.T, c *shardcache.Cache, l SharedLayout) {
	t.Helper()
	if len(l.Keys) != len(l.Offs) || len(l.Keys) != len(l.Sizes) || len(l.Keys) == 0 {
		t.Fatalf("layout of %d keys, %d offsets, %d sizes", len(l.Keys), len(l.Offs), len(l.Sizes))
	}
	seen := map[shardcache.Key]bool{}
	var end uint64
	packOf := make([]int, len(l.Keys))
	for i := range packOf {
		packOf[i] = -1
	}
	for p, pk := range l.Packs {
		if pk.Off%16 != 0 || pk.N < 2 || pk.Off+pk.Bytes > l.Size {
			t.Fatalf("pack %d: %+v in a buffer of %d", p, pk, l.Size)
		}
		for j := pk.First; j < pk.First+pk.N; j++ {
			packOf[j] = p
		}
	}
	for i, k := range l.Keys {
		o, err := c.Lookup(k)
		if err != nil || o.Size != l.Sizes[i] || seen[k] {
			t.Fatalf("payload %d (%s): size %d, object %+v, %v, seen %v", i, k, l.Sizes[i], o, err, seen[k])
		}
		seen[k] = true
		lo := end
		if p := packOf[i]; p >= 0 {
			pk := l.Packs[p]
			if i == pk.First {
				lo = pk.Off + align16(scatter.TableBytes(pk.N))
				if pk.Off < end {
					t.Fatalf("pack %d at %d overlaps what comes before (to %d)", p, pk.Off, end)
				}
			}
			if l.Offs[i]+l.Sizes[i] > pk.Off+pk.Bytes {
				t.Fatalf("payload %d ends at %d, past its pack's end %d", i, l.Offs[i]+l.Sizes[i], pk.Off+pk.Bytes)
			}
		}
		if l.Offs[i]%16 != 0 || l.Offs[i] < lo || l.Offs[i]+l.Sizes[i] > l.Size {
			t.Fatalf("payload %d at %d (+%d): want 16-byte aligned, at %d or after, inside %d bytes", i, l.Offs[i], l.Sizes[i], lo, l.Size)
		}
		end = l.Offs[i] + l.Sizes[i]
	}
}

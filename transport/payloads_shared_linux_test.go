package transport

import (
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
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
	layerOfKey := map[shardcache.Key]int{}
	for _, s := range specs {
		if hit, err := c.LookupSpec(s.Ref, s.Shard, s.Offset, s.Size); err == nil {
			n, ok := LayerOf(s.Name)
			layerOfKey[hit.Tensor.Key] = map[bool]int{true: n, false: -1}[ok]
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
		for _, what := range []string{"first fault", "re-fault"} {
			eng.packs.Store(0)
			eng.members.Store(0)
			faultCheckEvict(t, eng, st, bs, src, what)
			want := map[bool]int{true: len(l.Packs), false: 0}[packs]
			if n, m := eng.packs.Load(), eng.members.Load(); n != int64(want) || (packs && m != int64(members)) {
				t.Fatalf("packs %v, %s: %d scatters with their tables apart, of %d items; want %d of %d", packs, what, n, m, want, members)
			}
		}
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

package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// packOf returns where the cache holds b's bytes when they are a pack
// member (ok false otherwise).
func packOf(c *shardcache.Cache, b *vmm.Binding) (shardcache.Location, bool) {
	hit, err := c.LookupSpec(b.Ref, b.Shard, b.Offset, b.Size)
	if err != nil || !hit.Tensor.InCache() {
		return shardcache.Location{}, false
	}
	loc, _, err := c.Locate(hit.Tensor.Key)
	return loc, err == nil && loc.Pack != ""
}

// resize cuts the file at path short by a byte (grow false) or appends
// one, and returns a function that restores it.
func resize(t *testing.T, path string, grow bool) (restore func()) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := orig[:len(orig)-1]
	if grow {
		b = append(append([]byte{}, orig...), 0)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// packSizeFails faults in every binding of a fresh transport over c with
// the pack at pack cut short or grown, and checks that exactly the
// bindings whose bytes lie in that pack fail, each with ErrObjectCorrupt
// naming the tensor, the pack and both sizes, that the others land, and
// that once the pack is repaired the same transport loads them.
func packSizeFails(t *testing.T, c *shardcache.Cache, src *shardcache.Source, opts PayloadOptions, pack string) {
	for _, grow := range []bool{false, true} {
		t.Run(fmt.Sprintf("grown %v", grow), func(t *testing.T) {
			eng, a, st, _ := setupWith(t, c, src, hostengine.Hooks{}, opts)
			restore := resize(t, pack, grow)
			bs := a.Bindings()
			var failed []*vmm.Binding
			for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
				b := bs[i]
				loc, packed := packOf(c, b)
				if !packed || loc.Path != pack {
					if err != nil {
						t.Errorf("%s, beside the damaged pack: %v", b.Name, err)
					}
					continue
				}
				failed = append(failed, b)
				var te *Error
				if !errors.As(err, &te) || te.Tensor != b.Name || !errors.Is(err, shardcache.ErrObjectCorrupt) ||
					!strings.Contains(err.Error(), pack) || !strings.Contains(err.Error(), "index says") {
					t.Errorf("%s, in the damaged pack: %v; want ErrObjectCorrupt naming the pack and its sizes", b.Name, err)
				}
				if b.State() != vmm.Evicted {
					t.Errorf("%s, in the damaged pack: %v", b.Name, b.State())
				}
			}
			if len(failed) == 0 {
				t.Fatal("no binding in the damaged pack")
			}
			restore()
			for i, err := range waitAll(st.FaultIn(context.Background(), failed)) {
				if err != nil {
					t.Errorf("%s, the pack repaired: %v", failed[i].Name, err)
				}
			}
			if err := CheckArena(eng, bs, src); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPackSizeChecked: a pack of small payloads cut short or grown fails
// the bindings packed from it as a corrupt cache, naming each tensor, the
// pack and the sizes, at the pack's first open.
func TestPackSizeChecked(t *testing.T) {
	c, src := smallFixture(t, 300)
	_, a, _, _ := setup(t, c, src, hostengine.Hooks{}, false)
	loc, ok := packOf(c, a.Bindings()[len(a.Bindings())/2])
	if !ok {
		t.Fatal("no pack in the fixture")
	}
	packSizeFails(t, c, src, PayloadOptions{Readers: 3}, loc.Path)
}

// TestStreamedPackSizeChecked: payloads streamed from their range of a
// pack (above SmallBytes, in a cache of large packs), or read whole into
// pinned memory (Resident), fail likewise.
func TestStreamedPackSizeChecked(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Mix: 80, Shards: 2, Seed: 9}, pipeline.CompressOptions{PackMax: shardcache.MaxPackMax})
	_, a, _, _ := setup(t, c, src, hostengine.Hooks{}, false)
	var pack string
	for _, b := range a.Bindings() {
		if loc, ok := packOf(c, b); ok && loc.Size > DefaultSmallBytes {
			pack = loc.Path
			break
		}
	}
	if pack == "" {
		t.Fatal("no packed payload above the packing threshold in the fixture")
	}
	for _, resident := range []bool{false, true} {
		t.Run(fmt.Sprintf("resident %v", resident), func(t *testing.T) {
			packSizeFails(t, c, src, PayloadOptions{Readers: 3, Resident: resident}, pack)
		})
	}
}

// TestRawCopiesFromPacks: with its source gone, a self-contained cache's
// small raw tensors are read from their packs through the cache's object
// files (packed by the payload transport's packer): a pack cut short is a
// corrupt cache, not a source that changed.
func TestRawCopiesFromPacks(t *testing.T) {
	c, src := fixture.Compressed(t, synth.Config{Small: 200, Shards: 2, Seed: 3}, pipeline.CompressOptions{SelfContained: true, MinSaving: 0.99})
	if err := os.Rename(src.Root, src.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	_, a, _, _ := setup(t, c, src, hostengine.Hooks{}, false)
	var pack string
	for _, b := range a.Bindings() {
		hit, err := c.LookupSpec(b.Ref, b.Shard, b.Offset, b.Size)
		if err != nil || hit.Tensor.Stored != shardcache.StoredRaw {
			t.Fatalf("%s: not a raw copy: %v", b.Name, err)
		}
		if loc, ok := packOf(c, b); ok && b.Shard == loc.Path {
			pack = loc.Path
		}
	}
	if pack == "" {
		t.Fatal("no raw copy read from a pack")
	}
	loadAll(t, c, src, false)
	packSizeFails(t, c, src, PayloadOptions{Readers: 3}, pack)
}

package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/engine"
	"github.com/splitzip/splitzip/engine/hostengine"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/vmm"
)

// TestEntropyPayloadsWithoutSource: a cache of entropy payloads loads
// from its payloads, decoded on the device (the engine's in-place entropy
// decode) or, with HostEntropy, on the host, bit for bit, first loads and
// re-faults, resident or not, with its source there or gone; with
// EntropyFromSource, from its source while that is there. A corrupt
// payload fails its own binding only, which stays evicted, and a
// repaired one loads.
func TestEntropyPayloadsWithoutSource(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 21}, pipeline.CompressOptions{SelfContained: true, Codec: pipeline.CodecEntropy})
	load := func(what string, absent bool) {
		t.Helper()
		for _, resident := range []bool{false, true} {
			for _, onHost := range []bool{false, true} {
				for _, fromSource := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s, resident %v, on the host %v, from the source %v", what, resident, onHost, fromSource), func(t *testing.T) {
						var device atomic.Int64 // entropy decodes the engine ran
						hooks := hostengine.Hooks{Decode: func(_ engine.DevPtr, h payload.Head) error {
							if h.Kind() == payload.KindEntropy {
								device.Add(1)
							}
							return nil
						}}
						loadAllWith(t, c, s, hooks, PayloadOptions{Resident: resident, Readers: 3, HostEntropy: onHost, SmallBytes: 4 << 10, EntropyFromSource: fromSource})
						if n := device.Load(); (n > 0) != (!onHost && (absent || !fromSource)) {
							t.Errorf("%d entropy payloads decoded by the engine", n)
						}
					})
				}
			}
		}
	}
	load("source present", false)
	// With the source there, a corrupt payload is still caught (issue
	// 31): loads decode payloads, not the source, unless told otherwise.
	entropyCorruptFails(t, c, s, "source present")
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	load("source absent", true)
	entropyCorruptFails(t, c, s, "source absent")
}

// entropyCorruptFails flips bytes of the largest entropy payload of c
// (streamed and decoded by the engine) and of the largest one that is
// packed (decoded by the batch launch of its pack) and
// checks that a load fails that binding only, naming it, leaves it
// evicted, and loads it once repaired.
func entropyCorruptFails(t *testing.T, c *shardcache.Cache, s *shardcache.Source, what string) {
	t.Helper()
	for _, limit := range []uint64{^uint64(0), DefaultSmallBytes} {
		entropyVictimFails(t, c, s, fmt.Sprintf("%s, payloads up to %d bytes", what, limit), limit)
	}
}

func entropyVictimFails(t *testing.T, c *shardcache.Cache, s *shardcache.Source, what string, limit uint64) {
	t.Helper()
	_, a, st, tr := setup(t, c, s, hostengine.Hooks{}, false)
	var victim *vmm.Binding
	for _, b := range a.Bindings() {
		hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size)
		if err != nil || hit.Tensor.Stored != shardcache.StoredEntropy || victim != nil && b.Size <= victim.Size {
			continue
		}
		if o, err := c.Lookup(hit.Tensor.Key); err == nil && o.Size <= limit && b.Size <= limit {
			victim = b
		}
	}
	if victim == nil {
		t.Fatalf("%s: no entropy payload in the fixture", what)
	}
	hit, _ := c.LookupSlice(victim.Shard, victim.Offset, victim.Size)
	o, _ := c.Lookup(hit.Tensor.Key)
	// A byte of a record (other bits: caught by the checksum), and the
	// chunk index's last byte (caught before anything is decoded).
	for _, at := range []int64{int64(o.Size) / 4, -1} {
		restore := cachetest.Flip(t, c, hit.Tensor.Key, at, 0x40)
		for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
			b := a.Bindings()[i]
			switch {
			case b == victim:
				var te *Error
				if !errors.As(err, &te) || te.Tensor != victim.Name || !errors.Is(err, codec.ErrChecksum) && !errors.Is(err, entropy.ErrPayload) && !errors.Is(err, entropy.ErrStream) {
					t.Errorf("%s, byte %d of a payload flipped: %v", what, at, err)
				}
			case err != nil:
				t.Errorf("%s beside a corrupt payload: %v", b.Name, err)
			}
		}
		if victim.State() != vmm.Evicted {
			t.Errorf("byte %d flipped: the binding is %v", at, victim.State())
		}
		restore()
		st.Evict(a.Bindings()...)
	}
	before := tr.Stats().Paths
	if err := st.FaultIn(context.Background(), []*vmm.Binding{victim})[0].Wait(); err != nil {
		t.Fatalf("after repair: %v", err)
	}
	// The path the victim took: packed and decoded by the engine's batch
	// where it is small, streamed and decoded by the engine where not.
	path := PathEntropy
	if victim.Size <= DefaultSmallBytes {
		path = PathEntropyPacked
	}
	if n := tr.Stats().Paths[path].Tensors - before[path].Tensors; n != 1 {
		t.Errorf("%s: the victim (%d bytes) took path %s %d times", what, victim.Size, path, n)
	}
}

// TestEntropyVersion1WithoutSource: a version 1 entropy payload (the
// committed golden one, in a cache whose object is replaced by it) loads
// without its source through the chunk-after-chunk host decoder, and
// packed with the small ones (staged, then, as no batch decodes version
// 1, uploaded the streamed way), bit for bit, and its corruption fails
// its binding.
func TestEntropyVersion1WithoutSource(t *testing.T) {
	raw, err := os.ReadFile("../codec/entropy/testdata/golden-v1-bf16.raw")
	if err != nil {
		t.Fatal(err)
	}
	v1, err := os.ReadFile("../codec/entropy/testdata/golden-v1-bf16.szen")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "ck")
	head, _, err := safetensors.EncodeHeader(nil, []safetensors.TensorSpec{{Name: "w", DType: "BF16", Shape: []uint64{uint64(len(raw) / 2)}, Size: uint64(len(raw))}})
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "model.safetensors"), append(head, raw...), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 1, MinSaving: 0.03, NoSync: true, SelfContained: true, PackMax: -1, Codec: pipeline.CodecEntropy}); err != nil {
		t.Fatal(err)
	}
	// The same cache again, its tensor's object the version 1 payload.
	c0, err := shardcache.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	src0 := c0.Index().Sources[0]
	key := src0.Shards[0].Tensors[0].Key
	o0, _ := c0.Lookup(key)
	w, err := shardcache.Create(filepath.Join(dir, "cache1"))
	if err != nil {
		t.Fatal(err)
	}
	w.SetPackMax(0)
	w.SetNoSync(true)
	if hk, err := w.PutBytes(head); err != nil || hk != src0.Shards[0].Header.Key {
		t.Fatalf("header object %s, %v", hk, err)
	}
	obj, err := w.NewObject()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.Write(v1); err != nil {
		t.Fatal(err)
	}
	meta := *o0
	meta.Size = uint64(len(v1))
	if err := obj.Commit(key, &meta); err != nil {
		t.Fatal(err)
	}
	w.SetSource(src0)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	c, err := shardcache.Open(filepath.Join(dir, "cache1"))
	if err != nil {
		t.Fatal(err)
	}
	s := &c.Index().Sources[0]
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	eng := hostengine.New(2)
	defer eng.Close()
	a, err := vmm.New(eng, mustSpecs(t, c, s), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Not packed: the streaming path; packed: staged, checked, and
	// uploaded the streaming way after its pack (uploadFallback).
	for _, small := range []int64{-1, 0} {
		rawT, err := NewRaw(eng, RawOptions{})
		if err != nil {
			t.Fatal(err)
		}
		z, err := NewPayloads(eng, c, rawT, PayloadOptions{SmallBytes: small})
		if err != nil {
			t.Fatal(err)
		}
		st := NewStore(eng, z)
		bs := a.Bindings()
		if err := st.FaultIn(context.Background(), bs)[0].Wait(); err != nil {
			t.Fatalf("small bytes %d: %v", small, err)
		}
		if err := CheckArena(eng, bs, s); err != nil {
			t.Fatalf("small bytes %d: %v", small, err)
		}
		st.Evict(bs...)
		restore := cachetest.Flip(t, c, key, -1, 0x20) // version 1: the last chunk's symbols
		if err := st.FaultIn(context.Background(), bs)[0].Wait(); !errors.Is(err, codec.ErrChecksum) && !errors.Is(err, entropy.ErrStream) || bs[0].State() != vmm.Evicted {
			t.Errorf("small bytes %d: a corrupt version 1 payload: %v, state %v", small, err, bs[0].State())
		}
		restore()
		// The path it took, both loads: streamed (counted as the device's
		// path, then decoded chunk after chunk on the host: version 1 has
		// no records), or packed (counted as the batch's, then uploaded
		// the streaming way: no batch decodes version 1).
		path := PathEntropy
		if small == 0 {
			path = PathEntropyPacked
		}
		if p := z.Stats().Paths[path]; p.Tensors != 2 {
			t.Errorf("small bytes %d: %d loads on path %s, want 2", small, p.Tensors, path)
		}
		z.Close()
	}
}

// TestDeviceResident: with the device tier, a streamed payload's
// re-fault reads no file and copies nothing from the host (a copy within
// the device and an in-place decode), bit for bit; small payloads come
// back from pinned memory; a tier too small for a payload sends it the
// usual way; the tier's memory is given back on Close.
func TestDeviceResident(t *testing.T) {
	c, s := llama(t)
	specs := mustSpecs(t, c, s)
	stage, err := PlanStaging(c, specs, 2, 0, false, true, 0)
	if err != nil || stage.Device == 0 {
		t.Fatalf("staging %+v, %v", stage, err)
	}
	for _, tierBytes := range []uint64{stage.Device, 1 << 16} {
		var h2d atomic.Int64
		eng := hostengine.New(2, hostengine.WithHooks(hostengine.Hooks{Copy: func(_ engine.DevPtr, n int) error { h2d.Add(int64(n)); return nil }}))
		a, err := vmm.New(eng, specs, 0)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := NewRaw(eng, RawOptions{})
		if err != nil {
			t.Fatal(err)
		}
		z, err := NewPayloads(eng, c, raw, PayloadOptions{DeviceResident: true, DeviceBytes: tierBytes})
		if err != nil {
			t.Fatal(err)
		}
		st := NewStore(eng, z)
		bs := a.Bindings()
		pz, _ := payloadBinding(t, c, a)
		for run := range 3 {
			h2d.Store(0)
			for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
				if err != nil {
					t.Fatalf("tier %d, run %d: %s: %v", tierBytes, run+1, bs[i].Name, err)
				}
			}
			if err := CheckArena(eng, bs, s); err != nil {
				t.Fatalf("tier %d, run %d: %v", tierBytes, run+1, err)
			}
			st.Evict(bs...)
			// The largest payload alone: from the tier, nothing from the
			// host, once it is there (and its object gone).
			if run == 1 && tierBytes == stage.Device {
				h2d.Store(0)
				hit, _ := c.LookupSlice(pz.Shard, pz.Offset, pz.Size)
				restore := cachetest.Flip(t, c, hit.Tensor.Key, 0, 0xff)
				if err := st.FaultIn(context.Background(), []*vmm.Binding{pz})[0].Wait(); err != nil {
					t.Fatalf("a re-fault from the tier read its object: %v", err)
				}
				restore()
				if err := CheckArena(eng, []*vmm.Binding{pz}, s); err != nil {
					t.Fatal(err)
				}
				if h2d.Load() != 0 {
					t.Errorf("a re-fault from the tier copied %d bytes from the host", h2d.Load())
				}
				st.Evict(pz)
			}
		}
		if tierBytes == stage.Device && z.DeviceBytes() == 0 {
			t.Error("the tier holds no device memory")
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		a.Close()
		if n := eng.ReservedRanges(); n != 0 {
			t.Errorf("tier %d: %d device ranges left after Close", tierBytes, n)
		}
		eng.Close()
	}
	if _, err := NewPayloads(hostengine.New(1), c, nil, PayloadOptions{DeviceResident: true}); !errors.Is(err, ErrOption) {
		t.Errorf("a device tier of no bytes: %v", err)
	}
}

// TestEntropyPackThreshold: entropy payloads of tensors up to the
// packing threshold are packed (and decoded by the engine's batch
// launch), larger ones streamed and decoded one by one, with a small
// threshold and with the most it may be.
func TestEntropyPackThreshold(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 21}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	for _, small := range []int64{DefaultSmallBytes / 4, MaxSmallBytes} {
		eng, a, st, tr := setupWith(t, c, s, hostengine.Hooks{}, PayloadOptions{Readers: 3, SmallBytes: small})
		limit := small
		var packed, streamed uint64
		for _, b := range a.Bindings() {
			if hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size); err == nil && hit.Tensor.Stored == shardcache.StoredEntropy {
				if int64(b.Size) <= limit {
					packed++
				} else {
					streamed++
				}
			}
		}
		if packed == 0 || small < MaxSmallBytes && streamed == 0 {
			t.Fatalf("threshold %d: the fixture has %d entropy tensors up to %d bytes and %d above", small, packed, limit, streamed)
		}
		faultCheckEvict(t, eng, st, a.Bindings(), s, "entropy payloads")
		stats := tr.Stats()
		paths := stats.Paths
		if paths[PathEntropyPacked].Tensors != packed || paths[PathEntropy].Tensors != streamed {
			t.Errorf("threshold %d: %d tensors packed, %d streamed; want %d and %d", small, paths[PathEntropyPacked].Tensors, paths[PathEntropy].Tensors, packed, streamed)
		}
		// Packed payloads cross to the device as payloads, not in slots
		// of their tensors' size: fewer bytes than the tensors'.
		var raw uint64
		for _, pc := range paths {
			raw += pc.Bytes
		}
		if small == MaxSmallBytes && stats.Bytes > raw*9/10 {
			t.Errorf("threshold %d: %d bytes moved to the device for %d of tensors", small, stats.Bytes, raw)
		}
	}
}

// preparing is a host engine that counts PrepareEntropy and
// PrepareScatter calls.
type preparing struct {
	*hostengine.Engine
	n, scatter int
}

func (p *preparing) PrepareEntropy() error { p.n++; return nil }
func (p *preparing) PrepareScatter() error { p.scatter++; return nil }

// TestPrepareEntropy: Prepare has an engine that loads decoders on first
// use (engine.Preparer) load its entropy decoders when the cache holds
// entropy payloads that the engine decodes, and not otherwise; its
// scatter kernel always (the raw transport's Prepare, and the payload
// transport's).
func TestPrepareEntropy(t *testing.T) {
	ent, es := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 5}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	fix, fs := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 5}, pipeline.CompressOptions{})
	for _, c := range []struct {
		name   string
		cache  *shardcache.Cache
		src    *shardcache.Source
		onHost bool
		want   int
	}{{"entropy", ent, es, false, 1}, {"entropy on the host", ent, es, true, 0}, {"fixed", fix, fs, false, 0}} {
		eng := &preparing{Engine: hostengine.New(1)}
		raw, err := NewRaw(eng, RawOptions{})
		if err != nil {
			t.Fatal(err)
		}
		z, err := NewPayloads(eng, c.cache, raw, PayloadOptions{HostEntropy: c.onHost})
		if err != nil {
			t.Fatal(err)
		}
		if err := raw.Prepare(); err != nil {
			t.Fatal(err)
		}
		if err := z.Prepare(); err != nil {
			t.Fatal(err)
		}
		if eng.n != c.want || eng.scatter != 2 {
			t.Errorf("%s: PrepareEntropy called %d times, want %d; PrepareScatter %d, want 2", c.name, eng.n, c.want, eng.scatter)
		}
		z.Close()
		raw.Close()
		eng.Close()
	}
}

// TestCheckArenaMismatch: a binding whose bytes in device memory differ
// from its source, or (the source absent) from its content key, fails
// CheckArena with ErrMismatch, naming the tensor.
func TestCheckArenaMismatch(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 8}, pipeline.CompressOptions{SelfContained: true})
	eng, a, st, _ := setup(t, c, s, hostengine.Hooks{}, false)
	bs := a.Bindings()
	for _, f := range st.FaultIn(context.Background(), bs) {
		if err := f.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckArena(eng, bs, s); err != nil {
		t.Fatal(err)
	}
	// One byte of the last binding changed in device memory.
	b := bs[len(bs)-1]
	poke(t, eng, b)
	check := func(what string) {
		t.Helper()
		err := CheckArena(eng, bs, s)
		var te *Error
		if !errors.Is(err, ErrMismatch) || !errors.As(err, &te) || te.Tensor != b.Name {
			t.Errorf("%s: %v, want ErrMismatch naming %s", what, err, b.Name)
		}
	}
	check("source present")
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(s.Root+".gone", s.Root)
	check("source absent")
}

// TestForgedPayloadRefused: a payload rewritten with a checksum of its
// own (it checks as whole by itself) is refused by its binding, naming
// it, by the checksum the cache's index records: packed and streamed,
// fixed and entropy, the others of the load unharmed.
func TestForgedPayloadRefused(t *testing.T) {
	for _, codecName := range []string{pipeline.CodecFixed, pipeline.CodecEntropy} {
		c, s := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 31}, pipeline.CompressOptions{Codec: codecName})
		for _, small := range []int64{DefaultSmallBytes, -1} {
			_, a, st, _ := setupWith(t, c, s, hostengine.Hooks{}, PayloadOptions{Readers: 3, SmallBytes: small})
			var victim *vmm.Binding
			var key shardcache.Key
			for _, b := range a.Bindings() {
				hit, err := c.LookupSlice(b.Shard, b.Offset, b.Size)
				if err != nil || hit.Tensor.Stored == shardcache.StoredRaw || hit.Tensor.Stored == "" {
					continue
				}
				if o, err := c.Lookup(hit.Tensor.Key); err == nil && (small < 0 || int64(o.Size) <= small) && (victim == nil || b.Size > victim.Size) {
					victim, key = b, hit.Tensor.Key
				}
			}
			if victim == nil {
				t.Fatalf("%s, threshold %d: no payload in the fixture", codecName, small)
			}
			o, _ := c.Lookup(key)
			restore := cachetest.Forge(t, c, key, int64(o.Size/2), 0x08) // a byte of the data (an entropy payload's records)
			for i, err := range waitAll(st.FaultIn(context.Background(), a.Bindings())) {
				b := a.Bindings()[i]
				var te *Error
				switch {
				case b == victim && (!errors.As(err, &te) || te.Tensor != victim.Name || !errors.Is(err, codec.ErrChecksum)):
					t.Errorf("%s, threshold %d: a forged payload: %v", codecName, small, err)
				case b != victim && err != nil:
					t.Errorf("%s, threshold %d: %s beside a forged payload: %v", codecName, small, b.Name, err)
				}
			}
			restore()
		}
	}
}

// poke flips a bit of binding b's first byte in device memory.
func poke(t *testing.T, eng *hostengine.Engine, b *vmm.Binding) {
	t.Helper()
	one := make([]byte, 1)
	if err := eng.ReadBack(one, b.Addr); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 1
	pin, err := eng.Pinned(1)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.FreePinned(pin)
	copy(pin, one)
	ev, err := eng.Submit(0, engine.Work{Dst: b.Addr, Src: pin})
	if err != nil || ev.Wait() != nil {
		t.Fatal(err)
	}
}

// TestCheckArenaDamagedCopy: with the source absent, a raw tensor comes
// from its copy in the cache. A damaged copy fails the load itself (the
// copy's CRC-32C), as a corrupt cache object naming the copy's file, not
// as a changed source. Damaged after a load, it fails CheckArena so; an
// intact copy whose loaded bytes differ is the load's mismatch.
func TestCheckArenaDamagedCopy(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 1 << 20, Shards: 1, Seed: 14}, pipeline.CompressOptions{SelfContained: true})
	raw := fixture.RawCopy(t, s)
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(s.Root+".gone", s.Root)
	loc, _, err := c.Locate(raw.Key)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := func(what string, err error) {
		t.Helper()
		var te *Error
		if !errors.Is(err, shardcache.ErrObjectCorrupt) || errors.Is(err, shardcache.ErrSourceChanged) || !errors.As(err, &te) || te.Tensor != raw.Name || !strings.Contains(err.Error(), loc.Path) {
			t.Fatalf("%s: %v, want a corrupt object naming %s in %s", what, err, raw.Name, loc.Path)
		}
	}
	eng, a, st, _ := setup(t, c, s, hostengine.Hooks{}, false)
	bs := a.Bindings()
	restore := cachetest.Flip(t, c, raw.Key, int64(raw.Size)/2, 0x04)
	failed := 0
	for i, f := range st.FaultIn(context.Background(), bs) {
		err := f.Wait()
		switch {
		case bs[i].Name == raw.Name:
			corrupt("a load from a damaged raw copy", err)
			failed++
		case err != nil:
			t.Fatalf("%s, beside the damaged copy: %v", bs[i].Name, err)
		}
	}
	restore()
	if failed != 1 {
		t.Fatalf("%d loads of %s", failed, raw.Name)
	}
	for _, f := range st.FaultIn(context.Background(), bs) {
		if err := f.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	// Damaged after the load, with the arena's bytes wrong too.
	b, err := a.Lookup(raw.Name)
	if err != nil {
		t.Fatal(err)
	}
	poke(t, eng, b)
	restore = cachetest.Flip(t, c, raw.Key, int64(raw.Size)/2, 0x04)
	err = CheckArena(eng, bs, s)
	restore()
	corrupt("CheckArena of a damaged raw copy", err)
	// The copy mended, the arena still holds wrong bytes: the load's
	// mismatch, not the cache's damage.
	err = CheckArena(eng, bs, s)
	if !errors.Is(err, ErrMismatch) || errors.Is(err, shardcache.ErrObjectCorrupt) {
		t.Fatalf("an intact raw copy, loaded wrong: %v, want ErrMismatch", err)
	}
}

// TestLargeRawCopyChecked: with the source absent, raw tensors larger than
// the packing threshold (F16, which the fixed codec leaves raw) stream
// from their copies in the cache checked against each copy's CRC-32C: a
// damaged copy fails its tensor as a corrupt object naming the copy, the
// others load; mended, all load bit for bit.
func TestLargeRawCopyChecked(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 8 << 20, Shards: 1, Seed: 15, DType: "F16"}, pipeline.CompressOptions{SelfContained: true})
	var big *shardcache.Tensor
	for i := range s.Shards[0].Tensors {
		tn := &s.Shards[0].Tensors[i]
		if tn.Stored == shardcache.StoredRaw && tn.CopyStored && int64(tn.Size) > DefaultSmallBytes && (big == nil || tn.Size > big.Size) {
			big = tn
		}
	}
	if big == nil {
		t.Fatal("no raw copy above the packing threshold")
	}
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	defer os.Rename(s.Root+".gone", s.Root)
	loc, _, err := c.Locate(big.Key)
	if err != nil {
		t.Fatal(err)
	}
	_, a, st, _ := setupWith(t, c, s, hostengine.Hooks{}, PayloadOptions{Readers: 3})
	bs := a.Bindings()
	restore := cachetest.Flip(t, c, big.Key, int64(big.Size)*2/3, 0x10)
	for i, err := range waitAll(st.FaultIn(context.Background(), bs)) {
		var te *Error
		switch {
		case bs[i].Name != big.Name:
			if err != nil {
				t.Errorf("%s, beside the damaged copy: %v", bs[i].Name, err)
			}
		case !errors.Is(err, shardcache.ErrObjectCorrupt) || !errors.As(err, &te) || te.Tensor != big.Name || !strings.Contains(err.Error(), loc.Path) || !strings.Contains(err.Error(), "CRC-32C"):
			t.Errorf("%s from a damaged copy: %v, want a corrupt object naming it and %s", big.Name, err, loc.Path)
		}
	}
	restore()
	loadAllWith(t, c, s, hostengine.Hooks{}, PayloadOptions{Readers: 3})
}

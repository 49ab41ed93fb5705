package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/cachetest"
	"github.com/splitzip/splitzip/internal/fixture"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/nodeshare"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
)

func openFixture(t *testing.T) (*Loader, string) {
	t.Helper()
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 2, MinSaving: 0.03, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(cache, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, src
}

// source returns tensor tn's bytes in its source shard (only its range
// is read: tests call it for every tensor).
func source(t *testing.T, tn *Tensor) []byte {
	t.Helper()
	f, err := os.Open(tn.Shard)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, tn.Size)
	if _, err := f.ReadAt(b, int64(tn.Offset)); err != nil {
		t.Fatalf("%s: %v", tn.Name, err)
	}
	return b
}

func TestReadHost(t *testing.T) {
	l, _ := openFixture(t)
	compressed := 0
	for _, tn := range l.Tensors() {
		got := make([]byte, tn.Size)
		if err := l.ReadHost(tn.Index, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, source(t, &tn)) {
			t.Fatalf("%s differs from the source", tn.Name)
		}
		if tn.Compressed {
			compressed++
		}
		if i, err := l.FindSlice(filepath.Base(tn.Shard), tn.Offset, tn.Size); err != nil || i != tn.Index {
			t.Fatalf("slice lookup of %s: %d %v", tn.Name, i, err)
		}
		if i, err := l.FindKey(string(tn.Key)); err != nil || l.Tensors()[i].Key != tn.Key {
			t.Fatalf("key lookup of %s: %v", tn.Name, err)
		}
	}
	if compressed == 0 {
		t.Fatal("no compressed tensors")
	}
	if _, err := l.FindName("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing name: %v", err)
	}
	if err := l.ReadHost(0, make([]byte, 1)); !errors.Is(err, ErrTooSmall) && l.Tensors()[0].Size > 1 {
		t.Errorf("short destination: %v", err)
	}
	if err := l.ReadHost(-1, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad index: %v", err)
	}
}

// requireGPU returns a context on device 0 or skips.
func requireGPU(t *testing.T) *cuda.Context {
	t.Helper()
	lib, err := cuda.Open()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := lib.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// uploadAll uploads every tensor of l in one batch, on stream s, into one
// device allocation, and returns each tensor's bytes as read back from
// the device, in the order of l.Tensors().
func uploadAll(ctx *cuda.Context, l *Loader, s cuda.Stream) ([][]byte, error) {
	ts := l.Tensors()
	var total uint64
	offs := make([]uint64, len(ts))
	for i, tn := range ts {
		offs[i] = total
		total += (tn.Size + 255) &^ 255
	}
	d, err := ctx.Alloc(total)
	if err != nil {
		return nil, err
	}
	defer ctx.Free(d)
	// Runs before Free on every path: nothing on s may still use d.
	defer ctx.StreamSynchronize(s)
	idx, dsts, caps := make([]int, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts))
	for i, tn := range ts {
		idx[i], dsts[i], caps[i] = tn.Index, uint64(d)+offs[i], tn.Size
	}
	ev, err := l.UploadBatch(idx, 0, dsts, caps, uintptr(s))
	if err != nil {
		return nil, err
	}
	defer l.EventRelease(ev)
	if err := l.EventWait(ev); err != nil {
		return nil, err
	}
	host := make([]byte, total)
	if err := ctx.CopyDtoHAsync(host, d, s); err != nil {
		return nil, err
	}
	if err := ctx.StreamSynchronize(s); err != nil {
		return nil, err
	}
	got := make([][]byte, len(ts))
	for i, tn := range ts {
		got[i] = host[offs[i] : offs[i]+tn.Size]
	}
	return got, nil
}

// TestUploadBatch uploads every tensor in one batch into one allocation,
// from four goroutines on four streams at once, and reads them back; then
// a corrupt payload fails its batch naming the tensor. It needs a GPU.
func TestUploadBatch(t *testing.T) {
	l, _ := openFixture(t)
	ctx := requireGPU(t)
	ts := l.Tensors()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			s, err := ctx.NewStream()
			if err != nil {
				t.Error(err)
				return
			}
			defer ctx.DestroyStream(s)
			got, err := uploadAll(ctx, l, s)
			if err != nil {
				t.Errorf("goroutine %d: %v", g, err)
				return
			}
			for i, tn := range ts {
				if !bytes.Equal(got[i], source(t, &tn)) {
					t.Errorf("goroutine %d: %s differs on the device", g, tn.Name)
				}
			}
		})
	}
	wg.Wait()

	var victim *Tensor
	for i := range ts {
		if ts[i].Compressed && (victim == nil || ts[i].Size > victim.Size) {
			victim = &ts[i]
		}
	}
	defer cachetest.Flip(t, l.c, victim.Key, -1, 1)()
	d, err := ctx.Alloc(victim.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(d)
	_, err = l.UploadBatch([]int{victim.Index}, 0, []uint64{uint64(d)}, []uint64{victim.Size}, 0)
	if !errors.Is(err, codec.ErrChecksum) || !strings.Contains(err.Error(), victim.Name) {
		t.Errorf("corrupt payload: %v, want a checksum error naming %s", err, victim.Name)
	}
	if _, err := l.UploadBatch([]int{victim.Index}, 99, []uint64{uint64(d)}, []uint64{victim.Size}, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("device 99: %v, want ErrInvalid", err)
	}
}

// gpuStream returns a context on device 0 and a stream of its own,
// destroyed when the test ends, or skips.
func gpuStream(t *testing.T) (*cuda.Context, cuda.Stream) {
	t.Helper()
	ctx := requireGPU(t)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.DestroyStream(s) })
	return ctx, s
}

// TestUpload uploads every tensor into device memory on a stream of our
// own and reads it back. It needs a GPU.
func TestUpload(t *testing.T) {
	l, _ := openFixture(t)
	ctx, s := gpuStream(t)
	for _, tn := range l.Tensors() {
		d, err := ctx.Alloc(tn.Size + 64)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := l.Upload(tn.Index, 0, uint64(d), tn.Size, uintptr(s))
		if err != nil {
			t.Fatalf("%s: %v", tn.Name, err)
		}
		if err := l.EventWait(ev); err != nil {
			t.Fatalf("%s: %v", tn.Name, err)
		}
		got := make([]byte, tn.Size)
		ctx.CopyDtoHAsync(got, d, s)
		ctx.StreamSynchronize(s)
		if !bytes.Equal(got, source(t, &tn)) {
			t.Fatalf("%s differs on the device", tn.Name)
		}
		l.EventRelease(ev)
		ctx.Free(d)
	}
	if _, err := l.Upload(0, 0, 0, 0, uintptr(s)); err == nil && l.Tensors()[0].Size > 0 {
		t.Error("upload into a null destination accepted")
	}
}

// TestUploadBatchChecksFirst checks the arguments of a batch that fail
// before any device is touched, so it runs without a GPU.
func TestUploadBatchChecksFirst(t *testing.T) {
	l, _ := openFixture(t)
	var comp *Tensor
	for i := range l.Tensors() {
		if tn := &l.Tensors()[i]; tn.Compressed && tn.Size > 2 {
			comp = tn
		}
	}
	one := func(i int, dst, capacity uint64) error {
		_, err := l.UploadBatch([]int{i}, 0, []uint64{dst}, []uint64{capacity}, 0)
		return err
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"index out of range", one(len(l.Tensors()), 4096, 1<<30), ErrInvalid},
		{"negative index", one(-1, 4096, 1<<30), ErrInvalid},
		{"destination too small", one(comp.Index, 4096, comp.Size-1), ErrTooSmall},
		{"null destination", one(comp.Index, 0, comp.Size), ErrInvalid},
		{"unaligned destination of a compressed tensor", one(comp.Index, 4104, comp.Size), ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if _, err := l.UploadBatch([]int{comp.Index}, 0, nil, nil, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("arrays of different lengths: %v", err)
	}
	// A source shard touched since compression.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(comp.Shard, later, later); err != nil {
		t.Fatal(err)
	}
	if err := one(comp.Index, 4096, comp.Size); !errors.Is(err, shardcache.ErrSourceChanged) {
		t.Errorf("changed source: %v, want ErrSourceChanged", err)
	}
}

// TestPinnedStaging: a loader's staging is sized from its checkpoint
// (a 3 MiB one pins far less than the 256 MiB cap) and fitted to
// Options.PinnedLimit; a limit below the smallest staging is refused.
func TestPinnedStaging(t *testing.T) {
	l, _ := openFixture(t)
	small := l.PinnedBytes()
	if small == 0 || small > 64<<20 {
		t.Errorf("%d pinned bytes per stream for a 3 MiB checkpoint", small)
	}
	dir := l.c.Dir()
	for _, c := range []struct {
		limit int64
		ok    bool
	}{{-1, true}, {48 << 20, true}, {1 << 20, false}} {
		m, err := OpenWith(dir, Options{PinnedLimit: c.limit})
		switch {
		case c.ok && err != nil:
			t.Errorf("limit %d: %v", c.limit, err)
		case !c.ok && !errors.Is(err, transport.ErrOption):
			t.Errorf("limit %d: %v, want ErrOption", c.limit, err)
		case err == nil && c.limit > 0 && m.PinnedBytes() > uint64(c.limit):
			t.Errorf("limit %d: %d pinned bytes", c.limit, m.PinnedBytes())
		}
		if err == nil {
			m.Close()
		}
	}
}

// TestReadHostEntropyWithoutSource: tensors of a cache of entropy
// payloads read on the host from their source while it is there, and
// decoded from their payloads once it is gone, bit for bit.
func TestReadHostEntropyWithoutSource(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 2, Seed: 8}, pipeline.CompressOptions{SelfContained: true, Codec: pipeline.CodecEntropy})
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := map[int][]byte{}
	for _, tn := range l.Tensors() {
		want[tn.Index] = source(t, &tn)
	}
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	entropy := 0
	for _, tn := range l.Tensors() {
		got := make([]byte, tn.Size)
		if err := l.ReadHost(tn.Index, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[tn.Index]) {
			t.Fatalf("%s differs from the source", tn.Name)
		}
		if tn.rec.Stored == shardcache.StoredEntropy {
			entropy++
		}
	}
	if entropy == 0 {
		t.Fatal("no entropy payloads in the fixture")
	}
}

// openWithSource opens a loader of cache c, closed when t ends, and
// returns it with each tensor's bytes read from its source (by index in
// Tensors), while the source is there.
func openWithSource(t *testing.T, c *shardcache.Cache) (*Loader, [][]byte) {
	t.Helper()
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ts := l.Tensors()
	want := make([][]byte, len(ts))
	for i, tn := range ts {
		want[i] = source(t, &tn)
	}
	return l, want
}

// TestUploadBatchEntropyWithoutSource uploads every tensor of a cache of
// entropy payloads, its source gone, into device memory in one batch:
// the payloads are decoded there, bit for bit. It needs a GPU.
func TestUploadBatchEntropyWithoutSource(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 6 << 20, Shards: 2, Seed: 9}, pipeline.CompressOptions{SelfContained: true, Codec: pipeline.CodecEntropy})
	ctx, stream := gpuStream(t)
	l, want := openWithSource(t, c)
	ts := l.Tensors()
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	got, err := uploadAll(ctx, l, stream)
	if err != nil {
		t.Fatal(err)
	}
	for i, tn := range ts {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("%s differs on the device", tn.Name)
		}
	}
}

// TestChangedSelfContainedSource: a self-contained cache beside a source
// edited in place since (other bytes, the same size, a new time) refuses
// to read a raw tensor from it, saying the cache needs nothing of the
// file; with the file gone, every tensor reads as it was compressed.
func TestChangedSelfContainedSource(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Bytes: 3 << 20, Shards: 2, Seed: 12}, pipeline.CompressOptions{SelfContained: true})
	l, want := openWithSource(t, c)
	ts := l.Tensors()
	raw := -1
	for i, tn := range ts {
		if !tn.Compressed {
			raw = i
		}
	}
	if raw < 0 {
		t.Fatal("no raw tensor in the fixture")
	}
	later := time.Now().Add(time.Hour)
	for _, sh := range s.Shards {
		p := filepath.Join(s.Root, sh.Name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 4; i < len(b); i += 97 {
			b[i] ^= 0x5A
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	err := l.ReadHost(ts[raw].Index, make([]byte, ts[raw].Size))
	if !errors.Is(err, shardcache.ErrSourceChanged) || !strings.Contains(err.Error(), "the cache holds every tensor of this shard") {
		t.Fatalf("raw tensor beside a changed source: %v", err)
	}
	if err := os.Rename(s.Root, s.Root+".edited"); err != nil {
		t.Fatal(err)
	}
	for i, tn := range ts {
		got := make([]byte, tn.Size)
		if err := l.ReadHost(tn.Index, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[i]) {
			t.Fatalf("%s differs from what was compressed", tn.Name)
		}
	}
}

// TestSetResident: residency is taken before the first upload.
func TestSetResident(t *testing.T) {
	l, _ := openFixture(t)
	if err := l.SetResident(true); err != nil || !l.resident.Load() {
		t.Fatalf("SetResident: %v", err)
	}
	l.uploading.Store(true) // as the first upload's transport does
	if err := l.SetResident(false); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetResident after an upload: %v, want ErrInvalid", err)
	}
}

// TestSetShared: sharing is taken before the first upload and implies
// residency.
func TestSetShared(t *testing.T) {
	l, _ := openFixture(t)
	if err := l.SetShared(true, ""); err != nil || !l.resident.Load() || !l.shared.Load() || l.staging.Shared == nil || len(l.staging.Shared.Keys) == 0 {
		t.Fatalf("SetShared: %v", err)
	}
	// The same copy as a load from the command line asks for: the layout
	// is the cache's and the checkpoint's, whatever builds the specs.
	specs, err := transport.Specs(l.c, l.src)
	if err != nil {
		t.Fatal(err)
	}
	if want := transport.LayoutShared(l.c, specs); l.staging.Shared.ID != want.ID || len(want.Packs) == 0 {
		t.Fatalf("the loader's shared copy %s, a load's %s (%d packs)", l.staging.Shared.ID, want.ID, len(want.Packs))
	}
	l.uploading.Store(true)
	if err := l.SetShared(false, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetShared after an upload: %v, want ErrInvalid", err)
	}
}

// TestUploadShared: loaders with SetShared upload every tensor from the
// shared host copy, pinned read-only: the second attaches to the first's
// copy, and a third, opened after every payload in the cache was
// damaged, still uploads every tensor right, for it reads none. It
// needs a GPU.
func TestUploadShared(t *testing.T) {
	t.Setenv(nodeshare.DirEnv, filepath.Join(t.TempDir(), "share"))
	a, _ := openFixture(t)
	ctx, s := gpuStream(t)
	upload := func(l *Loader) {
		t.Helper()
		for range 2 {
			got, err := uploadAll(ctx, l, s)
			if err != nil {
				t.Fatal(err)
			}
			for i, tn := range l.Tensors() {
				if !bytes.Equal(got[i], source(t, &tn)) {
					t.Fatalf("%s differs on the device", tn.Name)
				}
			}
		}
	}
	if err := a.SetShared(true, ""); err != nil {
		t.Fatal(err)
	}
	upload(a)
	for i, k := range a.staging.Shared.Keys {
		defer cachetest.Flip(t, a.c, k, int64(a.staging.Shared.Sizes[i]/2), 0x20)()
	}
	for range 2 {
		b, err := Open(a.c.Dir(), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetShared(true, ""); err != nil {
			t.Fatal(err)
		}
		upload(b)
		b.Close()
	}
}

// TestStoredRoundTrip: every tensor's stored bytes (fixed-rate and
// entropy payloads, raw bytes) decode on the host to the source's bytes;
// a damaged payload fails ReadStored and DecodeHost naming the tensor;
// the plan is JSON of every tensor.
func TestStoredRoundTrip(t *testing.T) {
	for _, codecName := range []string{pipeline.CodecFixed, pipeline.CodecEntropy} {
		c, _ := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 2, Seed: 12}, pipeline.CompressOptions{Codec: codecName})
		l, err := Open(c.Dir(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		payloads := 0
		for _, tn := range l.Tensors() {
			n, err := l.StoredSize(tn.Index)
			if err != nil {
				t.Fatal(err)
			}
			st := make([]byte, n)
			if got, err := l.ReadStored(tn.Index, st); err != nil || got != n {
				t.Fatalf("%s: ReadStored: %d of %d, %v", tn.Name, got, n, err)
			}
			out := make([]byte, tn.Size)
			if err := l.DecodeHost(tn.Index, st, out); err != nil {
				t.Fatalf("%s: DecodeHost: %v", tn.Name, err)
			}
			if !bytes.Equal(out, source(t, &tn)) {
				t.Fatalf("%s (%s): decoded stored bytes differ from the source", tn.Name, codecName)
			}
			if tn.rec.Stored != shardcache.StoredRaw {
				payloads++
				st[len(st)/2] ^= 1
				if err := l.DecodeHost(tn.Index, st, out); err == nil || !strings.Contains(err.Error(), tn.Name) {
					t.Errorf("%s: a damaged payload decoded: %v", tn.Name, err)
				}
			}
			if _, err := l.ReadStored(tn.Index, st[:0]); n > 0 && !errors.Is(err, ErrTooSmall) {
				t.Errorf("%s: ReadStored into nothing: %v", tn.Name, err)
			}
		}
		if payloads == 0 {
			t.Fatalf("%s: no payloads", codecName)
		}
		js, err := l.Plan(2, "*embed*=replicate,lm_head*=replicate,*.weight=shard:0")
		if err != nil || !bytes.Contains(js, []byte(`"per_rank"`)) {
			t.Errorf("Plan: %v", err)
		}
		if _, err := l.Plan(2, "*=copy"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Plan of a bad rule: %v", err)
		}
	}
}

// TestReadHostEntropyCorruptWithSource damages one byte of each entropy
// payload of a cache whose source is there: ReadHost decodes from the
// cache, so every damaged payload is an integrity error naming its
// tensor (before, the source was read and the damage went unnoticed).
func TestReadHostEntropyCorruptWithSource(t *testing.T) {
	c, _ := fixture.Compressed(t, synth.Config{Bytes: 2 << 20, Shards: 2, Seed: 8}, pipeline.CompressOptions{Codec: pipeline.CodecEntropy})
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	damaged := 0
	for _, tn := range l.Tensors() {
		if tn.rec.Stored != shardcache.StoredEntropy {
			continue
		}
		got := make([]byte, tn.Size)
		if err := l.ReadHost(tn.Index, got); err != nil {
			t.Fatalf("%s before the damage: %v", tn.Name, err)
		}
		if !bytes.Equal(got, source(t, &tn)) {
			t.Fatalf("%s differs from the source", tn.Name)
		}
		o, err := c.Lookup(tn.Key)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []int64{int64(o.Size) / 2, -1} {
			restore := cachetest.Flip(t, c, tn.Key, at, 0x40)
			err := l.ReadHost(tn.Index, got)
			restore()
			if StatusOf(err) != StatusCorrupt || !strings.Contains(fmt.Sprint(err), fmt.Sprintf("%q", tn.Name)) {
				t.Fatalf("%s with byte %d of its payload damaged: %v (status %d), want a corrupt error naming it", tn.Name, at, err, StatusOf(err))
			}
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no entropy payloads in the fixture")
	}
}

// TestIdleEngine: after a handle's uploads and its close, its engine
// stays idle and the next handle's uploads use it; an engine of another
// stream becoming idle closes it (one idle a device), ReleaseIdle closes
// the last. It needs a GPU.
func TestIdleEngine(t *testing.T) {
	ctx := requireGPU(t)
	l, _ := openFixture(t)
	cache := l.c.Dir()
	ReleaseIdle()
	idle := func() (n int) {
		engines.Lock()
		defer engines.Unlock()
		for _, se := range engines.m {
			if se.refs == 0 {
				n++
			}
		}
		return n
	}
	ts := l.Tensors()
	upload := func(l *Loader, s cuda.Stream) {
		t.Helper()
		d, err := ctx.Alloc(ts[0].Size)
		if err != nil {
			t.Fatal(err)
		}
		defer ctx.Free(d)
		ev, err := l.UploadBatch([]int{ts[0].Index}, 0, []uint64{uint64(d)}, []uint64{ts[0].Size}, uintptr(s))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.EventWait(ev); err != nil {
			t.Fatal(err)
		}
		l.EventRelease(ev)
	}
	s1, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s1)
	upload(l, s1)
	l.Close()
	if n := idle(); n != 1 {
		t.Fatalf("%d idle engines after a handle closed, want 1", n)
	}
	l2, err := Open(cache, "")
	if err != nil {
		t.Fatal(err)
	}
	upload(l2, s1)
	if n := idle(); n != 0 {
		t.Fatalf("%d idle engines while a handle uses the stream's, want 0", n)
	}
	s2, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s2)
	l3, err := Open(cache, "")
	if err != nil {
		t.Fatal(err)
	}
	upload(l3, s2)
	l2.Close()
	l3.Close()
	if n := idle(); n != 1 {
		t.Fatalf("%d idle engines after two streams' handles closed, want 1", n)
	}
	if n := ReleaseIdle(); n != 1 {
		t.Fatalf("ReleaseIdle closed %d engines, want 1", n)
	}
	if n := idle(); n != 0 {
		t.Fatalf("%d idle engines after ReleaseIdle", n)
	}
}

// TestReadHostCopyCutShort: with its source gone, a raw tensor whose copy
// lies past the end of its pack cut short is a damaged cache object
// (IntegrityError in Python), as a payload there is, not a read error.
func TestReadHostCopyCutShort(t *testing.T) {
	c, s := fixture.Compressed(t, synth.Config{Small: 200, Shards: 1, Seed: 16}, pipeline.CompressOptions{SelfContained: true, MinSaving: 0.99})
	if err := os.Rename(s.Root, s.Root+".gone"); err != nil {
		t.Fatal(err)
	}
	l, err := Open(c.Dir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var last *Tensor
	var pack string
	var end uint64
	for i := range l.Tensors() {
		tn := &l.Tensors()[i]
		loc, _, err := c.Locate(tn.Key)
		if err != nil || loc.Pack == "" || tn.Compressed {
			continue
		}
		if loc.Offset+tn.Size > end {
			last, pack, end = tn, loc.Path, loc.Offset+tn.Size
		}
	}
	if last == nil {
		t.Fatal("no raw copy in a pack")
	}
	if err := os.Truncate(pack, int64(end-last.Size/2)); err != nil {
		t.Fatal(err)
	}
	err = l.ReadHost(last.Index, make([]byte, last.Size))
	if !errors.Is(err, shardcache.ErrObjectCorrupt) || !strings.Contains(err.Error(), pack) {
		t.Fatalf("a raw copy past its pack's end: %v, want a corrupt object naming %s", err, pack)
	}
}

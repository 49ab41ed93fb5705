package loader

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
)

// packAll packs every tensor of l (with flags) for destinations at base
// plus offsets 256 bytes apart, returning the pack, its info and each
// tensor's offset.
func packAll(t *testing.T, l *Loader, base uint64, flags PackFlags) ([]byte, PackInfo, []uint64, uint64) {
	t.Helper()
	ts := l.Tensors()
	idx, dsts, caps, offs := make([]int, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts))
	var total uint64
	for i, tn := range ts {
		offs[i] = total
		idx[i], dsts[i], caps[i] = tn.Index, base+total, tn.Size
		total += (tn.Size + 255) &^ 255
	}
	n, err := l.PackSize(idx, flags)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xEE}, int(n)+7)
	info, err := l.Pack(idx, dsts, caps, buf, flags)
	if err != nil {
		t.Fatal(err)
	}
	if info.Staged > n || info.Count != len(ts) {
		t.Fatalf("pack info %+v, want at most %d bytes and %d tensors", info, n, len(ts))
	}
	return buf[:info.Staged], info, offs, total
}

// TestPackLayout reads a pack as the scatter kernel does, on the host:
// every table entry sends its stored bytes, decoded, to the tensor's
// destination, and every tensor comes out equal to its source.
func TestPackLayout(t *testing.T) {
	l, _ := openFixture(t)
	checkPack(t, l, 0)
	if kept := checkPack(t, l, PackEntropy); kept != 0 { // no entropy payload: the same pack
		t.Errorf("%d entropy payloads kept from a fixed cache", kept)
	}
}

// TestPackEntropy: entropy payloads are packed decoded, as fixed-rate
// payloads (BF16) or raw bytes, or with PackEntropy kept with their
// descriptors, and come out exact either way.
func TestPackEntropy(t *testing.T) {
	l := openEntropyFixture(t)
	checkPack(t, l, 0)
	kept := checkPack(t, l, PackEntropy)
	// A payload is kept where it and its descriptor take fewer bytes than
	// its tensor packed decoded: the large ones, not the smallest.
	coded, small := 0, 0
	for _, tn := range l.Tensors() {
		if tn.rec.Stored == shardcache.StoredEntropy {
			coded++
			n, _ := l.StoredSize(tn.Index)
			if align16(n)+scatter.EntropyEntryBytes >= decodedSize(&tn) {
				small++
			}
		}
	}
	if kept == 0 || small == 0 || kept != coded-small {
		t.Errorf("%d entropy payloads, %d of them small, %d kept", coded, small, kept)
	}
	// Kept, the payloads are smaller than decoded into fixed-rate ones.
	_, decoded, _, _ := packAll(t, l, 1<<40, 0)
	_, keeping, _, _ := packAll(t, l, 1<<40, PackEntropy)
	if keeping.Staged >= decoded.Staged {
		t.Errorf("a pack of %d bytes with its entropy payloads kept, %d with them decoded", keeping.Staged, decoded.Staged)
	}
	t.Logf("pack of %d tensors: %d bytes decoded, %d with %d payloads kept", decoded.Count, decoded.Staged, keeping.Staged, kept)
}

// openEntropyFixture opens a cache of a generated checkpoint compressed
// with the entropy codec.
func openEntropyFixture(t *testing.T) *Loader {
	t.Helper()
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "ck"), filepath.Join(dir, "cache")
	if _, err := synth.Write(context.Background(), src, synth.Config{Bytes: 2 << 20, Shards: 1, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Compress(context.Background(), src, pipeline.CompressOptions{Output: cache, Jobs: 2, Codec: pipeline.CodecEntropy, MinSaving: 0.03, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(cache, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	entropy := 0
	for _, tn := range l.Tensors() {
		if tn.rec.Stored == shardcache.StoredEntropy {
			entropy++
		}
	}
	if entropy == 0 {
		t.Fatal("no entropy payloads in the cache")
	}
	return l
}

// checkPack packs every tensor of l with flags and reads the pack as the
// kernels would: the scatter table's entries, then the entropy payloads'
// descriptors (PackEntropy: one for each entropy payload kept, whose
// entry writes nothing); it returns how many were kept.
func checkPack(t *testing.T, l *Loader, flags PackFlags) int {
	t.Helper()
	const base = 1 << 40
	buf, info, offs, total := packAll(t, l, base, flags)
	dev := make([]byte, total)
	var units uint64
	compressed, kept := 0, 0
	byDst := map[uint64]int{}
	for i, tn := range l.Tensors() {
		e := buf[i*scatter.EntryBytes:]
		dst, src := binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint64(e[8:])
		stored, size := binary.LittleEndian.Uint64(e[16:]), binary.LittleEndian.Uint64(e[24:])
		byDst[dst] = i
		if _, keep, err := l.packBound(&tn, flags); err != nil {
			t.Fatal(err)
		} else if keep {
			if dst != base+offs[i] || stored != 0 || size != 0 {
				t.Fatalf("%s: a kept entropy payload's entry dst %#x stored %d size %d", tn.Name, dst, stored, size)
			}
			kept++
			continue
		}
		if dst != base+offs[i] || size != tn.Size || src%16 != 0 || src+stored > info.Staged {
			t.Fatalf("%s: entry dst %#x src %d stored %d size %d", tn.Name, dst, src, stored, size)
		}
		out := dev[offs[i] : offs[i]+size]
		if binary.LittleEndian.Uint32(e[32:]) != 0 { // a payload
			compressed++
			if err := codec.Decode(out, buf[src:src+stored]); err != nil {
				t.Fatalf("%s: %v", tn.Name, err)
			}
		} else {
			copy(out, buf[src:src+stored])
		}
		if !bytes.Equal(out, source(t, &tn)) {
			t.Fatalf("%s differs from the source", tn.Name)
		}
		units += uint64(binary.LittleEndian.Uint32(e[60:]))
	}
	if compressed+kept == 0 || units != info.Units || info.Entropy.Count != kept {
		t.Fatalf("%d payloads, %d kept entropy payloads, %d units; info %+v", compressed, kept, units, info)
	}
	if kept == 0 {
		if info.EntropyAt != 0 || info.Entropy != (EntropyBatch{}) {
			t.Fatalf("no entropy payload kept, info %+v", info)
		}
		return 0
	}
	// The descriptors, after the stored bytes: each payload lies before
	// them and decodes to its tensor.
	if info.Staged != info.EntropyAt+scatter.EntropyBytes(kept) || info.Entropy.Units == 0 || info.Entropy.Buf == 0 {
		t.Fatalf("info %+v for %d kept payloads", info, kept)
	}
	ds, err := scatter.ReadEntropy(buf, info.EntropyAt, kept, info.Entropy.Units)
	if err != nil {
		t.Fatal(err)
	}
	for k, d := range ds {
		i, ok := byDst[d.Dst]
		if !ok {
			t.Fatalf("descriptor %d: no tensor at %#x", k, d.Dst)
		}
		tn := l.Tensors()[i]
		out := dev[offs[i] : offs[i]+tn.Size]
		if err := entropy.Decode(out, buf[d.Src:d.End()], 1); err != nil {
			t.Fatalf("%s: %v", tn.Name, err)
		}
		if !bytes.Equal(out, source(t, &tn)) {
			t.Fatalf("%s (a kept entropy payload) differs from the source", tn.Name)
		}
	}
	return kept
}

// TestPackRejects: short buffers and capacities and mismatched arrays
// are errors that name the problem.
func TestPackRejects(t *testing.T) {
	l, _ := openFixture(t)
	tn := l.Tensors()[0]
	n, err := l.PackSize([]int{tn.Index}, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := []int{tn.Index}
	if _, err := l.Pack(one, []uint64{1 << 20}, []uint64{tn.Size}, make([]byte, n-1), 0); !errors.Is(err, ErrTooSmall) {
		t.Errorf("short buffer: %v", err)
	}
	if _, err := l.Pack(one, []uint64{1 << 20}, []uint64{tn.Size - 1}, make([]byte, n), 0); !errors.Is(err, ErrTooSmall) || !strings.Contains(err.Error(), tn.Name) {
		t.Errorf("short capacity: %v", err)
	}
	if _, err := l.Pack(one, nil, nil, make([]byte, n), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("no destinations: %v", err)
	}
	if _, err := l.PackSize([]int{len(l.Tensors())}, 0); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) {
		t.Errorf("index out of range: %v", err)
	}
	// A kept entropy payload's destination must be 16-byte aligned.
	el := openEntropyFixture(t)
	for _, et := range el.Tensors() {
		if _, keep, err := el.packBound(&et, PackEntropy); err != nil || !keep {
			continue
		}
		n, err := el.PackSize([]int{et.Index}, PackEntropy)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := el.Pack([]int{et.Index}, []uint64{1<<20 + 8}, []uint64{et.Size}, make([]byte, n), PackEntropy); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "entropy payload's destination") {
			t.Errorf("an unaligned destination: %v", err)
		}
		break
	}

}

// TestScatterPack uploads a pack of every tensor to the device, scatters
// it with one launch on a stream of our own, and reads the tensors back;
// then a pack whose table sends a payload out of range writes nothing
// and ScatterCheck reports it. The same with an entropy cache, its
// payloads packed decoded and kept (PackEntropy: decoded by the batch
// launch after the scatter), where a descriptor whose payload would run
// into the descriptors is reported and writes nothing. It needs a GPU.
func TestScatterPack(t *testing.T) {
	fixed, _ := openFixture(t)
	ctx, s := gpuStream(t)
	ent := openEntropyFixture(t)
	for _, c := range []struct {
		name  string
		l     *Loader
		flags PackFlags
	}{{"fixed", fixed, 0}, {"entropy decoded", ent, 0}, {"entropy kept", ent, PackEntropy}} {
		t.Run(c.name, func(t *testing.T) { scatterPack(t, ctx, s, c.l, c.flags) })
	}
}

func scatterPack(t *testing.T, ctx *cuda.Context, s cuda.Stream, l *Loader, flags PackFlags) {
	if err := l.PrepareScatter(0); err != nil {
		t.Fatal(err)
	}
	// Destinations are known only once allocated: size first.
	_, _, _, total := packAll(t, l, 1<<40, flags)
	dst, err := ctx.Alloc(total)
	if err != nil {
		t.Fatal(err)
	}
	buf, info, offs, _ := packAll(t, l, uint64(dst), flags)
	defer ctx.Free(dst)
	if (flags&PackEntropy != 0) != (info.Entropy.Count > 0) {
		t.Fatalf("flags %d: info %+v", flags, info)
	}
	dev, err := ctx.Alloc(info.Staged)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(dev)
	host := make([]byte, total)
	run := func(pack []byte) error {
		t.Helper()
		if err := ctx.CopyHtoDAsync(dev, pack, s); err != nil {
			t.Fatal(err)
		}
		ctx.MemsetD8Async(dst, 0xA5, total, s)
		if err := l.Scatter(0, uint64(dev), info, uintptr(s)); err != nil {
			t.Fatal(err)
		}
		err := l.ScatterCheck(0, uintptr(s))
		ctx.CopyDtoHAsync(host, dst, s)
		ctx.StreamSynchronize(s)
		return err
	}
	if err := run(buf); err != nil {
		t.Fatal(err)
	}
	for i, tn := range l.Tensors() {
		if !bytes.Equal(host[offs[i]:offs[i]+tn.Size], source(t, &tn)) {
			t.Errorf("%s differs on the device", tn.Name)
		}
	}

	// A damaged pack: the kernels must skip the item and report it.
	type damage struct {
		what   string
		victim int // the tensor that must keep the fill
		apply  func(b []byte)
	}
	var damages []damage
	if info.Entropy.Count > 0 {
		d0 := info.EntropyAt
		victim := -1
		for i := range l.Tensors() {
			if uint64(dst)+offs[i] == binary.LittleEndian.Uint64(buf[d0:]) {
				victim = i
			}
		}
		if victim < 0 {
			t.Fatal("the first descriptor's tensor is not found")
		}
		damages = append(damages, damage{"a payload moved to where the descriptors start", victim,
			func(b []byte) { binary.LittleEndian.PutUint64(b[d0+8:], info.EntropyAt) }})
		if info.Entropy.Count > 1 {
			damages = append(damages, damage{"the second payload's first unit moved on", victim, func(b []byte) {
				at := d0 + scatter.EntropyEntryBytes + 60
				binary.LittleEndian.PutUint32(b[at:], binary.LittleEndian.Uint32(b[at:])+1)
			}})
		}
	} else {
		damages = append(damages, damage{"item 0's stored bytes run past the pack", 0,
			func(b []byte) { binary.LittleEndian.PutUint64(b[16:], info.Staged) }})
	}
	for _, dm := range damages {
		bad := append([]byte(nil), buf...)
		dm.apply(bad)
		if info.Entropy.Count > 0 {
			// The kernel's checks in Go refuse it too.
			if _, err := scatter.ReadEntropy(bad, info.EntropyAt, info.Entropy.Count, info.Entropy.Units); !errors.Is(err, scatter.ErrInvalid) {
				t.Errorf("%s: ReadEntropy: %v", dm.what, err)
			}
		}
		if err := run(bad); !errors.Is(err, gpu.ErrKernel) {
			t.Errorf("%s: %v, want gpu.ErrKernel", dm.what, err)
		}
		tn := l.Tensors()[dm.victim]
		if !bytes.Equal(host[offs[dm.victim]:offs[dm.victim]+tn.Size], bytes.Repeat([]byte{0xA5}, int(tn.Size))) {
			t.Errorf("%s: the bad item %s wrote its range", dm.what, tn.Name)
		}
	}
	if err := l.ScatterCheck(0, uintptr(s)); err != nil {
		t.Errorf("check after check: %v", err)
	}
}

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
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
)

// packAll packs every tensor of l for destinations at base plus offsets
// 256 bytes apart, returning the pack, its info and each tensor's offset.
func packAll(t *testing.T, l *Loader, base uint64) ([]byte, PackInfo, []uint64, uint64) {
	t.Helper()
	ts := l.Tensors()
	idx, dsts, caps, offs := make([]int, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts)), make([]uint64, len(ts))
	var total uint64
	for i, tn := range ts {
		offs[i] = total
		idx[i], dsts[i], caps[i] = tn.Index, base+total, tn.Size
		total += (tn.Size + 255) &^ 255
	}
	n, err := l.PackSize(idx)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xEE}, int(n)+7)
	info, err := l.Pack(idx, dsts, caps, buf)
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
	checkPack(t, l)
}

// TestPackEntropy: entropy payloads are packed decoded, as fixed-rate
// payloads (BF16) or raw bytes, and come out exact.
func TestPackEntropy(t *testing.T) {
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
	defer l.Close()
	entropy := 0
	for _, tn := range l.Tensors() {
		if tn.rec.Stored == shardcache.StoredEntropy {
			entropy++
		}
	}
	if entropy == 0 {
		t.Fatal("no entropy payloads in the cache")
	}
	checkPack(t, l)
}

// checkPack packs every tensor of l and reads the pack as the scatter
// kernel would.
func checkPack(t *testing.T, l *Loader) {
	t.Helper()
	const base = 1 << 40
	buf, info, offs, total := packAll(t, l, base)
	dev := make([]byte, total)
	var units uint64
	compressed := 0
	for i, tn := range l.Tensors() {
		e := buf[i*scatter.EntryBytes:]
		dst, src := binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint64(e[8:])
		stored, size := binary.LittleEndian.Uint64(e[16:]), binary.LittleEndian.Uint64(e[24:])
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
	if compressed == 0 || units != info.Units {
		t.Fatalf("%d payloads, %d units against %d", compressed, units, info.Units)
	}
}

// TestPackRejects: short buffers and capacities and mismatched arrays
// are errors that name the problem.
func TestPackRejects(t *testing.T) {
	l, _ := openFixture(t)
	tn := l.Tensors()[0]
	n, err := l.PackSize([]int{tn.Index})
	if err != nil {
		t.Fatal(err)
	}
	one := []int{tn.Index}
	if _, err := l.Pack(one, []uint64{1 << 20}, []uint64{tn.Size}, make([]byte, n-1)); !errors.Is(err, ErrTooSmall) {
		t.Errorf("short buffer: %v", err)
	}
	if _, err := l.Pack(one, []uint64{1 << 20}, []uint64{tn.Size - 1}, make([]byte, n)); !errors.Is(err, ErrTooSmall) || !strings.Contains(err.Error(), tn.Name) {
		t.Errorf("short capacity: %v", err)
	}
	if _, err := l.Pack(one, nil, nil, make([]byte, n)); !errors.Is(err, ErrInvalid) {
		t.Errorf("no destinations: %v", err)
	}
	if _, err := l.PackSize([]int{len(l.Tensors())}); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalid) {
		t.Errorf("index out of range: %v", err)
	}

}

// TestScatterPack uploads a pack of every tensor to the device, scatters
// it with one launch on a stream of our own, and reads the tensors back;
// then a pack whose table sends a payload out of range writes nothing
// and ScatterCheck reports it. It needs a GPU.
func TestScatterPack(t *testing.T) {
	l, _ := openFixture(t)
	ctx, s := gpuStream(t)
	if err := l.PrepareScatter(0); err != nil {
		t.Fatal(err)
	}
	// Destinations are known only once allocated: size first.
	_, _, _, total := packAll(t, l, 1<<40)
	dst, err := ctx.Alloc(total)
	if err != nil {
		t.Fatal(err)
	}
	buf, info, offs, _ := packAll(t, l, uint64(dst))
	defer ctx.Free(dst)
	dev, err := ctx.Alloc(info.Staged)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(dev)
	if err := ctx.CopyHtoDAsync(dev, buf, s); err != nil {
		t.Fatal(err)
	}
	ctx.MemsetD8Async(dst, 0xA5, total, s)
	if err := l.Scatter(0, uint64(dev), info, uintptr(s)); err != nil {
		t.Fatal(err)
	}
	if err := l.ScatterCheck(0, uintptr(s)); err != nil {
		t.Fatal(err)
	}
	host := make([]byte, total)
	ctx.CopyDtoHAsync(host, dst, s)
	ctx.StreamSynchronize(s)
	for i, tn := range l.Tensors() {
		if !bytes.Equal(host[offs[i]:offs[i]+tn.Size], source(t, &tn)) {
			t.Errorf("%s differs on the device", tn.Name)
		}
	}

	// Item 0's stored bytes claimed to run past the pack: the kernel
	// must skip it and report it.
	bad := append([]byte(nil), buf...)
	binary.LittleEndian.PutUint64(bad[16:], info.Staged)
	ctx.CopyHtoDAsync(dev, bad, s)
	ctx.MemsetD8Async(dst, 0xA5, total, s)
	if err := l.Scatter(0, uint64(dev), info, uintptr(s)); err != nil {
		t.Fatal(err)
	}
	if err := l.ScatterCheck(0, uintptr(s)); !errors.Is(err, gpu.ErrKernel) {
		t.Errorf("bad table entry: %v, want gpu.ErrKernel", err)
	}
	ctx.CopyDtoHAsync(host, dst, s)
	ctx.StreamSynchronize(s)
	tn := l.Tensors()[0]
	if !bytes.Equal(host[:tn.Size], bytes.Repeat([]byte{0xA5}, int(tn.Size))) {
		t.Errorf("the bad item %s wrote its range", tn.Name)
	}
	if err := l.ScatterCheck(0, uintptr(s)); err != nil {
		t.Errorf("check after check: %v", err)
	}
}

package loader

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/synth"
	"github.com/splitzip/splitzip/pipeline"
)

func fixture(t *testing.T) (*Loader, string) {
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

func source(t *testing.T, tn *Tensor) []byte {
	b, err := os.ReadFile(tn.Shard)
	if err != nil {
		t.Fatal(err)
	}
	return b[tn.Offset : tn.Offset+tn.Size]
}

func TestReadHost(t *testing.T) {
	l, _ := fixture(t)
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

// TestUpload uploads every tensor into device memory on a stream of our
// own and reads it back. It needs a GPU.
func TestUpload(t *testing.T) {
	l, _ := fixture(t)
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
	defer ctx.Close()
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.DestroyStream(s)
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

package loader

// Layer packs: a set of tensors' stored bytes laid out behind a scatter
// table (gpu.PutScatterTable) in one buffer, so that one launch of the
// scatter kernel writes all of them to their destinations, raw tensors
// copied and payloads decoded out of place. An offload runtime keeps a
// layer's pack in pinned host memory or in GPU memory and re-faults the
// layer with a copy of the pack (or none) and that launch, which a CUDA
// graph can capture: the launch's arguments are fixed and the table it
// reads is in device memory, checked there.

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/shardcache"
)

// PackInfo is what Pack wrote: the bytes of the pack (staged), its items
// and the scatter kernel's units of work, the arguments of Scatter.
type PackInfo struct {
	Staged uint64
	Count  int
	Units  uint64
}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// packLayout returns where each tensor's stored bytes go in the pack of
// idx and the pack's size.
func (l *Loader) packLayout(idx []int) (offs, sizes []uint64, staged uint64, err error) {
	offs, sizes = make([]uint64, len(idx)), make([]uint64, len(idx))
	staged = align16(gpu.ScatterTableBytes(len(idx)))
	for k, i := range idx {
		t, err := l.Tensor(i)
		if err != nil {
			return nil, nil, 0, err
		}
		if t.rec.Stored == shardcache.StoredEntropy {
			return nil, nil, 0, fmt.Errorf("tensor %q: %w: an entropy payload has no packed form (compress with --codec fixed)", t.Name, ErrInvalid)
		}
		if sizes[k], err = l.StoredSize(i); err != nil {
			return nil, nil, 0, err
		}
		offs[k] = staged
		staged += align16(sizes[k])
	}
	return offs, sizes, staged, nil
}

// PackSize returns the bytes of the pack of tensors idx (Pack's buffer).
func (l *Loader) PackSize(idx []int) (uint64, error) {
	_, _, staged, err := l.packLayout(idx)
	return staged, err
}

// Pack writes into buf the pack of tensors idx whose destinations are
// the device ranges [dsts[k], dsts[k]+caps[k]): their stored bytes, each
// payload checked whole as ReadStored checks it, behind the scatter table
// that sends them there. Fixed-rate payloads and raw tensors pack; an
// entropy payload is ErrInvalid. A payload's destination must be 16-byte
// aligned (as tensors of an arena or of torch's allocator are).
func (l *Loader) Pack(idx []int, dsts, caps []uint64, buf []byte) (PackInfo, error) {
	if len(dsts) != len(idx) || len(caps) != len(idx) {
		return PackInfo{}, fmt.Errorf("%w: %d tensors, %d destinations, %d capacities", ErrInvalid, len(idx), len(dsts), len(caps))
	}
	offs, sizes, staged, err := l.packLayout(idx)
	if err != nil {
		return PackInfo{}, err
	}
	if uint64(len(buf)) < staged {
		return PackInfo{}, fmt.Errorf("%w: a pack of %d bytes in a buffer of %d", ErrTooSmall, staged, len(buf))
	}
	buf = buf[:staged]
	items := make([]gpu.ScatterItem, len(idx))
	heads := make([]codec.Header, len(idx))
	for k, i := range idx {
		t, _ := l.Tensor(i)
		if caps[k] < t.Size {
			return PackInfo{}, fmt.Errorf("tensor %q: %w: %d bytes at %#x for %d", t.Name, ErrTooSmall, caps[k], dsts[k], t.Size)
		}
		p := buf[offs[k] : offs[k]+sizes[k]]
		if _, err := l.ReadStored(i, p); err != nil {
			return PackInfo{}, err
		}
		clear(buf[offs[k]+sizes[k] : offs[k]+align16(sizes[k])])
		items[k] = gpu.ScatterItem{Name: t.Name, Dst: dsts[k], Src: offs[k], Stored: sizes[k], Size: t.Size}
		if t.rec.Stored == shardcache.StoredSplitZip {
			if heads[k], err = codec.ParseHeader(p); err != nil {
				return PackInfo{}, fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			items[k].Header = &heads[k]
		}
	}
	tb := gpu.ScatterTableBytes(len(idx))
	clear(buf[tb:align16(tb)])
	if err := gpu.PutScatterTable(buf, items, staged); err != nil {
		return PackInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return PackInfo{Staged: staged, Count: len(idx), Units: gpu.ScatterUnits(items)}, nil
}

// decoder returns device d's decoder, loading it on first use.
func (l *Loader) decoder(d int) (*gpuState, *gpu.Decoder, error) {
	g, err := l.device(d)
	if err != nil {
		return nil, nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dec == nil {
		if g.dec, err = gpu.NewDecoder(g.ctx); err != nil {
			return nil, nil, err
		}
	}
	return g, g.dec, nil
}

// PrepareScatter loads device d's scatter kernel, so that Scatter, later,
// makes no call a CUDA graph capture forbids (memory allocation, module
// loading, synchronization).
func (l *Loader) PrepareScatter(d int) error {
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	return dec.PrepareScatter()
}

// Scatter enqueues on the caller's stream (a CUstream of device d, 0 for
// the default stream) the scatter kernel over a pack in device memory at
// base, as Pack described it (info). It only enqueues, so it can be
// captured in a CUDA graph; items the kernel finds invalid are skipped,
// writing nothing, and reported by ScatterCheck.
func (l *Loader) Scatter(d int, base uint64, info PackInfo, stream uintptr) error {
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	return dec.LaunchScatter(cuda.DevicePtr(base), info.Staged, info.Count, info.Units, cuda.Stream(stream))
}

// ScatterCheck waits for the caller's stream and returns, as an error
// wrapping gpu.ErrKernel, what the scatter kernel of device d reported
// since the last check, clearing it.
func (l *Loader) ScatterCheck(d int, stream uintptr) error {
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	return dec.TakeError(cuda.Stream(stream))
}

package loader

// Layer packs: a set of tensors' stored bytes laid out behind a scatter
// table (scatter.Put) in one buffer, so that one launch of the
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
	"github.com/splitzip/splitzip/scatter"
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

// packBound returns the bytes a tensor's stored form takes in a pack at
// most: its payload, or its raw size (an entropy payload is packed
// decoded, as a fixed-rate payload when that is smaller, else raw).
func (l *Loader) packBound(t *Tensor) (uint64, error) {
	if t.rec.Stored == shardcache.StoredEntropy {
		return t.Size, nil
	}
	return l.StoredSize(t.Index)
}

// PackSize returns the bytes Pack needs for the pack of tensors idx (the
// pack itself may take fewer: PackInfo.Staged).
func (l *Loader) PackSize(idx []int) (uint64, error) {
	n := align16(scatter.TableBytes(len(idx)))
	for _, i := range idx {
		t, err := l.Tensor(i)
		if err != nil {
			return 0, err
		}
		b, err := l.packBound(t)
		if err != nil {
			return 0, err
		}
		n += align16(b)
	}
	return n, nil
}

// Pack writes into buf (PackSize bytes) the pack of tensors idx whose
// destinations are the device ranges [dsts[k], dsts[k]+caps[k]): their
// stored bytes, each payload checked whole as ReadStored checks it,
// behind the scatter table that sends them there. Fixed-rate payloads
// and raw tensors pack as they are stored. The scatter kernel decodes
// fixed-rate payloads only, so an entropy payload is decoded here and
// packed as a fixed-rate payload (BF16, when that is smaller) or as raw
// bytes. A payload's destination must be 16-byte aligned (as tensors of
// an arena or of torch's allocator are).
func (l *Loader) Pack(idx []int, dsts, caps []uint64, buf []byte) (PackInfo, error) {
	if len(dsts) != len(idx) || len(caps) != len(idx) {
		return PackInfo{}, fmt.Errorf("%w: %d tensors, %d destinations, %d capacities", ErrInvalid, len(idx), len(dsts), len(caps))
	}
	bound, err := l.PackSize(idx)
	if err != nil {
		return PackInfo{}, err
	}
	if uint64(len(buf)) < bound {
		return PackInfo{}, fmt.Errorf("%w: a pack of up to %d bytes in a buffer of %d", ErrTooSmall, bound, len(buf))
	}
	items := make([]scatter.Item, len(idx))
	heads := make([]codec.Header, len(idx))
	tb := scatter.TableBytes(len(idx))
	pos := align16(tb)
	clear(buf[tb:pos])
	for k, i := range idx {
		t, _ := l.Tensor(i)
		if caps[k] < t.Size {
			return PackInfo{}, fmt.Errorf("tensor %q: %w: %d bytes at %#x for %d", t.Name, ErrTooSmall, caps[k], dsts[k], t.Size)
		}
		b, _ := l.packBound(t)
		n, payload, err := l.packItem(t, buf[pos:pos+b])
		if err != nil {
			return PackInfo{}, err
		}
		clear(buf[pos+n : pos+align16(n)])
		items[k] = scatter.Item{Name: t.Name, Dst: dsts[k], Src: pos, Stored: n, Size: t.Size}
		if payload {
			if heads[k], err = codec.ParseHeader(buf[pos : pos+n]); err != nil {
				return PackInfo{}, fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			items[k].Header = &heads[k]
		}
		pos += align16(n)
	}
	if err := scatter.Put(buf, items, pos); err != nil {
		return PackInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return PackInfo{Staged: pos, Count: len(idx), Units: scatter.Units(items)}, nil
}

// packItem writes tensor t's packed form into dst (its packBound bytes)
// and returns its size and whether it is a fixed-rate payload.
func (l *Loader) packItem(t *Tensor, dst []byte) (uint64, bool, error) {
	if t.rec.Stored != shardcache.StoredEntropy {
		n, err := l.ReadStored(t.Index, dst)
		return n, t.rec.Stored == shardcache.StoredFixed, err
	}
	n, err := l.StoredSize(t.Index)
	if err != nil {
		return 0, false, err
	}
	stored := make([]byte, n)
	if _, err := l.ReadStored(t.Index, stored); err != nil {
		return 0, false, err
	}
	raw := dst[:t.Size]
	if err := l.DecodeHost(t.Index, stored, raw); err != nil {
		return 0, false, err
	}
	if t.DType == "BF16" {
		if p, _, err := codec.Encode(raw); err == nil && len(p) < len(raw) {
			return uint64(copy(dst, p)), true, nil
		}
	}
	return t.Size, false, nil
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

// ScatterRouted enqueues on the caller's stream one scatter launch over n
// candidate packs (a device table at packs: base, staged, count, units
// for each) that writes those whose byte of want (device memory) is set.
// Both tables are read on the device when the kernel runs, so a CUDA
// graph that captured the launch follows them at every replay. active is
// how many candidates are wanted at once. Errors as Scatter's.
func (l *Loader) ScatterRouted(d int, packs, want uint64, n, active int, stream uintptr) error {
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	return dec.LaunchScatterRouted(cuda.DevicePtr(packs), cuda.DevicePtr(want), n, active, cuda.Stream(stream))
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

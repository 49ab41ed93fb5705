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
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/scatter"
	"github.com/splitzip/splitzip/shardcache"
)

// PackInfo is what Pack wrote: the bytes of the pack (Staged), its
// items and the scatter kernel's units of work, the arguments of Scatter;
// and, with PackEntropy, the entropy payloads it keeps: their descriptors
// lie at EntropyAt (where the stored bytes end; Staged is past them) and
// Entropy is the shape of their batch launch.
type PackInfo struct {
	Staged    uint64
	Count     int
	Units     uint64
	EntropyAt uint64
	Entropy   EntropyBatch
}

// EntropyBatch is the shape of the batch launch that decodes a pack's
// entropy payloads (gpu.PlanEntropyBatch's).
type EntropyBatch = gpu.EntropyBatch

// PackFlags choose how Pack lays tensors out.
type PackFlags uint64

// PackEntropy keeps entropy payloads in a pack as they are stored, for
// Scatter to decode on the device after the scatter with one batch
// launch over the pack's payloads (scatter.PutEntropy's descriptors, and
// a table entry that writes nothing): a pack copied to the device before
// each use then moves fewer bytes, for a decode slower than the fixed
// rate's. Without it an entropy payload is decoded on the host when the
// pack is made. ScatterRouted decodes no entropy payload: its packs are
// made without it. A version 1 payload, which no batch decodes, and a
// small one, which with its 832-byte descriptor would take more than
// packed decoded, are packed decoded either way; a kept payload's
// destination must be 16-byte aligned, as a fixed-rate payload's.
const PackEntropy PackFlags = 1

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// checkFlags refuses PackFlags this build does not know.
func checkFlags(flags PackFlags) error {
	if flags&^PackEntropy != 0 {
		return fmt.Errorf("%w: unknown pack flags %#x", ErrInvalid, uint64(flags))
	}
	return nil
}

// packBound returns the bytes a tensor's stored form takes in a pack at
// most, and whether it is an entropy payload the pack keeps: its
// payload, or its raw size (an entropy payload packed decoded, as a
// fixed-rate payload when that is smaller, else raw); an entropy payload
// kept (PackEntropy, payload version 2 and later, when it and its
// descriptor take fewer bytes than its tensor packed decoded would) and
// its descriptor.
func (l *Loader) packBound(t *Tensor, flags PackFlags) (uint64, bool, error) {
	if t.rec.Stored != shardcache.StoredEntropy {
		n, err := l.StoredSize(t.Index)
		return n, false, err
	}
	if flags&PackEntropy == 0 {
		return t.Size, false, nil
	}
	n, err := l.StoredSize(t.Index)
	if err != nil {
		return 0, false, err
	}
	if align16(n)+scatter.EntropyEntryBytes >= decodedSize(t) {
		return t.Size, false, nil // a small tensor: its descriptor costs more than it saves
	}
	var head [64]byte
	if n < uint64(len(head)) {
		return 0, false, fmt.Errorf("tensor %q: %w: an entropy payload of %d bytes", t.Name, entropy.ErrPayload, n)
	}
	if _, _, err := l.readObject(t, head[:]); err != nil {
		return 0, false, err
	}
	h, err := entropy.ParsePayloadHeader(head[:])
	if err != nil {
		return 0, false, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if h.Version < 2 {
		return t.Size, false, nil // no chunk records: no batch decodes it
	}
	return align16(n) + scatter.EntropyEntryBytes, true, nil
}

// decodedSize is about what an entropy-coded tensor packed decoded
// takes: BF16 as a fixed-rate payload (12 bits a value), others raw.
func decodedSize(t *Tensor) uint64 {
	if t.DType == "BF16" {
		return t.Size / 4 * 3
	}
	return t.Size
}

// PackSize returns the bytes Pack needs for the pack of tensors idx made
// with flags (the pack itself may take fewer: PackInfo.Staged).
func (l *Loader) PackSize(idx []int, flags PackFlags) (uint64, error) {
	n, _, err := l.packBounds(idx, flags)
	return n, err
}

// packed is one tensor's place in a pack as packBound finds it.
type packed struct {
	bound uint64
	keep  bool
}

// packBounds returns PackSize's bytes and each tensor's packBound.
func (l *Loader) packBounds(idx []int, flags PackFlags) (uint64, []packed, error) {
	if err := checkFlags(flags); err != nil {
		return 0, nil, err
	}
	n := align16(scatter.TableBytes(len(idx)))
	ps := make([]packed, len(idx))
	for k, i := range idx {
		t, err := l.Tensor(i)
		if err != nil {
			return 0, nil, err
		}
		if ps[k].bound, ps[k].keep, err = l.packBound(t, flags); err != nil {
			return 0, nil, err
		}
		n += align16(ps[k].bound)
	}
	return n, ps, nil
}

// Pack writes into buf (PackSize bytes) the pack of tensors idx whose
// destinations are the device ranges [dsts[k], dsts[k]+caps[k]): their
// stored bytes, each payload checked whole as ReadStored checks it,
// behind the scatter table that sends them there. Fixed-rate payloads
// and raw tensors pack as they are stored. The scatter kernel decodes
// fixed-rate payloads only, so an entropy payload is decoded here and
// packed as a fixed-rate payload (BF16, when that is smaller) or as raw
// bytes, or with PackEntropy kept for Scatter's batch launch. A payload's
// destination must be 16-byte aligned (as tensors of an arena or of
// torch's allocator are).
func (l *Loader) Pack(idx []int, dsts, caps []uint64, buf []byte, flags PackFlags) (PackInfo, error) {
	if len(dsts) != len(idx) || len(caps) != len(idx) {
		return PackInfo{}, fmt.Errorf("%w: %d tensors, %d destinations, %d capacities", ErrInvalid, len(idx), len(dsts), len(caps))
	}
	bound, ps, err := l.packBounds(idx, flags) // checks flags
	if err != nil {
		return PackInfo{}, err
	}
	if uint64(len(buf)) < bound {
		return PackInfo{}, fmt.Errorf("%w: a pack of up to %d bytes in a buffer of %d (sz_pack_size, pack_size() in Python, gives its size)", ErrTooSmall, bound, len(buf))
	}
	items := make([]scatter.Item, len(idx))
	heads := make([]codec.Header, len(idx))
	var ents []scatter.Entropy
	tb := scatter.TableBytes(len(idx))
	pos := align16(tb)
	clear(buf[tb:pos])
	for k, i := range idx {
		t, _ := l.Tensor(i)
		if caps[k] < t.Size {
			return PackInfo{}, fmt.Errorf("tensor %q: %w: a destination of %d bytes at %#x for %d", t.Name, ErrTooSmall, caps[k], dsts[k], t.Size)
		}
		b, keep := ps[k].bound, ps[k].keep
		items[k] = scatter.Item{Name: t.Name, Dst: dsts[k], Src: pos}
		if keep {
			if dsts[k]%16 != 0 {
				return PackInfo{}, fmt.Errorf("tensor %q: %w: an entropy payload's destination %#x is not 16-byte aligned", t.Name, ErrInvalid, dsts[k])
			}
			n, h, err := l.keepEntropy(t, buf[pos:pos+b])
			if err != nil {
				return PackInfo{}, err
			}
			// The table's entry writes nothing; the batch does.
			clear(buf[pos+n : pos+align16(n)])
			ents = append(ents, scatter.Entropy{Name: t.Name, Dst: dsts[k], Src: pos, Size: t.Size, Head: h})
			pos += align16(n)
			continue
		}
		n, payload, err := l.packItem(t, buf[pos:pos+b])
		if err != nil {
			return PackInfo{}, err
		}
		clear(buf[pos+n : pos+align16(n)])
		items[k].Stored, items[k].Size = n, t.Size
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
	info := PackInfo{Staged: pos, Count: len(idx), Units: scatter.Units(items)}
	if len(ents) > 0 {
		if err := scatter.PutEntropy(buf, pos, tb, ents); err != nil {
			return PackInfo{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		info.EntropyAt, info.Entropy = pos, gpu.PlanEntropyBatch(ents)
		info.Staged = pos + scatter.EntropyBytes(len(ents))
	}
	return info, nil
}

// keepEntropy reads tensor t's entropy payload (version 2 or later)
// into dst and checks it whole (head, checksum, chunk index, the index's
// recorded checksum), returning its size and head.
func (l *Loader) keepEntropy(t *Tensor, dst []byte) (uint64, *entropy.Head, error) {
	o, err := l.c.Lookup(t.Key)
	if err != nil {
		return 0, nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if uint64(len(dst)) < o.Size {
		return 0, nil, fmt.Errorf("tensor %q: %w: %d bytes for a payload of %d", t.Name, ErrTooSmall, len(dst), o.Size)
	}
	p := dst[:o.Size]
	name, path, err := l.readObject(t, p)
	if err != nil {
		return 0, nil, err
	}
	h := new(entropy.Head)
	err = entropy.CheckTo(p, h)
	if err == nil {
		err = codec.CheckRecorded(h.Checksum, o.Checksum)
	}
	switch {
	case err != nil:
		return 0, nil, fileError(t, name, path, err)
	case h.ValueBytes() != t.Size:
		return 0, nil, fmt.Errorf("tensor %q: %w: entropy payload decodes to %d bytes, the tensor has %d", t.Name, codec.ErrSize, h.ValueBytes(), t.Size)
	}
	return o.Size, h, nil
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

// PrepareScatter loads device d's scatter kernel, and its entropy
// decoder when the cache holds entropy payloads, so that Scatter, later,
// makes no call a CUDA graph capture forbids (memory allocation, module
// loading, synchronization).
func (l *Loader) PrepareScatter(d int) error {
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	if err := dec.PrepareScatter(); err != nil {
		return err
	}
	for i := range l.tensors {
		if l.tensors[i].rec.Stored == shardcache.StoredEntropy {
			return dec.PrepareEntropy()
		}
	}
	return nil
}

// Scatter enqueues on the caller's stream (a CUstream of device d, 0 for
// the default stream) the scatter kernel over a pack in device memory at
// base, as Pack described it (info), and after it the batch decode of
// the entropy payloads the pack keeps (PackEntropy). It only enqueues, so
// it can be captured in a CUDA graph; items the kernels find invalid are
// skipped, writing nothing, and reported by ScatterCheck.
func (l *Loader) Scatter(d int, base uint64, info PackInfo, stream uintptr) error {
	staged, e := info.Staged, info.Entropy
	if e.Count < 0 || e.Count > 0 && (info.EntropyAt%16 != 0 || info.EntropyAt > info.Staged ||
		uint64(e.Count) > (info.Staged-info.EntropyAt)/scatter.EntropyEntryBytes) {
		return fmt.Errorf("%w: pack info with %d entropy payloads whose descriptors start at %d of %d bytes", ErrInvalid, e.Count, info.EntropyAt, info.Staged)
	}
	if e.Count > 0 {
		staged = info.EntropyAt // the stored bytes end where the descriptors start
	}
	_, dec, err := l.decoder(d)
	if err != nil {
		return err
	}
	s := cuda.Stream(stream)
	if err := dec.LaunchScatter(cuda.DevicePtr(base), staged, info.Count, info.Units, s); err != nil {
		return err
	}
	return dec.LaunchEntropyBatch(cuda.DevicePtr(base), info.EntropyAt, e, s)
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

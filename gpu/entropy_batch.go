package gpu

// Batch launches of the entropy decoder: the payloads of one packed
// staging buffer, decoded out of place by one launch whose blocks take
// units of a payload's chunks in turn, from descriptors that
// scatter.PutEntropy wrote after the staged bytes (entropy.cu,
// splitzip_entropy_batch).

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/scatter"
)

// entropyBatchStatic bounds the batch kernel's static shared memory: the
// single kernel's, a payload's parameters and a pair table.
const entropyBatchStatic = 20 << 10

// entropyBatchParams mirrors struct EBParams in entropy.cu.
type entropyBatchParams struct {
	Base, Desc, Err        uint64
	Count, BufBytes, Units uint32
	_                      uint32
}

// EntropyBatch is the shape of a batch launch over some payloads
// (PlanEntropyBatch): how many, their units of work
// (scatter.EntropyUnits), the shared buffer each warp needs for the
// largest of their symbol chunks and rings, and the most chunks one has.
type EntropyBatch struct {
	Count  int
	Units  uint64
	Buf    int
	Chunks uint64
}

// PlanEntropyBatch returns the launch shape for ents, whose heads are
// checked (scatter.PutEntropy checks them again).
func PlanEntropyBatch(ents []scatter.Entropy) EntropyBatch {
	b := EntropyBatch{Count: len(ents), Units: scatter.EntropyUnits(ents)}
	for i := range ents {
		h := ents[i].Head
		if h == nil || h.Field < 0 || h.Field >= len(entropy.Fields) {
			continue // PutEntropy refuses it
		}
		sym := uint64(codec.ChunkValues*entropy.Fields[h.Field].Size + entropyOverhead)
		if h.MaxRecord > 0 {
			sym = min(sym, h.MaxSymbols)
		}
		b.Buf = max(b.Buf, entropyBuf(h.Field, h.Pairs, sym))
		b.Chunks = max(b.Chunks, h.Chunks())
	}
	return b
}

// entropyBuf is a warp's shared buffer for field fi, of pair symbols or
// not, and symbol chunks of at most sym bytes: the chunk with 16 bytes
// of alignment either side, the ring of fields and the other-bits ring.
func entropyBuf(fi int, pairs bool, sym uint64) int {
	ring := entropyRing
	if pairs {
		ring *= 2
	}
	return int((sym+15+15)&^15) + 16 + ring + entropyORing(fi, pairs)
}

// loadBatch finds the batch kernel in the loaded module and lets it use
// the shared memory a block may opt in to.
func (k *entropyKernel) loadBatch(ctx *cuda.Context) error {
	var err error
	if k.batch, err = ctx.Function(k.mod, "splitzip_entropy_batch"); err != nil {
		return err
	}
	threads, err := ctx.FuncAttribute(k.batch, cuda.FuncAttrMaxThreadsPerBlock)
	if err != nil {
		return err
	}
	if k.batchWarps = threads / 32; k.batchWarps < 1 {
		return fmt.Errorf("gpu: the entropy batch kernel allows %d threads a block", threads)
	}
	if err := ctx.SetFuncAttribute(k.batch, cuda.FuncAttrMaxDynamicSharedBytes, k.optin-entropyBatchStatic); err != nil {
		return err
	}
	return ctx.SetFuncAttribute(k.batch, cuda.FuncAttrSharedCarveout, 100)
}

// LaunchEntropyBatch decodes, on stream s, the b.Count entropy payloads
// of the staging buffer at base (device memory) whose descriptors lie at
// offset desc (scatter.PutEntropy wrote them, and the buffer was copied
// with them), each out of place into its destination; b is
// PlanEntropyBatch's shape for them. A payload that does not decode sets
// the decoder's error (TakeError); nothing is written outside the
// destinations' values.
func (d *Decoder) LaunchEntropyBatch(base cuda.DevicePtr, desc uint64, b EntropyBatch, s cuda.Stream) error {
	if b.Count == 0 || b.Chunks == 0 || b.Units == 0 {
		return nil
	}
	if b.Units > math.MaxUint32 {
		return fmt.Errorf("%w: %d units of work in one batch", scatter.ErrInvalid, b.Units)
	}
	if base%16 != 0 || desc%16 != 0 {
		return fmt.Errorf("%w: entropy descriptors at %#x + %d are not 16-byte aligned", scatter.ErrInvalid, base, desc)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k, err := d.loadEntropy()
	if err != nil {
		return err
	}
	warps := min(uint64(k.batchWarps), scatter.EntropyUnitChunks, b.Chunks, uint64((k.optin-entropyBatchStatic)/max(b.Buf, 1)))
	if warps < 1 {
		return fmt.Errorf("gpu: %d bytes of shared memory a block hold no %d-byte chunk buffer", k.optin, b.Buf)
	}
	pr := entropyBatchParams{Base: uint64(base), Desc: desc, Err: uint64(d.ctrl) + 8, Count: uint32(b.Count), BufBytes: uint32(b.Buf), Units: uint32(b.Units)}
	grid := uint32(min(b.Units, 1<<20)) // blocks take units in turn
	return d.ctx.Launch(k.batch, cuda.Dim3{X: grid}, cuda.Dim3{X: uint32(32 * warps)}, uint32(dynBytes(int(warps), b.Buf)), s, unsafe.Pointer(&pr))
}

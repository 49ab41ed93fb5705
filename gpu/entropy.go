package gpu

import (
	_ "embed"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// entropyFatbin holds the entropy decoder (entropy.cu), built like
// decode.fatbin by `make kernels`.
//
//go:embed entropy.fatbin
var entropyFatbin []byte

// Kernel constants; entropy.cu defines the same.
const (
	errEntropyIndex  = 16 // a record span is out of range or breaks the in-place invariant
	errEntropyStream = 32 // a chunk does not decode to its values
	// entropyStatic bounds the kernel's static shared memory (the decode
	// table and its build scratch, about 17 KiB).
	entropyStatic = 18 << 10
	// entropyRing is EZ_RING, a warp's ring of decoded symbols.
	entropyRing = 2048
	// entropyBatchRows is EZ_BATCH_ROWS, the rows of values whose other
	// bits a warp's other-bits ring holds at a time, and
	// entropyPairBatchRows EZ_PAIR_BATCH_ROWS, the same for payloads of
	// pair symbols (whose ring of fields is twice entropyRing bytes).
	entropyBatchRows     = 42
	entropyPairBatchRows = 44
	// entropyOverhead is EZ_OVERHEAD: a record is at most its values'
	// bytes and this.
	entropyOverhead = 64
	// entropyScratch bounds an in-place launch's scratch: a slot a warp
	// for the other bits of the chunk it decodes. With more than fits,
	// fewer warps run (SPLITZIP_ENTROPY_SCRATCH overrides it, in bytes,
	// for kernel experiments).
	entropyScratch = 64 << 20
)

// entropyParams mirrors struct EParams in entropy.cu.
type entropyParams struct {
	Dst, Src, Index, N, Chunks, Records, RecBytes, Flags, Ctrl, Err, Scratch uint64
	Field, InPlace, Epoch, BufBytes, MaxSym, SlotBytes, Pair                 uint32
	Lengths                                                                  [entropy.MaxSymbols]uint8
	Pairs                                                                    [entropy.MaxSymbols]uint16
}

// entropyKernel is the loaded entropy decoder and its launch shape per
// value size.
type entropyKernel struct {
	mod cuda.Module
	// fns are the kernels for payloads of single fields and of pair
	// symbols (fn picks one).
	fns   [2]cuda.Function
	optin int // shared memory a block may opt in to
	sms   int
	// maxWarps is the most warps a block has (the kernel's launch bound,
	// EZ_MAX_THREADS / 32), each decoding a chunk at a time.
	maxWarps int
	// scratch bounds an in-place launch's scratch bytes.
	scratch int
	shapes  map[shapeKey]entropyShape
	// batch is the kernel of batch launches (entropy_batch.go), with at
	// most batchWarps warps a block.
	batch      cuda.Function
	batchWarps int
}

// fn returns the kernel for payloads of pair symbols or of single fields.
func (k *entropyKernel) fn(pairs bool) cuda.Function {
	if pairs {
		return k.fns[1]
	}
	return k.fns[0]
}

// shapeKey is what a launch shape depends on: the field, whether its
// symbols are pairs, the longest symbol chunk and the scratch slot (0 out
// of place).
type shapeKey struct {
	field     int
	pairs     bool
	sym, slot uint64
}

// entropyShape is a launch shape: warps a block (each with a buffer of
// buf bytes) and blocks.
type entropyShape struct {
	warps, buf, grid int
}

// entropyImage returns the entropy fatbin: the embedded one, or the file
// SPLITZIP_ENTROPY_FATBIN names (kernel development on the GPU machine).
func entropyImage() ([]byte, error) {
	return imageOf("SPLITZIP_ENTROPY_FATBIN", entropyFatbin, "entropy")
}

// PrepareEntropy loads the entropy decoder now rather than on its first
// launch (it takes a few milliseconds, once a decoder).
func (d *Decoder) PrepareEntropy() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.loadEntropy()
	return err
}

// entropyKernel loads the entropy decoder on first use (d.mu held).
func (d *Decoder) loadEntropy() (*entropyKernel, error) {
	if d.ent != nil {
		return d.ent, nil
	}
	img, err := entropyImage()
	if err != nil {
		return nil, err
	}
	k := &entropyKernel{shapes: map[shapeKey]entropyShape{}, scratch: entropyScratch}
	if v := os.Getenv("SPLITZIP_ENTROPY_SCRATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("gpu: SPLITZIP_ENTROPY_SCRATCH=%q: want a positive number of bytes", v)
		}
		k.scratch = n
	}
	if k.mod, err = d.ctx.LoadModule(img); err != nil {
		return nil, err
	}
	fail := func(err error) (*entropyKernel, error) {
		d.ctx.UnloadModule(k.mod)
		return nil, err
	}
	for i, name := range [...]string{"splitzip_entropy_decode", "splitzip_entropy_decode_pairs"} {
		if k.fns[i], err = d.ctx.Function(k.mod, name); err != nil {
			return fail(err)
		}
	}
	if k.optin, err = d.ctx.Attribute(cuda.AttrMaxSharedPerBlockOptin); err != nil {
		return fail(err)
	}
	if k.sms, err = d.ctx.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return fail(err)
	}
	for _, fn := range k.fns {
		threads, err := d.ctx.FuncAttribute(fn, cuda.FuncAttrMaxThreadsPerBlock)
		if err != nil {
			return fail(err)
		}
		if threads/32 < 1 {
			return fail(fmt.Errorf("gpu: the entropy kernel allows %d threads a block", threads))
		}
		if k.maxWarps == 0 || threads/32 < k.maxWarps {
			k.maxWarps = threads / 32
		}
		if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrMaxDynamicSharedBytes, k.optin-entropyStatic); err != nil {
			return fail(err)
		}
		if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrSharedCarveout, 100); err != nil {
			return fail(err)
		}
	}
	if err := k.loadBatch(d.ctx); err != nil {
		return fail(err)
	}
	d.ent = k
	return k, nil
}

// shape returns the launch shape for field fi, of pair symbols or not,
// symbol chunks of at most sym bytes and, in place, scratch slots of slot
// bytes: as many warps a block as shared memory holds buffers for (each a
// symbol chunk with 16 bytes of alignment either side, the ring of fields
// and the other-bits ring) and, in place, as the scratch bound holds
// slots for on every multiprocessor.
func (k *entropyKernel) shape(ctx *cuda.Context, fi int, pairs bool, sym, slot uint64) (entropyShape, error) {
	key := shapeKey{fi, pairs, sym, slot}
	if s, ok := k.shapes[key]; ok {
		return s, nil
	}
	buf := entropyBuf(fi, pairs, sym)
	warps := min(k.maxWarps, (k.optin-entropyStatic)/buf)
	if warps < 1 {
		return entropyShape{}, fmt.Errorf("gpu: %d bytes of shared memory a block hold no %d-byte chunk buffer", k.optin, buf)
	}
	if slot > 0 {
		warps = max(1, min(warps, k.scratch/(k.sms*int(slot))))
	}
	per, err := ctx.MaxActiveBlocks(k.fn(pairs), 32*warps, uint64(dynBytes(warps, buf)))
	if err != nil {
		return entropyShape{}, err
	}
	if per < 1 {
		return entropyShape{}, fmt.Errorf("gpu: the entropy kernel does not fit a multiprocessor with %d warps", warps)
	}
	grid := k.sms * per
	if slot > 0 {
		grid = max(k.sms, min(grid, k.scratch/(warps*int(slot))))
	}
	s := entropyShape{warps: warps, buf: buf, grid: grid}
	if len(k.shapes) < 64 {
		k.shapes[key] = s
	}
	return s, nil
}

// entropyORing is ez_oring: a warp's other-bits ring for field fi, a
// power of two holding entropyBatchRows rows (entropyPairBatchRows for
// pair symbols) of 32 values' other bits and 32 bytes (0 when the field
// has none).
func entropyORing(fi int, pairs bool) int {
	ob := entropy.Fields[fi].Other()
	if ob == 0 {
		return 0
	}
	rows := entropyBatchRows
	if pairs {
		rows = entropyPairBatchRows
	}
	need, r := rows*32*ob/8+32, 16
	for r < need {
		r <<= 1
	}
	return r
}

// entropySlot is an in-place launch's scratch slot for field fi: a full
// chunk's other bits from a 16-byte boundary, rounded up to 16 bytes, and
// 16 more for the word reads past them (0 when the field has none).
func entropySlot(fi int) uint64 {
	ob := uint64(entropy.Fields[fi].Other())
	if ob == 0 {
		return 0
	}
	return (15+(codec.ChunkValues*ob+7)/8+15)&^15 + 16
}

// dynBytes is a launch's dynamic shared memory: the warps' buffers, at
// least the 8 KiB the decode table is built in.
func dynBytes(warps, buf int) int { return max(warps*buf, 8<<10) }

// LaunchEntropyInPlace decodes, on stream s, the entropy payload at the
// start of [buf, buf + h.ValueBytes()). h must come from entropy.ParseHead
// (or Check) of the same payload, which must have the in-place flag. The
// chunk index is first copied, on s, into device memory of the decoder's.
// Nothing outside that range is written, whatever the payload holds.
func (d *Decoder) LaunchEntropyInPlace(buf cuda.DevicePtr, h *entropy.Head, s cuda.Stream) error {
	if !h.InPlace {
		return entropy.ErrNotInPlace
	}
	return d.launchEntropy(buf, buf, h, true, s)
}

// LaunchEntropyOutOfPlace decodes the entropy payload at src (h.Size
// bytes) into [dst, dst + h.ValueBytes()) on stream s. Either launch first
// copies the payload's chunk index, on s, into device memory of the
// decoder's.
func (d *Decoder) LaunchEntropyOutOfPlace(dst, src cuda.DevicePtr, h *entropy.Head, s cuda.Stream) error {
	return d.launchEntropy(dst, src, h, false, s)
}

func (d *Decoder) launchEntropy(dst, src cuda.DevicePtr, h *entropy.Head, inPlace bool, s cuda.Stream) error {
	if dst%16 != 0 || src%16 != 0 {
		return fmt.Errorf("%w: decode buffers must be 16-byte aligned (%#x, %#x)", ErrKernel, dst, src)
	}
	if h.Version < 2 {
		return entropy.ErrNoRecords
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	N := h.Chunks()
	if N == 0 {
		return nil
	}
	k, err := d.loadEntropy()
	if err != nil {
		return err
	}
	// The longest symbol chunk: from the checked index, or the most a
	// record may hold (a chunk's other bits may be as few as none).
	sym := uint64(codec.ChunkValues*entropy.Fields[h.Field].Size + entropyOverhead)
	if h.MaxRecord > 0 {
		sym = min(sym, h.MaxSymbols)
	}
	var slot uint64
	if inPlace {
		slot = entropySlot(int(h.Field))
	}
	sh, err := k.shape(d.ctx, int(h.Field), h.Pairs, sym, slot)
	if err != nil {
		return err
	}
	// A launch of fewer chunks than the grid's warps spreads them over
	// every multiprocessor.
	grid := min(uint64(sh.grid), N)
	warps := min(uint64(sh.warps), (N+grid-1)/grid)
	if inPlace {
		if h.Size > h.ValueBytes() {
			return fmt.Errorf("%w: an in-place payload of %d bytes is larger than its %d values", ErrKernel, h.Size, h.ValueBytes())
		}
		if err := d.growFlags(N, s); err != nil {
			return err
		}
		if need := grid * warps * slot; d.scratchCap < need {
			if err := d.ctx.StreamSynchronize(s); err != nil { // an earlier launch may still use it
				return err
			}
			if err := d.reserve(&d.scratch, &d.scratchCap, need); err != nil {
				return err
			}
		}
	}
	// The kernel reads the index from a copy of the decoder's: in place,
	// the index lies in the last chunks' values, and it need not be
	// aligned to 8 bytes in the payload.
	n := h.Size - h.Index
	if d.idxCap < n {
		if err := d.ctx.StreamSynchronize(s); err != nil { // an earlier launch may still read it
			return err
		}
		if err := d.reserve(&d.idx, &d.idxCap, n); err != nil {
			return err
		}
	}
	if err := d.ctx.CopyDtoDAsync(d.idx, src+cuda.DevicePtr(h.Index), n, s); err != nil {
		return err
	}
	d.epoch++
	if d.epoch == 0 {
		d.epoch = 1
	}
	pr := entropyParams{Dst: uint64(dst), Src: uint64(src), Index: uint64(d.idx), N: h.Values, Chunks: N,
		Records: h.Others, RecBytes: h.Index - h.Others, Flags: uint64(d.flags), Ctrl: uint64(d.ctrl),
		Err: uint64(d.ctrl) + 8, Field: uint32(h.Field), Epoch: d.epoch, BufBytes: uint32(sh.buf), MaxSym: uint32(sym), Lengths: h.Lengths}
	if h.Pairs {
		pr.Pair, pr.Pairs = 1, h.PairFields
	}
	if inPlace {
		pr.InPlace, pr.Scratch, pr.SlotBytes = 1, uint64(d.scratch), uint32(slot)
	}
	return d.ctx.Launch(k.fn(h.Pairs), cuda.Dim3{X: uint32(grid)}, cuda.Dim3{X: uint32(32 * warps)}, uint32(dynBytes(int(warps), sh.buf)), s, unsafe.Pointer(&pr))
}

package gpu

import (
	_ "embed"
	"fmt"
	"os"
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
	// entropyMaxWarps is the most warps a block has (EZ_MAX_THREADS / 32),
	// each decoding a chunk at a time.
	entropyMaxWarps = 32
	// entropyRing is EZ_RING, a warp's ring of decoded symbols.
	entropyRing = 2048
	// entropyOverhead is EZ_OVERHEAD: a record is at most its values'
	// bytes and this.
	entropyOverhead = 64
)

// entropyParams mirrors struct EParams in entropy.cu.
type entropyParams struct {
	Dst, Src, Index, N, Chunks, Records, RecBytes, Flags, Ctrl, Err uint64
	Field, InPlace, Epoch, BufBytes, MaxSpan, Reserved              uint32
	Lengths                                                         [entropy.MaxSymbols]uint8
}

// entropyKernel is the loaded entropy decoder and its launch shape per
// value size.
type entropyKernel struct {
	mod    cuda.Module
	fn     cuda.Function
	optin  int // shared memory a block may opt in to
	sms    int
	shapes map[uint64]entropyShape // by the longest record
}

// entropyShape is a launch shape: warps a block (each with a buffer of
// buf bytes) and blocks.
type entropyShape struct {
	warps, buf, grid int
}

// entropyImage returns the entropy fatbin: the embedded one, or the file
// SPLITZIP_ENTROPY_FATBIN names (kernel development on the GPU machine).
func entropyImage() ([]byte, error) {
	if p := os.Getenv("SPLITZIP_ENTROPY_FATBIN"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("gpu: SPLITZIP_ENTROPY_FATBIN: %w", err)
		}
		return b, nil
	}
	if len(entropyFatbin) == 0 {
		return nil, fmt.Errorf("gpu: no entropy kernel image embedded; run make kernels")
	}
	return entropyFatbin, nil
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
	k := &entropyKernel{shapes: map[uint64]entropyShape{}}
	if k.mod, err = d.ctx.LoadModule(img); err != nil {
		return nil, err
	}
	fail := func(err error) (*entropyKernel, error) {
		d.ctx.UnloadModule(k.mod)
		return nil, err
	}
	if k.fn, err = d.ctx.Function(k.mod, "splitzip_entropy_decode"); err != nil {
		return fail(err)
	}
	if k.optin, err = d.ctx.Attribute(cuda.AttrMaxSharedPerBlockOptin); err != nil {
		return fail(err)
	}
	if k.sms, err = d.ctx.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return fail(err)
	}
	if err := d.ctx.SetFuncAttribute(k.fn, cuda.FuncAttrMaxDynamicSharedBytes, k.optin-entropyStatic); err != nil {
		return fail(err)
	}
	if err := d.ctx.SetFuncAttribute(k.fn, cuda.FuncAttrSharedCarveout, 100); err != nil {
		return fail(err)
	}
	d.ent = k
	return k, nil
}

// shape returns the launch shape for records of at most span bytes: as
// many warps a block as shared memory holds buffers for, each buffer a
// record with 16 bytes of alignment either side and the ring.
func (k *entropyKernel) shape(ctx *cuda.Context, span uint64) (entropyShape, error) {
	if s, ok := k.shapes[span]; ok {
		return s, nil
	}
	buf := int((span+15+15)&^15) + 16 + entropyRing
	warps := min(entropyMaxWarps, (k.optin-entropyStatic)/buf)
	if warps < 1 {
		return entropyShape{}, fmt.Errorf("gpu: %d bytes of shared memory a block hold no %d-byte chunk buffer", k.optin, buf)
	}
	per, err := ctx.MaxActiveBlocks(k.fn, 32*warps, uint64(dynBytes(warps, buf)))
	if err != nil {
		return entropyShape{}, err
	}
	if per < 1 {
		return entropyShape{}, fmt.Errorf("gpu: the entropy kernel does not fit a multiprocessor with %d warps", warps)
	}
	s := entropyShape{warps: warps, buf: buf, grid: k.sms * per}
	if len(k.shapes) < 64 {
		k.shapes[span] = s
	}
	return s, nil
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
	if h.Version != 2 {
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
	// The longest record: from the checked index, or the most a record
	// may hold.
	span := uint64(codec.ChunkValues*entropy.Fields[h.Field].Size + entropyOverhead)
	if h.MaxRecord > 0 {
		span = min(span, h.MaxRecord)
	}
	sh, err := k.shape(d.ctx, span)
	if err != nil {
		return err
	}
	if inPlace {
		if h.Size > h.ValueBytes() {
			return fmt.Errorf("%w: an in-place payload of %d bytes is larger than its %d values", ErrKernel, h.Size, h.ValueBytes())
		}
		if err := d.growFlags(N, s); err != nil {
			return err
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
		Err: uint64(d.ctrl) + 8, Field: uint32(h.Field), Epoch: d.epoch, BufBytes: uint32(sh.buf), MaxSpan: uint32(span), Lengths: h.Lengths}
	if inPlace {
		pr.InPlace = 1
	}
	grid := uint32(min(uint64(sh.grid), (N+uint64(sh.warps)-1)/uint64(sh.warps)))
	return d.ctx.Launch(k.fn, cuda.Dim3{X: grid}, cuda.Dim3{X: uint32(32 * sh.warps)}, uint32(dynBytes(sh.warps, sh.buf)), s, unsafe.Pointer(&pr))
}

// decodeEntropy is Decode for an entropy payload.
func (d *Decoder) decodeEntropy(dst, payload []byte) error {
	h, err := entropy.Check(payload)
	if err != nil {
		return err
	}
	if uint64(len(dst)) != h.ValueBytes() {
		return fmt.Errorf("%w: destination of %d bytes for %d %s values", codec.ErrSize, len(dst), h.Values, entropy.Fields[h.Field].DType)
	}
	if h.Values == 0 {
		return nil
	}
	if err := d.reserve(&d.buf, &d.bufCap, uint64(len(dst))); err != nil {
		return err
	}
	if h.InPlace {
		if err := d.ctx.CopyHtoDAsync(d.buf, payload, d.stream); err != nil {
			return err
		}
		err = d.LaunchEntropyInPlace(d.buf, h, d.stream)
	} else {
		if err := d.reserve(&d.payload, &d.payCap, h.Size); err != nil {
			return err
		}
		if err := d.ctx.CopyHtoDAsync(d.payload, payload, d.stream); err != nil {
			return err
		}
		err = d.LaunchEntropyOutOfPlace(d.buf, d.payload, h, d.stream)
	}
	if err != nil {
		return err
	}
	if err := d.ctx.CopyDtoHAsync(dst, d.buf, d.stream); err != nil {
		return err
	}
	return d.TakeError(d.stream)
}

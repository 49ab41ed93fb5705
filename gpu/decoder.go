package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// Kernel constants; decode.cu defines the same.
const (
	threads = 256
	// dynSmem is SZ_DYN_SMEM: the scatter kernel's two 32 KiB unit
	// buffers per block.
	dynSmem = 2 * stageBytes
	// stageBytes is SZ_BUF, one chunk's largest stored size.
	stageBytes = 2 * codec.ChunkValues
	// decodeStages is the most chunk buffers a block of splitzip_decode
	// gets in shared memory (the kernel counts them from its dynamic
	// shared memory; pickStages takes fewer where two blocks would not
	// share an SM, and SPLITZIP_DECODE_STAGES sets it for kernel
	// experiments). Three stages let two blocks share an H200's SM.
	decodeStages = 3
	maxStages    = 6 // SZ_MAX_STAGES
	// Error bits of the kernel's error flag.
	errTable   = 1
	errEscape  = 2
	errReaders = 4
	errOrder   = 64 // launches of a decoder ran out of the order they were made in
)

var (
	// ErrKernel reports a payload a kernel (a decode or a product) found
	// invalid.
	ErrKernel = errors.New("gpu kernel found a bad payload")
	// ErrShape reports operands that do not fit a matrix-vector product:
	// a payload of another value count or of more bytes than the caller
	// has, columns not a multiple of GemvColumns, a batch out of range, a
	// pointer out of alignment.
	ErrShape = errors.New("gpu: operands do not fit the product")
	// ErrOption reports a setting the kernels do not take (GemvWarpsEnv
	// naming a split there is no kernel for).
	ErrOption = errors.New("gpu: not a setting the kernels take")
)

// params mirrors struct Params in decode.cu.
type params struct {
	Dst, Src, Size, N, Chunks, Groups, DataStart uint64
	GroupChunks, InPlace, Epoch, Tickets         uint32
	Codebook                                     [16]byte
	Flags, Ctrl, Err                             uint64
	Reads, Reserved                              uint32
}

// The decode kernel's counters, uint32 words of ctrl (after the entropy
// decoder's ticket and exit counters and the error flag). They are never
// reset: a launch of N chunks on grid blocks moves the ticket counter by
// N + grid (every block takes one ticket past the last) and, in place,
// the read counter by N, and each launch is passed their values before it.
const (
	ctrlTickets = 4
	ctrlReads   = 5
	ctrlWords   = 6
	ctrlBytes   = 32 // ctrlWords, rounded up; a kernel trace follows
)

// Decoder launches the decode kernel. Its launches must run in the order
// they are made: use it from one stream at a time (it owns the kernel's
// ticket and read counters, whose values each launch is given, and the
// per-chunk flags). A launch that finds the ticket counter short of the
// value it was given (a later launch ran first) reports it (TakeError):
// its output is not to be used.
type Decoder struct {
	ctx     *cuda.Context
	mod     cuda.Module
	fn      cuda.Function
	scatter cuda.Function // splitzip_scatter, looked up on first use
	routed  cuda.Function // splitzip_scatter_routed, looked up on first use
	// scatterGrid is the most blocks of splitzip_scatter resident at once,
	// or fewer where SPLITZIP_SCATTER_BLOCKS says (for measuring how a
	// scatter beside other kernels shares the device).
	scatterGrid uint32
	maxGrid     uint32
	threads     int            // splitzip_decode's block
	smem        uint32         // its dynamic shared memory: stages x stageBytes
	ctrl        cuda.DevicePtr // uint32 words: entropy ticket and exits, error flag, -, ticket counter, chunks read
	flags       cuda.DevicePtr
	flagCap     uint64
	epoch       uint32
	// tickets and reads are the values the decode kernel's counters
	// (ctrl words ctrlTickets and ctrlReads) hold once the launches
	// enqueued so far have run.
	tickets, reads uint32
	mu             sync.Mutex
	// traceWords is the room after ctrl's counters for a kernel built
	// with SZ_TRACE (SPLITZIP_DECODE_TRACE set), 0 otherwise.
	traceWords int

	// For Decode (host in, host out).
	stream  cuda.Stream
	buf     cuda.DevicePtr
	bufCap  uint64
	payload cuda.DevicePtr
	payCap  uint64

	// The entropy decoder, loaded on first use, and the copy of an
	// in-place entropy payload's chunk index.
	ent    *entropyKernel
	idx    cuda.DevicePtr
	idxCap uint64
	// The in-place entropy decoder's scratch: a slot a warp.
	scratch    cuda.DevicePtr
	scratchCap uint64
}

// NewDecoder loads the kernel into ctx.
func NewDecoder(ctx *cuda.Context) (*Decoder, error) {
	img, err := kernelImage()
	if err != nil {
		return nil, err
	}
	d := &Decoder{ctx: ctx}
	if d.mod, err = ctx.LoadModule(img); err != nil {
		return nil, err
	}
	if d.fn, err = ctx.Function(d.mod, "splitzip_decode"); err != nil {
		return nil, err
	}
	sms, err := ctx.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	want := 0
	if v := os.Getenv("SPLITZIP_DECODE_STAGES"); v != "" {
		if want, err = strconv.Atoi(v); err != nil || want < 1 || want > maxStages {
			return nil, fmt.Errorf("gpu: SPLITZIP_DECODE_STAGES=%q: want 1 to %d", v, maxStages)
		}
	}
	// The block size is the kernel's launch bound: a producer warp and
	// the consumers.
	if d.threads, err = ctx.FuncAttribute(d.fn, cuda.FuncAttrMaxThreadsPerBlock); err != nil {
		return nil, err
	}
	optin, err := ctx.Attribute(cuda.AttrMaxSharedPerBlockOptin)
	if err != nil {
		return nil, err
	}
	static, err := ctx.FuncAttribute(d.fn, cuda.FuncAttrSharedBytes)
	if err != nil {
		return nil, err
	}
	if err := ctx.SetFuncAttribute(d.fn, cuda.FuncAttrSharedCarveout, 100); err != nil {
		return nil, err
	}
	stages, per, err := pickStages(want, optin, static, func(stages int) (int, error) {
		if err := ctx.SetFuncAttribute(d.fn, cuda.FuncAttrMaxDynamicSharedBytes, stages*stageBytes); err != nil {
			return 0, err
		}
		return ctx.MaxActiveBlocks(d.fn, d.threads, uint64(stages*stageBytes))
	})
	if err != nil {
		return nil, err
	}
	d.smem = uint32(stages * stageBytes)
	d.maxGrid = uint32(max(1, sms*per))
	size := uint64(ctrlBytes)
	if os.Getenv("SPLITZIP_DECODE_TRACE") != "" {
		d.traceWords = int(d.maxGrid) * traceWords
		size += 8 * uint64(d.traceWords)
	}
	if d.ctrl, err = ctx.Alloc(size); err != nil {
		return nil, err
	}
	if d.stream, err = ctx.NewStream(); err != nil {
		return nil, err
	}
	if err := ctx.MemsetD8Async(d.ctrl, 0, size, d.stream); err != nil {
		return nil, err
	}
	return d, ctx.StreamSynchronize(d.stream)
}

// pickStages returns how many chunk stages a block of splitzip_decode
// gets and how many such blocks fit an SM (blocks(stages) says, having
// allowed the kernel that much dynamic shared memory). A block may have
// optin bytes of shared memory, static of them the kernel's own. want,
// when not 0, is the caller's choice; otherwise the most stages up to
// decodeStages that let two blocks share an SM (measured: a second
// block's warps matter more than a third stage; docs/PERF.md), or one
// stage.
func pickStages(want, optin, static int, blocks func(stages int) (int, error)) (stages, per int, err error) {
	fits := func(s int) bool { return s*stageBytes+static <= optin }
	if want > 0 {
		if !fits(want) {
			return 0, 0, fmt.Errorf("gpu: %d decode stages need %d bytes of shared memory a block; the device allows %d",
				want, want*stageBytes+static, optin)
		}
		per, err := blocks(want)
		return want, per, err
	}
	for s := decodeStages; s >= 1; s-- {
		if !fits(s) {
			continue
		}
		if per, err = blocks(s); err != nil || per >= 2 || s == 1 {
			return s, per, err
		}
	}
	return 0, 0, fmt.Errorf("gpu: the decoder needs %d bytes of shared memory a block; the device allows %d", stageBytes+static, optin)
}

// Close frees the decoder's device memory and module.
func (d *Decoder) Close() error {
	d.ctx.StreamSynchronize(d.stream)
	for _, p := range []cuda.DevicePtr{d.ctrl, d.flags, d.buf, d.payload, d.idx, d.scratch} {
		if p != 0 {
			d.ctx.Free(p)
		}
	}
	d.ctx.DestroyStream(d.stream)
	if d.ent != nil {
		d.ctx.UnloadModule(d.ent.mod)
	}
	return d.ctx.UnloadModule(d.mod)
}

// Grid returns the number of blocks a launch uses at most.
func (d *Decoder) Grid() uint32 { return d.maxGrid }

// LaunchInPlace decodes, on stream s, the payload at the start of
// [buf, buf + 2*h.Values). h must come from codec.ParseHeader of the same
// payload, which must have the in-place flag. Nothing outside that range is
// written, whatever the payload holds.
func (d *Decoder) LaunchInPlace(buf cuda.DevicePtr, h *codec.Header, s cuda.Stream) error {
	if !h.InPlace {
		return fmt.Errorf("%w: payload is not decodable in place", codec.ErrNotInPlace)
	}
	return d.launch(buf, buf, h, true, s)
}

// LaunchOutOfPlace decodes the payload at src (h.Size bytes) into
// [dst, dst + 2*h.Values) on stream s.
func (d *Decoder) LaunchOutOfPlace(dst, src cuda.DevicePtr, h *codec.Header, s cuda.Stream) error {
	return d.launch(dst, src, h, false, s)
}

func (d *Decoder) launch(dst, src cuda.DevicePtr, h *codec.Header, inPlace bool, s cuda.Stream) error {
	if dst%16 != 0 || src%16 != 0 {
		return fmt.Errorf("%w: decode buffers must be 16-byte aligned (%#x, %#x)", ErrKernel, dst, src)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	N := h.Chunks()
	if N == 0 {
		return nil
	}
	if inPlace {
		if err := d.growFlags(N, s); err != nil {
			return err
		}
	}
	d.epoch++
	if d.epoch == 0 {
		d.epoch = 1
	}
	pr := params{Dst: uint64(dst), Src: uint64(src), Size: h.Size, N: h.Values, Chunks: N, Groups: h.Groups(),
		DataStart: h.DataStart(), GroupChunks: h.GroupChunks, Epoch: d.epoch, Codebook: h.Codebook,
		Flags: uint64(d.flags), Ctrl: uint64(d.ctrl), Err: uint64(d.ctrl) + 8, Tickets: d.tickets, Reads: d.reads}
	if inPlace {
		pr.InPlace = 1
	}
	grid := uint32(min(uint64(d.maxGrid), N))
	if err := d.ctx.Launch(d.fn, cuda.Dim3{X: grid}, cuda.Dim3{X: uint32(d.threads)}, d.smem, s, unsafe.Pointer(&pr)); err != nil {
		return err
	}
	// Wrapping is fine: the kernel subtracts the bases in uint32.
	d.tickets += uint32(N) + grid
	if inPlace {
		d.reads += uint32(N)
	}
	return nil
}

// growFlags makes room for the in-place flags of N chunks (d.mu held).
func (d *Decoder) growFlags(N uint64, s cuda.Stream) error {
	if N <= d.flagCap {
		return nil
	}
	// Flags of earlier launches may still be in use on s.
	if err := d.ctx.StreamSynchronize(s); err != nil {
		return err
	}
	if d.flags != 0 {
		d.ctx.Free(d.flags)
		d.flags, d.flagCap = 0, 0
	}
	p, err := d.ctx.Alloc(4 * N)
	if err != nil {
		return err
	}
	if err := d.ctx.MemsetD8Async(p, 0, 4*N, s); err != nil {
		d.ctx.Free(p)
		return err
	}
	d.flags, d.flagCap = p, N
	return nil
}

// ErrorBytes is the size of the words ReadError copies: the error flag
// to the read counter.
const ErrorBytes = 4 * (ctrlWords - 2)

// TakeError waits for s, returns the kernel error bits reported since the
// last call as an error (nil when none) and clears them. After launches
// that ran out of order it takes the decode kernel's counters from the
// device, so that later launches (on s, once it is done) work again.
func (d *Decoder) TakeError(s cuda.Stream) error {
	var b [ErrorBytes]byte
	if err := d.ReadError(b[:], s); err != nil {
		return err
	}
	if err := d.ctx.StreamSynchronize(s); err != nil {
		return err
	}
	return d.CheckError(b[:], s)
}

// ReadError enqueues on s the copy of the decoder's error words into b
// (ErrorBytes long; pinned, for the copy not to wait): the first half of
// TakeError, so that one synchronization serves several decoders.
func (d *Decoder) ReadError(b []byte, s cuda.Stream) error {
	return d.ctx.CopyDtoHAsync(b[:ErrorBytes], d.ctrl+8, s)
}

// CheckError is the second half of TakeError: what the words b, copied by
// ReadError on s and synchronized since, report, with the flag cleared on
// s when they report an error.
func (d *Decoder) CheckError(b []byte, s cuda.Stream) error {
	b = b[:ErrorBytes]
	bits := binary.LittleEndian.Uint32(b)
	if bits == 0 {
		return nil
	}
	if bits&errOrder != 0 {
		d.mu.Lock()
		d.tickets = binary.LittleEndian.Uint32(b[4*(ctrlTickets-2):])
		d.reads = binary.LittleEndian.Uint32(b[4*(ctrlReads-2):])
		d.mu.Unlock()
	}
	if err := d.ctx.MemsetD8Async(d.ctrl+8, 0, 4, s); err != nil {
		return err
	}
	return kernelError(bits)
}

// kernelError is ErrKernel with what the kernels' error bits say.
func kernelError(bits uint32) error {
	var why []string
	for _, f := range []struct {
		bit  uint32
		what string
	}{{errTable, "bad table or entry"}, {errEscape, "bad escape position"}, {errReaders, "bad reader range"},
		{errItem, "scatter item out of range"}, {errEntropyIndex, "bad entropy chunk index"},
		{errEntropyStream, "corrupt entropy-coded chunk"}, {errOrder, "decoder launches ran out of order"}} {
		if bits&f.bit != 0 {
			why = append(why, f.what)
		}
	}
	return fmt.Errorf("%w: %v", ErrKernel, why)
}

// Name returns "gpu".
func (d *Decoder) Name() string { return "gpu" }

// Decode decodes a payload held in host memory into dst on the GPU: the
// payload is checked on the host (package payload: header and checksum;
// for an entropy payload its code and chunk index too), copied to the
// start of a device buffer of the decoded size, decoded there in place
// (out of place from a buffer of its own when the payload lacks the
// in-place flag), and copied back. It takes fixed and entropy (version 2
// and 3) payloads.
func (d *Decoder) Decode(dst, p []byte) error {
	h, err := payload.CheckBytes(payload.Sniff(p), p, payload.Sum(p), 0)
	switch {
	case err != nil:
		return err
	case h.DecodedSize() != uint64(len(dst)):
		return fmt.Errorf("%w: destination of %d bytes for a payload decoding to %d", codec.ErrSize, len(dst), h.DecodedSize())
	case h.DecodedSize() == 0:
		return nil
	}
	to, err := d.targets(h.DecodedSize(), h.Size(), h.InPlace())
	if err != nil {
		return err
	}
	if err := d.ctx.CopyHtoDAsync(to, p, d.stream); err != nil {
		return err
	}
	if err := d.launchPayload(h); err != nil {
		return err
	}
	if err := d.ctx.CopyDtoHAsync(dst, d.buf, d.stream); err != nil {
		return err
	}
	return d.TakeError(d.stream)
}

// launchPayload enqueues the decode of a checked payload into d.buf: in
// place, or out of place from d.payload (where targets put it).
func (d *Decoder) launchPayload(h payload.Head) error {
	switch h := h.(type) {
	case *payload.Fixed:
		if h.InPlace() {
			return d.LaunchInPlace(d.buf, &h.Header, d.stream)
		}
		return d.LaunchOutOfPlace(d.buf, d.payload, &h.Header, d.stream)
	case *payload.Entropy:
		if h.InPlace() {
			return d.LaunchEntropyInPlace(d.buf, h.Head, d.stream)
		}
		return d.LaunchEntropyOutOfPlace(d.buf, d.payload, h.Head, d.stream)
	}
	return fmt.Errorf("gpu: %w: %v", payload.ErrKind, h.Kind())
}

func (d *Decoder) reserve(p *cuda.DevicePtr, capacity *uint64, n uint64) error {
	if *capacity >= n {
		return nil
	}
	if *p != 0 {
		d.ctx.StreamSynchronize(d.stream)
		d.ctx.Free(*p)
		*p, *capacity = 0, 0
	}
	q, err := d.ctx.Alloc(n)
	if err != nil {
		return err
	}
	*p, *capacity = q, n
	return nil
}

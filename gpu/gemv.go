package gpu

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// gemvFatbin holds the matrix-vector kernels (gemv.cu), built like
// decode.fatbin by `make kernels`.
//
//go:embed gemv.fatbin
var gemvFatbin []byte

// MaxGemvBatch is the most vectors one Gemv launch multiplies.
const MaxGemvBatch = 16

// gemvTile is GZ_TILE, the rows of W a block computes, and gemvWarps is
// GZ_WARPS, the most warps that split its columns.
const (
	gemvTile  = 16
	gemvWarps = 8
)

// gemvSplits are the warps a tile's columns may be split among, most
// first, and the suffixes of their kernels' names (gemv.cu's
// GZ_KERNELS_W); gemvSplit chooses.
var gemvSplits = [...]struct {
	warps  int
	suffix string
}{{gemvWarps, ""}, {4, "_w4"}}

// gemvSMWarps is how many warps of these kernels an SM runs at once (128
// registers a thread).
const gemvSMWarps = 16

// GemvWarpsEnv names the environment variable that, set to 4 or 8, makes
// every launch split a tile's columns among that many warps (for
// measuring; the reduction order follows it, so Fixed and Reference still
// agree bit for bit).
const GemvWarpsEnv = "SPLITZIP_GEMV_WARPS"

// GemvColumns is what the columns of a matrix must be a multiple of: a
// lane multiplies 16 columns at a time.
const GemvColumns = 16

// gemvBatches are the batch sizes the kernels are built for (a launch of
// another count uses the next larger).
var gemvBatches = [...]int{1, 2, 4, 8, 16}

// gemvParams mirrors struct GemvParams in gemv.cu.
type gemvParams struct {
	W, Size, X, Y, Err, Rows, Cols, Chunks uint64
	GroupChunks, Batch                     uint32
	Codebook                               [16]byte
}

// Gemv multiplies matrices with batches of vectors on the GPU: from a
// matrix's fixed payload, decoding it in registers on the way to the
// multiply (Fixed), or from the matrix in BF16 (Reference), in one
// reduction order, so the two give the same bits. Its launches may run on
// any streams; error bits are shared, so TakeError reports every launch's.
type Gemv struct {
	ctx        *cuda.Context
	mod        cuda.Module
	fixed, ref [len(gemvSplits)][len(gemvBatches)]cuda.Function
	sms        int            // the device's SMs
	force      int            // the index in gemvSplits GemvWarpsEnv names, or -1
	err        cuda.DevicePtr // uint32 error bits
}

// gemvImage returns the matrix-vector fatbin: the embedded one, or the
// file SPLITZIP_GEMV_FATBIN names (kernel development on the GPU machine).
func gemvImage() ([]byte, error) {
	return imageOf("SPLITZIP_GEMV_FATBIN", gemvFatbin, "matrix-vector")
}

// NewGemv loads the matrix-vector kernels into ctx.
func NewGemv(ctx *cuda.Context) (*Gemv, error) {
	img, err := gemvImage()
	if err != nil {
		return nil, err
	}
	g := &Gemv{ctx: ctx}
	if g.force, err = gemvForce(os.Getenv(GemvWarpsEnv)); err != nil {
		return nil, err
	}
	if g.sms, err = ctx.Attribute(cuda.AttrMultiprocessorCount); err != nil {
		return nil, err
	}
	if g.mod, err = ctx.LoadModule(img); err != nil {
		return nil, err
	}
	for w, sp := range gemvSplits {
		for i, b := range gemvBatches {
			if g.fixed[w][i], err = ctx.Function(g.mod, fmt.Sprintf("splitzip_gemv_fixed_b%d%s", b, sp.suffix)); err == nil {
				g.ref[w][i], err = ctx.Function(g.mod, fmt.Sprintf("splitzip_gemv_ref_b%d%s", b, sp.suffix))
			}
			if err != nil {
				ctx.UnloadModule(g.mod)
				return nil, err
			}
		}
	}
	if g.err, err = ctx.Alloc(4); err == nil {
		if err = ctx.MemsetD8Async(g.err, 0, 4, 0); err == nil {
			err = ctx.StreamSynchronize(0) // cleared before any launch, on any stream
		}
	}
	if err != nil {
		if g.err != 0 {
			ctx.Free(g.err)
		}
		ctx.UnloadModule(g.mod)
		return nil, err
	}
	return g, nil
}

// Close frees the kernels and their error flag.
func (g *Gemv) Close() error {
	return errors.Join(g.ctx.Free(g.err), g.ctx.UnloadModule(g.mod))
}

// Fixed launches, on s, y = W x for batch vectors: W is the rows x cols
// BF16 matrix (row-major) whose fixed payload, header h, lies in the
// wLen bytes at w (checked when it was uploaded: the kernel reports a bad
// table or escape in TakeError but does not checksum, and reads nothing
// past the header's size, which must fit in wLen), x is batch x cols BF16
// and y batch x rows BF16, both row-major. w and x must be 16-byte
// aligned, y 2-byte.
func (g *Gemv) Fixed(w cuda.DevicePtr, wLen uint64, h *codec.Header, rows, cols uint64, x, y cuda.DevicePtr, batch int, s cuda.Stream) error {
	if err := fixedFits(h, wLen, rows, cols); err != nil {
		return err
	}
	p := gemvParams{W: uint64(w), Size: h.Size, Chunks: h.Chunks(), GroupChunks: h.GroupChunks}
	copy(p.Codebook[:], h.Codebook[:])
	return g.launch(&g.fixed, p, rows, cols, x, y, batch, s)
}

// fixedFits reports whether a fixed payload of header h in wLen bytes
// holds a rows x cols matrix.
func fixedFits(h *codec.Header, wLen, rows, cols uint64) error {
	hi, n := bits.Mul64(rows, cols)
	switch {
	case hi != 0 || h.Values != n || h.ChunkValues != codec.ChunkValues:
		return fmt.Errorf("%w: a payload of %d values in chunks of %d for a %d x %d matrix", ErrShape, h.Values, h.ChunkValues, rows, cols)
	case h.Size > wLen:
		return fmt.Errorf("%w: a payload of %d bytes (its header says) in %d bytes of device memory", ErrShape, h.Size, wLen)
	}
	return nil
}

// Reference launches, on s, the product Fixed computes, from W in BF16 at
// w (rows x cols, row-major, 16-byte aligned): the same bits.
func (g *Gemv) Reference(w cuda.DevicePtr, rows, cols uint64, x, y cuda.DevicePtr, batch int, s cuda.Stream) error {
	return g.launch(&g.ref, gemvParams{W: uint64(w)}, rows, cols, x, y, batch, s)
}

func (g *Gemv) launch(fns *[len(gemvSplits)][len(gemvBatches)]cuda.Function, p gemvParams, rows, cols uint64, x, y cuda.DevicePtr, batch int, s cuda.Stream) error {
	if err := operandsFit(p.W, uint64(x), uint64(y), rows, cols, batch); err != nil {
		return err
	}
	i := 0
	for gemvBatches[i] < batch {
		i++
	}
	p.X, p.Y, p.Err, p.Rows, p.Cols, p.Batch = uint64(x), uint64(y), uint64(g.err), rows, cols, uint32(batch)
	tiles := (rows + gemvTile - 1) / gemvTile
	w := g.force
	if w < 0 {
		w = gemvSplit(tiles, g.sms)
	}
	block := cuda.Dim3{X: uint32(32 * gemvSplits[w].warps)}
	return g.ctx.Launch(fns[w][i], cuda.Dim3{X: uint32(tiles)}, block, 0, s, unsafe.Pointer(&p))
}

// gemvForce returns the index in gemvSplits of the warps v (GemvWarpsEnv's
// value) names, or -1 for none.
func gemvForce(v string) (int, error) {
	if v == "" {
		return -1, nil
	}
	for i, sp := range gemvSplits {
		if v == strconv.Itoa(sp.warps) {
			return i, nil
		}
	}
	var want []string
	for _, sp := range gemvSplits {
		want = append(want, strconv.Itoa(sp.warps))
	}
	return -1, fmt.Errorf("%w: %s=%q: want one of %s", ErrOption, GemvWarpsEnv, v, strings.Join(want, ", "))
}

// gemvSplit returns the index in gemvSplits of the warps a tile of a
// matrix of so many tiles takes on sms SMs: 4 where that still fills
// every SM with warps, so that a warp's start-up work (finding its
// chunks, the sums through shared memory) is spread over twice the steps;
// else 8, where fewer warps would leave the GPU waiting on memory. On an
// H100 4 was 5-7% faster on the 14336 x 4096 and 128256 x 4096 shapes
// (896 and 8,016 tiles) and 2-30% slower on those of 256 and 64 tiles
// (docs/perf/LOG.md, 2026-12-07).
func gemvSplit(tiles uint64, sms int) int {
	const fewer = 1 // gemvSplits' 4 warps
	if tiles*uint64(gemvSplits[fewer].warps) >= uint64(gemvSMWarps)*uint64(max(sms, 1)) {
		return fewer
	}
	return 0
}

// operandsFit reports whether a launch's shape and pointers are what the
// kernels take.
func operandsFit(w, x, y, rows, cols uint64, batch int) error {
	switch {
	case batch < 1 || batch > MaxGemvBatch:
		return fmt.Errorf("%w: a batch of %d vectors, want 1 to %d", ErrShape, batch, MaxGemvBatch)
	case cols == 0 || cols%GemvColumns != 0 || rows == 0:
		return fmt.Errorf("%w: a %d x %d matrix, want columns a multiple of %d", ErrShape, rows, cols, GemvColumns)
	case tooLarge(rows, cols):
		return fmt.Errorf("%w: a %d x %d matrix", ErrShape, rows, cols)
	case w%16 != 0 || x%16 != 0 || y%2 != 0:
		return fmt.Errorf("%w: pointers %#x, %#x, %#x out of alignment", ErrShape, w, x, y)
	}
	return nil
}

// tooLarge reports a matrix past what a launch's grid and 64-bit offsets
// take: 2^31 - 1 tiles of rows, 2^62 values.
func tooLarge(rows, cols uint64) bool {
	hi, n := bits.Mul64(rows, cols)
	return hi != 0 || n > 1<<62 || (rows+gemvTile-1)/gemvTile > 1<<31-1
}

// TakeError waits for s, returns the error bits the kernels reported since
// the last call (nil when none) and clears them. The bits are this Gemv's,
// shared by its launches on every stream: a call reports what any of them
// found, and a launch on another stream that runs during the call may have
// its report taken by this call or lost.
func (g *Gemv) TakeError(s cuda.Stream) error {
	var b [4]byte
	if err := g.ctx.CopyDtoHAsync(b[:], g.err, s); err != nil {
		return err
	}
	if err := g.ctx.StreamSynchronize(s); err != nil {
		return err
	}
	set := binary.LittleEndian.Uint32(b[:])
	if set == 0 {
		return nil
	}
	if err := g.ctx.MemsetD8Async(g.err, 0, 4, s); err != nil {
		return err
	}
	return kernelError(set)
}

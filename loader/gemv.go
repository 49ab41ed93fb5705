package loader

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// Matrix-vector products straight from fixed payloads in device memory
// (gpu.Gemv): a caller that keeps a Linear's weight as its payload on the
// GPU multiplies with it without decoding it first.

// gemvKernels returns device d's matrix-vector kernels, loading them on
// first use.
func (l *Loader) gemvKernels(d int) (*gpu.Gemv, error) {
	g, err := l.device(d)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gemv == nil {
		if g.gemv, err = gpu.NewGemv(g.ctx); err != nil {
			return nil, err
		}
	}
	return g.gemv, nil
}

// PayloadHeadBytes is the size of a fixed payload's header, what Gemv's
// head holds.
const PayloadHeadBytes = codec.HeaderSize

// PrepareGemv loads device d's matrix-vector kernels, so that Gemv, later,
// makes no call a CUDA graph capture forbids.
func (l *Loader) PrepareGemv(d int) error {
	_, err := l.gemvKernels(d)
	return err
}

// Gemv enqueues on the caller's stream (a CUstream of device d, 0 for the
// default stream) y = W x for batch vectors: W is the rows x cols BF16
// matrix whose fixed payload lies in the wLen bytes at w in device memory,
// head its first codec.HeaderSize bytes (the caller's copy, read on the
// host now; the size it gives must fit in wLen), x is
// batch x cols BF16 and y batch x rows BF16, row-major. It only enqueues,
// so it can be captured in a CUDA graph; a payload the kernel finds bad is
// reported by GemvCheck.
func (l *Loader) Gemv(d int, w, wLen uint64, head []byte, rows, cols, x, y uint64, batch int, stream uintptr) error {
	h, err := codec.ParseHeader(head)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	k, err := l.gemvKernels(d)
	if err != nil {
		return err
	}
	if err := k.Fixed(cuda.DevicePtr(w), wLen, &h, rows, cols, cuda.DevicePtr(x), cuda.DevicePtr(y), batch, cuda.Stream(stream)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// GemvCheck waits for the caller's stream and returns, as an error
// wrapping gpu.ErrKernel, what the matrix-vector kernels of device d
// reported since the last check, clearing it. The report is the device's,
// not the stream's: it covers every launch on d since the last check.
func (l *Loader) GemvCheck(d int, stream uintptr) error {
	k, err := l.gemvKernels(d)
	if err != nil {
		return err
	}
	return k.TakeError(cuda.Stream(stream))
}

package gpu

import (
	"fmt"
	"unsafe"

	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/scatter"
)

// errItem is the kernel's error bit for an item out of range.
const errItem = 8

// scatterParams mirrors struct ScatterParams in decode.cu.
type scatterParams struct {
	Base, Staged, Count, Err, Units uint64
}

// LaunchScatter runs the scatter kernel on stream s over a staging buffer
// at base (device memory, staged bytes) that starts with a table of count
// items written by scatter.Put (the format the kernel reads), whose
// units of work scatter.Units counted. Items the kernel finds out of
// range are skipped and reported by TakeError.
func (d *Decoder) LaunchScatter(base cuda.DevicePtr, staged uint64, count int, units uint64, s cuda.Stream) error {
	if count == 0 || units == 0 {
		return nil
	}
	if base%16 != 0 {
		return fmt.Errorf("%w: staging buffer %#x is not 16-byte aligned", scatter.ErrInvalid, base)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.loadScatter(); err != nil {
		return err
	}
	pr := scatterParams{Base: uint64(base), Staged: staged, Count: uint64(count), Err: uint64(d.ctrl) + 8, Units: units}
	grid := uint32(min(uint64(d.scatterGrid), units))
	return d.ctx.Launch(d.scatter, cuda.Dim3{X: grid}, cuda.Dim3{X: threads}, dynSmem, s, unsafe.Pointer(&pr))
}

// PrepareScatter loads the scatter kernel and sets its attributes, which
// LaunchScatter otherwise does on first use: after it, a launch makes one
// driver call, which a CUDA graph capture can record.
func (d *Decoder) PrepareScatter() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadScatter()
}

// loadScatter looks splitzip_scatter up once (d.mu held).
func (d *Decoder) loadScatter() error {
	if d.scatter != 0 {
		return nil
	}
	fn, err := d.ctx.Function(d.mod, "splitzip_scatter")
	if err != nil {
		return err
	}
	if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrMaxDynamicSharedBytes, dynSmem); err != nil {
		return err
	}
	if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrSharedCarveout, 100); err != nil {
		return err
	}
	per, err := d.ctx.MaxActiveBlocks(fn, threads, dynSmem)
	if err != nil {
		return err
	}
	sms, err := d.ctx.Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return err
	}
	d.scatter, d.scatterGrid = fn, uint32(max(1, sms*per))
	return nil
}

package gpu

import (
	"fmt"
	"os"
	"strconv"
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

// routedParams mirrors struct RoutedParams in decode.cu.
type routedParams struct {
	Packs, Want, Err, N uint64
}

// RoutedPackBytes is the size of one candidate of LaunchScatterRouted's
// table (struct RoutedPack in decode.cu): four little-endian uint64s,
// the staging buffer's base, staged bytes, item count and units, as
// LaunchScatter takes them.
const RoutedPackBytes = 32

// LaunchScatterRouted runs the scatter kernel on stream s over those of n
// candidate staging buffers whose byte of want (device memory, n bytes)
// is nonzero. packs (device memory) holds the candidates, RoutedPackBytes
// each; a staging buffer may be device memory or pinned host memory the
// device can address. Both tables are read when the kernel runs, so a
// launch captured in a CUDA graph scatters what they say at each replay.
// active is how many candidates are expected to be wanted at once: the
// grid gives each candidate its share of the device. Items or candidates
// the kernel finds out of range are skipped and reported by TakeError.
func (d *Decoder) LaunchScatterRouted(packs, want cuda.DevicePtr, n, active int, s cuda.Stream) error {
	if n <= 0 {
		return nil
	}
	if n > maxRoutedCandidates || packs%8 != 0 {
		return fmt.Errorf("%w: %d candidates at %#x (want at most %d, 8-byte aligned)", scatter.ErrInvalid, n, packs, maxRoutedCandidates)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.loadScatter(); err != nil {
		return err
	}
	pr := routedParams{Packs: uint64(packs), Want: uint64(want), Err: uint64(d.ctrl) + 8, N: uint64(n)}
	grid := cuda.Dim3{X: max(1, d.scatterGrid/uint32(min(max(active, 1), n))), Y: uint32(n)}
	return d.ctx.Launch(d.routed, grid, cuda.Dim3{X: threads}, dynSmem, s, unsafe.Pointer(&pr))
}

// maxRoutedCandidates bounds LaunchScatterRouted's n (the grid's y
// dimension allows 65,535).
const maxRoutedCandidates = 65535

// PrepareScatter loads the scatter kernel and sets its attributes, which
// LaunchScatter otherwise does on first use: after it, a launch makes one
// driver call, which a CUDA graph capture can record.
func (d *Decoder) PrepareScatter() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loadScatter()
}

// loadScatter looks splitzip_scatter and splitzip_scatter_routed up once
// (d.mu held).
func (d *Decoder) loadScatter() error {
	if d.scatter != 0 {
		return nil
	}
	fn, err := d.scatterFunction("splitzip_scatter")
	if err != nil {
		return err
	}
	routed, err := d.scatterFunction("splitzip_scatter_routed")
	if err != nil {
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
	grid := max(1, sms*per)
	if v := os.Getenv("SPLITZIP_SCATTER_BLOCKS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("gpu: SPLITZIP_SCATTER_BLOCKS=%q: want a block count >= 1", v)
		}
		grid = min(grid, n)
	}
	d.scatter, d.routed, d.scatterGrid = fn, routed, uint32(grid)
	return nil
}

// scatterFunction looks up a scatter kernel and gives it its shared memory.
func (d *Decoder) scatterFunction(name string) (cuda.Function, error) {
	fn, err := d.ctx.Function(d.mod, name)
	if err != nil {
		return 0, err
	}
	if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrMaxDynamicSharedBytes, dynSmem); err != nil {
		return 0, err
	}
	if err := d.ctx.SetFuncAttribute(fn, cuda.FuncAttrSharedCarveout, 100); err != nil {
		return 0, err
	}
	return fn, nil
}

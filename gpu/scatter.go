package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
)

// ScatterItemBytes is the size of one entry of a scatter table.
const ScatterItemBytes = 64

// errItem is the kernel's error bit for an item out of range.
const errItem = 8

// ErrScatter reports a scatter table that does not fit its staging buffer.
var ErrScatter = errors.New("invalid scatter item")

// ScatterItem is one tensor of a packed staging buffer: its stored bytes
// (raw tensor bytes, or a SplitZip payload when Header is set) lie at
// offset Src of the buffer, and Size bytes are written at Dst.
type ScatterItem struct {
	Name   string // for errors
	Dst    uint64
	Src    uint64
	Stored uint64
	Size   uint64
	Header *codec.Header
}

// scatterParams mirrors struct ScatterParams in decode.cu.
type scatterParams struct {
	Base, Staged, Count, Err, Units uint64
}

// scatterRawUnit is the bytes of a raw item one unit of the scatter
// kernel copies (SZ_RAW_UNIT in decode.cu); a payload's unit is a chunk.
const scatterRawUnit = 32768

// itemUnits returns the kernel's units of work for an item.
func itemUnits(it *ScatterItem) uint64 {
	if h := it.Header; h != nil && h.Values > 0 {
		return h.Chunks()
	}
	if it.Header != nil {
		return 0 // an empty payload writes nothing
	}
	return (it.Size + scatterRawUnit - 1) / scatterRawUnit
}

// ScatterUnits returns the units of work of a scatter over items (the
// kernel's blocks take them in turn): LaunchScatter needs it.
func ScatterUnits(items []ScatterItem) uint64 {
	var n uint64
	for i := range items {
		n += itemUnits(&items[i])
	}
	return n
}

// ScatterTableBytes returns the bytes a table of n items takes at the
// start of a staging buffer; stored bytes start at or after it.
func ScatterTableBytes(n int) uint64 { return uint64(n) * ScatterItemBytes }

// PutScatterTable checks items against a staging buffer of staged bytes
// (a multiple of 16) and writes their table into table, which must hold
// ScatterTableBytes(len(items)) bytes. Nothing is written when an item is
// invalid: offsets must be 16-byte aligned, after the table and inside
// the buffer; raw items store exactly Size bytes; payload items have a
// parsed header of Stored bytes that decodes to Size bytes, and a
// 16-byte aligned destination; the units of work number at most 2^32-1.
func PutScatterTable(table []byte, items []ScatterItem, staged uint64) error {
	tb := ScatterTableBytes(len(items))
	if uint64(len(table)) < tb || staged%16 != 0 {
		return fmt.Errorf("%w: table of %d bytes for %d items, %d bytes staged", ErrScatter, len(table), len(items), staged)
	}
	for i := range items {
		it := &items[i]
		bad := func(why string) error {
			return fmt.Errorf("tensor %q: %w: %s", it.Name, ErrScatter, why)
		}
		switch {
		case it.Src%16 != 0 || it.Src < tb || it.Src > staged || it.Stored > staged-it.Src || (it.Stored+15)&^15 > staged-it.Src:
			return bad(fmt.Sprintf("stored bytes [%d, +%d) outside the staged [%d, %d)", it.Src, it.Stored, tb, staged))
		case it.Dst == 0 && it.Size > 0:
			return bad("null destination")
		case it.Header == nil && it.Stored != it.Size:
			return bad(fmt.Sprintf("%d raw bytes stored for %d", it.Stored, it.Size))
		case it.Header != nil && (it.Header.Size != it.Stored || 2*it.Header.Values != it.Size):
			return bad(fmt.Sprintf("payload of %d bytes (%d values) for %d stored, %d bytes", it.Header.Size, it.Header.Values, it.Stored, it.Size))
		case it.Header != nil && it.Dst%16 != 0:
			return bad("payload destination is not 16-byte aligned")
		}
	}
	if u := ScatterUnits(items); u > math.MaxUint32 {
		return fmt.Errorf("%w: %d units of work in one scatter", ErrScatter, u)
	}
	var first uint64
	for i, it := range items {
		e := table[i*ScatterItemBytes : (i+1)*ScatterItemBytes]
		clear(e)
		binary.LittleEndian.PutUint64(e[0:], it.Dst)
		binary.LittleEndian.PutUint64(e[8:], it.Src)
		binary.LittleEndian.PutUint64(e[16:], it.Stored)
		binary.LittleEndian.PutUint64(e[24:], it.Size)
		if h := it.Header; h != nil && h.Values > 0 {
			binary.LittleEndian.PutUint32(e[32:], h.GroupChunks)
			binary.LittleEndian.PutUint32(e[36:], uint32(h.DataStart()))
			copy(e[40:56], h.Codebook[:])
		} else if h != nil {
			// An empty payload writes nothing: a raw item of 0 bytes.
			binary.LittleEndian.PutUint64(e[16:], 0)
		}
		u := itemUnits(&items[i])
		binary.LittleEndian.PutUint32(e[56:], uint32(first))
		binary.LittleEndian.PutUint32(e[60:], uint32(u))
		first += u
	}
	return nil
}

// LaunchScatter runs the scatter kernel on stream s over a staging buffer
// at base (device memory, staged bytes) that starts with a table of count
// items written by PutScatterTable, whose units of work ScatterUnits
// counted. Items the kernel finds out of range are skipped and reported by
// TakeError.
func (d *Decoder) LaunchScatter(base cuda.DevicePtr, staged uint64, count int, units uint64, s cuda.Stream) error {
	if count == 0 || units == 0 {
		return nil
	}
	if base%16 != 0 {
		return fmt.Errorf("%w: staging buffer %#x is not 16-byte aligned", ErrScatter, base)
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

package scatter

// Entropy payloads of a packed staging buffer, decoded by one batch
// launch out of place into their tensors' ranges after the scatter (the
// kernel: gpu/entropy.cu, splitzip_entropy_batch). Each has a descriptor
// of EntropyEntryBytes, written after the staged bytes, little-endian:
//
//	[0, 8)     destination address (16-byte aligned)
//	[8, 16)    offset of the payload in the buffer (16-aligned)
//	[16, 24)   values
//	[24, 32)   chunks
//	[32, 40)   where the chunk records start in the payload
//	[40, 48)   the records' bytes (the chunk index follows them)
//	[48, 52)   field (the index into entropy.Fields)
//	[52, 56)   1 for pair symbols (payload version 3)
//	[56, 60)   the longest symbol chunk
//	[60, 64)   the payload's first unit of work: units are runs of
//	           EntropyUnitChunks chunks, numbered across the payloads
//	[64, 320)  code lengths
//	[320, 832) pair table (version 3)
//
// The kernel reads each payload's chunk index where it lies in the
// payload, checked on the host before the copy.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
)

// EntropyEntryBytes is the size of one entropy payload's descriptor.
const EntropyEntryBytes = 832

// EntropyUnitChunks is the chunks of a unit of work of a batch (the
// kernel's EZB_UNIT): a block decodes a unit, a chunk a warp.
const EntropyUnitChunks = 8

// Entropy is an entropy payload of a packed staging buffer: its Head.Size
// bytes lie at offset Src, and its Size bytes of values (which
// Head.ValueBytes() must be) are written at Dst. Head must come from a check of the whole payload
// (entropy.Check, or payload.CheckBytes), which checks its chunk index:
// a batch decodes only payloads whose index was checked.
type Entropy struct {
	Name string // for errors
	Dst  uint64
	Src  uint64
	Size uint64
	Head *entropy.Head
}

// EntropyBytes returns the bytes the descriptors of n payloads take.
func EntropyBytes(n int) uint64 { return uint64(n) * EntropyEntryBytes }

// CheckEntropy checks ents against buf, a staging buffer whose first at
// bytes are the table and the staged bytes (from after the table, whose
// end is tableEnd), with room at at for their descriptors
// (EntropyBytes(len(ents)) bytes). A payload must lie inside [tableEnd,
// at), 16-byte aligned, be a checked version 2 or 3 payload of standard
// chunks, and decode to Size bytes at a 16-byte aligned destination.
func CheckEntropy(buf []byte, at, tableEnd uint64, ents []Entropy) error {
	room := EntropyBytes(len(ents))
	if at%16 != 0 || at < tableEnd || at > uint64(len(buf)) || room > uint64(len(buf))-at {
		return fmt.Errorf("%w: %d entropy descriptors at %d of a %d-byte buffer whose table ends at %d", ErrInvalid, len(ents), at, len(buf), tableEnd)
	}
	for i := range ents {
		e := &ents[i]
		bad := func(why string) error {
			return fmt.Errorf("tensor %q: %w: %s", e.Name, ErrInvalid, why)
		}
		h := e.Head
		switch {
		case h == nil:
			return bad("an entropy payload without its head")
		case e.Src%16 != 0 || e.Src < tableEnd || e.Src > at || h.Size > at-e.Src:
			return bad(fmt.Sprintf("payload [%d, +%d) outside the staged [%d, %d)", e.Src, h.Size, tableEnd, at))
		case h.Version < 2 || h.ChunkValues != codec.ChunkValues || h.Field < 0 || h.Field >= len(entropy.Fields):
			return bad(fmt.Sprintf("a version %d payload of field %d, %d values a chunk: no batch decodes it", h.Version, h.Field, h.ChunkValues))
		case h.Values > 0 && h.MaxRecord == 0:
			return bad("the payload's chunk index was not checked")
		case h.Others > h.Index || h.Index > h.Size || h.Size-h.Index != 8*(h.Chunks()+1):
			return bad(fmt.Sprintf("records at %d, index at %d of %d bytes", h.Others, h.Index, h.Size))
		case h.ValueBytes() != e.Size:
			return bad(fmt.Sprintf("payload decodes to %d bytes for %d", h.ValueBytes(), e.Size))
		case h.Values > 0 && (e.Dst == 0 || e.Dst%16 != 0):
			return bad("payload destination is null or not 16-byte aligned")
		}
	}
	if u := EntropyUnits(ents); u > math.MaxUint32 {
		return fmt.Errorf("%w: %d units of work in one batch", ErrInvalid, u)
	}
	return nil
}

// PutEntropy checks ents (CheckEntropy) and writes their descriptors
// into buf at at; nothing is written when a payload is invalid.
func PutEntropy(buf []byte, at, tableEnd uint64, ents []Entropy) error {
	if err := CheckEntropy(buf, at, tableEnd, ents); err != nil {
		return err
	}
	var first uint64
	for i := range ents {
		e := &ents[i]
		h := e.Head
		d := buf[at+uint64(i)*EntropyEntryBytes : at+uint64(i+1)*EntropyEntryBytes]
		clear(d)
		le := binary.LittleEndian
		le.PutUint64(d[0:], e.Dst)
		le.PutUint64(d[8:], e.Src)
		le.PutUint64(d[16:], h.Values)
		le.PutUint64(d[24:], h.Chunks())
		le.PutUint64(d[32:], h.Others)
		le.PutUint64(d[40:], h.Index-h.Others)
		le.PutUint32(d[48:], uint32(h.Field))
		if h.Pairs {
			le.PutUint32(d[52:], 1)
			for s, f := range h.PairFields {
				le.PutUint16(d[320+2*s:], f)
			}
		}
		le.PutUint32(d[56:], uint32(min(h.MaxSymbols, 1<<31)))
		le.PutUint32(d[60:], uint32(first))
		first += entropyUnits(h)
		copy(d[64:320], h.Lengths[:])
	}
	return nil
}

// entropyUnits is a payload's units of work.
func entropyUnits(h *entropy.Head) uint64 {
	return (h.Chunks() + EntropyUnitChunks - 1) / EntropyUnitChunks
}

// EntropyUnits returns the units of work of a batch over ents.
func EntropyUnits(ents []Entropy) uint64 {
	var n uint64
	for i := range ents {
		if h := ents[i].Head; h != nil {
			n += entropyUnits(h)
		}
	}
	return n
}

// Descriptor is an entropy payload's descriptor as ReadEntropy reads it
// back from a buffer (the fields of the layout above).
type Descriptor struct {
	Dst, Src       uint64
	Values, Chunks uint64
	Records        uint64 // where the records start in the payload
	RecordBytes    uint64 // their bytes; the chunk index follows them
	Field          uint32
	Pairs          bool
	MaxSymbols     uint32
	FirstUnit      uint32
	Lengths        [256]byte
	PairFields     [256]uint16
}

// End is the offset in the buffer where the payload's chunk index ends.
func (d *Descriptor) End() uint64 { return d.Src + d.Records + d.RecordBytes + 8*(d.Chunks+1) }

// ReadEntropy reads back the n descriptors at offset at of buf and
// checks each as the batch kernel does when it reads one (a buffer kept
// in memory may have changed since PutEntropy wrote it): its chunks
// cover its values, its field and pair flag are known, its payload, to
// the end of its chunk index, lies 16-byte aligned before at, and its
// units run from its first to the next payload's first (units, the
// batch's, for the last), as many as its chunks make. It is the kernel's
// reference: a descriptor it refuses, the kernel decodes nothing of.
func ReadEntropy(buf []byte, at uint64, n int, units uint64) ([]Descriptor, error) {
	if n < 0 || at%16 != 0 || at > uint64(len(buf)) || uint64(n) > (uint64(len(buf))-at)/EntropyEntryBytes {
		return nil, fmt.Errorf("%w: %d entropy descriptors at %d of a %d-byte buffer", ErrInvalid, n, at, len(buf))
	}
	le := binary.LittleEndian
	out := make([]Descriptor, n)
	for i := range out {
		b := buf[at+uint64(i)*EntropyEntryBytes:]
		d := &out[i]
		d.Dst, d.Src, d.Values, d.Chunks = le.Uint64(b[0:]), le.Uint64(b[8:]), le.Uint64(b[16:]), le.Uint64(b[24:])
		d.Records, d.RecordBytes = le.Uint64(b[32:]), le.Uint64(b[40:])
		d.Field, d.MaxSymbols, d.FirstUnit = le.Uint32(b[48:]), le.Uint32(b[56:]), le.Uint32(b[60:])
		pair := le.Uint32(b[52:])
		d.Pairs = pair == 1
		copy(d.Lengths[:], b[64:320])
		for s := range d.PairFields {
			d.PairFields[s] = le.Uint16(b[320+2*s:])
		}
		next := units
		if i+1 < n {
			next = uint64(le.Uint32(buf[at+uint64(i+1)*EntropyEntryBytes+60:]))
		}
		switch {
		case d.Chunks != (d.Values+codec.ChunkValues-1)/codec.ChunkValues || d.Field >= uint32(len(entropy.Fields)) || pair > 1:
			return nil, fmt.Errorf("%w: entropy descriptor %d: %d values in %d chunks, field %d, pair flag %d", ErrInvalid, i, d.Values, d.Chunks, d.Field, pair)
		case d.Src%16 != 0 || d.Src > at || d.Records > at || d.RecordBytes > at || d.Chunks >= at/8 || d.End() > at:
			return nil, fmt.Errorf("%w: entropy descriptor %d: a payload at %d whose index ends past the descriptors at %d", ErrInvalid, i, d.Src, at)
		case next < uint64(d.FirstUnit) || next-uint64(d.FirstUnit) != (d.Chunks+EntropyUnitChunks-1)/EntropyUnitChunks:
			return nil, fmt.Errorf("%w: entropy descriptor %d: units %d to %d for %d chunks", ErrInvalid, i, d.FirstUnit, next, d.Chunks)
		}
	}
	return out, nil
}

package scatter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/splitzip/splitzip/codec"
)

// EntryBytes is the size of one entry of a scatter table.
const EntryBytes = 64

// ErrInvalid reports an item or table that does not fit its staging buffer.
var ErrInvalid = errors.New("invalid scatter item")

// Item is one tensor of a packed staging buffer: its stored bytes
// (raw tensor bytes, or a fixed-codec payload when Header is set) lie at
// offset Src of the buffer, and Size bytes are written at Dst.
type Item struct {
	Name   string // for errors
	Dst    uint64
	Src    uint64
	Stored uint64
	Size   uint64
	Header *codec.Header
}

// RawUnit is the bytes of a raw item one unit of work copies (the
// scatter kernel's SZ_RAW_UNIT); a payload's unit is a chunk.
const RawUnit = 32768

// itemUnits returns the kernel's units of work for an item.
func itemUnits(it *Item) uint64 {
	if h := it.Header; h != nil && h.Values > 0 {
		return h.Chunks()
	}
	if it.Header != nil {
		return 0 // an empty payload writes nothing
	}
	return (it.Size + RawUnit - 1) / RawUnit
}

// Units returns the units of work of a scatter over items (the
// kernel's blocks take them in turn).
func Units(items []Item) uint64 {
	var n uint64
	for i := range items {
		n += itemUnits(&items[i])
	}
	return n
}

// TableBytes returns the bytes a table of n items takes at the
// start of a staging buffer; stored bytes start at or after it.
func TableBytes(n int) uint64 { return uint64(n) * EntryBytes }

// Put checks items against a staging buffer of staged bytes
// (a multiple of 16) and writes their table into table, which must hold
// TableBytes(len(items)) bytes. Nothing is written when an item is
// invalid: offsets must be 16-byte aligned, after the table and inside
// the buffer; raw items store exactly Size bytes; payload items have a
// parsed header of Stored bytes that decodes to Size bytes, and a
// 16-byte aligned destination; the units of work number at most 2^32-1.
func Put(table []byte, items []Item, staged uint64) error {
	tb := TableBytes(len(items))
	if uint64(len(table)) < tb || staged%16 != 0 {
		return fmt.Errorf("%w: table of %d bytes for %d items, %d bytes staged", ErrInvalid, len(table), len(items), staged)
	}
	for i := range items {
		it := &items[i]
		bad := func(why string) error {
			return fmt.Errorf("tensor %q: %w: %s", it.Name, ErrInvalid, why)
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
	if u := Units(items); u > math.MaxUint32 {
		return fmt.Errorf("%w: %d units of work in one scatter", ErrInvalid, u)
	}
	var first uint64
	for i, it := range items {
		e := table[i*EntryBytes : (i+1)*EntryBytes]
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

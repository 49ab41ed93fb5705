package codec

import (
	"encoding/binary"
)

// Sizes and constants of payload format version 1. docs/FORMAT.md names
// the same constants; keep the two in step.
const (
	// Magic starts every payload.
	Magic = "SZBF"
	// Version is the payload format version this package writes and reads.
	Version = 1
	// HeaderSize is the size of the fixed header in bytes.
	HeaderSize = 64
	// ChunkValues is the number of values in every chunk but the last.
	ChunkValues = 16384
	// CodebookSize is the number of exponent codes (4 bits).
	CodebookSize = 16
	// EntrySize is the size of one chunk entry in a group table.
	EntrySize = 16
	// Align is the alignment of every section start relative to the payload start.
	Align = 16
	// RawEscapes marks a chunk stored raw in its entry's escape field.
	RawEscapes = 0xFFFF
	// MinGroupChunks is the smallest number of chunks per group, and the
	// number of chunks in group 0, whose entry table lies in front of
	// chunk 0's data and so must stay small for in-place decoding.
	MinGroupChunks = 64
	// MaxGroupTableBytes bounds the group table (8 bytes per group), which
	// must stay inside chunk 0's output range.
	MaxGroupTableBytes = 4096
	// MaxGroupChunks bounds the chunks per group, so that a reader span fits 16 bits.
	MaxGroupChunks = 4096
	// FlagInPlace is set in the header's flags when the payload satisfies
	// the in-place invariant and its reader ranges are filled in.
	FlagInPlace = 1
	// MaxValues is the largest tensor version 1 encodes (2^35 values, 64 GiB of BF16).
	MaxValues = uint64(MaxGroupChunks) * (MaxGroupTableBytes/8 - 1) * ChunkValues
)

// Header field offsets.
const (
	offMagic       = 0
	offVersion     = 4
	offHeaderSize  = 6
	offValues      = 8
	offChunkValues = 16
	offGroupChunks = 20
	offCodebook    = 24
	offEscapes     = 40
	offSize        = 48
	offChecksum    = 56
	offFlags       = 60
)

// ChecksumAt is where a payload's header keeps its CRC-32C (Checksum
// leaves these 4 bytes out): byte 56 of a fixed payload, and of an
// entropy payload too.
const ChecksumAt = offChecksum

// Header is the decoded fixed header of a payload.
type Header struct {
	Values      uint64   // number of BF16 values
	ChunkValues uint32   // values per chunk (ChunkValues in version 1)
	GroupChunks uint32   // chunks per group
	Codebook    Codebook // exponent of each code
	Escapes     uint64   // escaped values in all coded chunks
	Size        uint64   // payload size in bytes
	Checksum    uint32   // CRC-32C of the payload with this field zero
	InPlace     bool     // FlagInPlace: decodable in place
}

// Chunks returns the number of chunks.
func (h *Header) Chunks() uint64 { return ceilDiv(h.Values, uint64(h.ChunkValues)) }

// Groups returns the number of groups: group 0 holds the first
// MinGroupChunks chunks (or all, if fewer), every later group GroupChunks.
func (h *Header) Groups() uint64 { return groupsFor(h.Chunks(), uint64(h.GroupChunks)) }

func groupsFor(chunks, g uint64) uint64 {
	if chunks <= MinGroupChunks {
		return min(chunks, 1)
	}
	return 1 + ceilDiv(chunks-MinGroupChunks, g)
}

// group returns the group of chunk c and c's index in it.
func (h *Header) group(c uint64) (g, i uint64) {
	if c < MinGroupChunks {
		return 0, c
	}
	G := uint64(h.GroupChunks)
	return 1 + (c-MinGroupChunks)/G, (c - MinGroupChunks) % G
}

// groupSpan returns the first chunk of group g and its number of chunks.
func (h *Header) groupSpan(g uint64) (first, count uint64) {
	N := h.Chunks()
	if g == 0 {
		return 0, min(N, MinGroupChunks)
	}
	first = MinGroupChunks + (g-1)*uint64(h.GroupChunks)
	return first, min(uint64(h.GroupChunks), N-first)
}

// GroupTableOffset is where the group table starts.
func (h *Header) GroupTableOffset() uint64 { return HeaderSize }

// DataStart is the offset of the first group.
func (h *Header) DataStart() uint64 { return align(HeaderSize + 8*h.Groups()) }

// chunkCount returns the number of values in chunk c.
func (h *Header) chunkCount(c uint64) int {
	start := c * uint64(h.ChunkValues)
	return int(min(uint64(h.ChunkValues), h.Values-start))
}

// groupChunksFor picks the chunks per group for a tensor of n values: the
// smallest power of two, at least MinGroupChunks, that keeps the group
// table within MaxGroupTableBytes.
func groupChunksFor(n uint64) uint32 {
	chunks := ceilDiv(n, ChunkValues)
	g := uint64(MinGroupChunks)
	for groupsFor(chunks, g)*8 > MaxGroupTableBytes {
		g *= 2
	}
	return uint32(g)
}

func (h *Header) put(b []byte) {
	copy(b[offMagic:], Magic)
	binary.LittleEndian.PutUint16(b[offVersion:], Version)
	binary.LittleEndian.PutUint16(b[offHeaderSize:], HeaderSize)
	binary.LittleEndian.PutUint64(b[offValues:], h.Values)
	binary.LittleEndian.PutUint32(b[offChunkValues:], h.ChunkValues)
	binary.LittleEndian.PutUint32(b[offGroupChunks:], h.GroupChunks)
	copy(b[offCodebook:], h.Codebook[:])
	binary.LittleEndian.PutUint64(b[offEscapes:], h.Escapes)
	binary.LittleEndian.PutUint64(b[offSize:], h.Size)
	binary.LittleEndian.PutUint32(b[offChecksum:], h.Checksum)
	var flags uint32
	if h.InPlace {
		flags |= FlagInPlace
	}
	binary.LittleEndian.PutUint32(b[offFlags:], flags)
}

// entry is one chunk's record in its group table.
type entry struct {
	Offset   uint64 // absolute offset of the chunk's data
	ReadLo   uint32 // first chunk that reads bytes in this chunk's output range
	Escapes  uint16 // escape count, or RawEscapes
	ReadSpan uint16 // number of chunks from ReadLo that read them
}

func (e *entry) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], e.Offset)
	binary.LittleEndian.PutUint32(b[8:], e.ReadLo)
	binary.LittleEndian.PutUint16(b[12:], e.Escapes)
	binary.LittleEndian.PutUint16(b[14:], e.ReadSpan)
}

func getEntry(b []byte) entry {
	return entry{
		Offset:   binary.LittleEndian.Uint64(b[0:]),
		ReadLo:   binary.LittleEndian.Uint32(b[8:]),
		Escapes:  binary.LittleEndian.Uint16(b[12:]),
		ReadSpan: binary.LittleEndian.Uint16(b[14:]),
	}
}

// chunkLen returns the stored length of a chunk of cnt values (padded to Align).
func chunkLen(cnt int, escapes uint16) uint64 {
	if escapes == RawEscapes {
		return align(2 * uint64(cnt))
	}
	return align(nibOffset(cnt) + align(uint64(cnt+1)/2) + 3*uint64(escapes))
}

// nibOffset is where a coded chunk's nibble section starts, relative to the chunk.
func nibOffset(cnt int) uint64 { return align(uint64(cnt)) }

// escOffset is where a coded chunk's escape positions start, relative to the chunk.
func escOffset(cnt int) uint64 { return nibOffset(cnt) + align(uint64(cnt+1)/2) }

// maxCodedEscapes is the most escapes a coded chunk of cnt values may hold:
// with more, a raw chunk is no larger. It is -1 when no coded chunk of cnt
// values is shorter than the raw one.
func maxCodedEscapes(cnt int) int {
	raw := align(2 * uint64(cnt))
	base := escOffset(cnt)
	if raw < base+Align {
		return -1
	}
	// A coded chunk is base+align(3e) bytes and must be shorter than raw.
	return int((raw - base - Align) / 3)
}

func align(x uint64) uint64 { return (x + Align - 1) &^ (Align - 1) }

func ceilDiv(a, b uint64) uint64 {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}

package codec

import (
	"encoding/binary"
	"fmt"
)

// A part is the chunks [First, First+Chunks) of a payload, packed on their
// own: what one tensor-parallel rank needs of a tensor sharded along its
// first dimension (a contiguous range of values) to decode its share
// without the rest of the payload (docs/FORMAT.md, section 7):
//
//	 0  magic "SZPT"       24  u64 data bytes
//	 4  u16 version (1)    32  u32 CRC-32C of the part, this field zero
//	 6  u16 reserved       36  u32 x 7 reserved (zero)
//	 8  u64 first chunk    64  the payload's header, verbatim (64 bytes)
//	16  u64 chunks        128  the chunks' entries, verbatim (16 bytes each)
//	                           then the data: the payload's bytes from the
//	                           first chunk's data to the last one's end
//
// The entries keep the payload's offsets; the data starts at the first
// entry's offset. The checksum covers the part, so bytes damaged between
// the rank that cut it and the rank that decodes it are found.

// PartMagic starts every part.
const PartMagic = "SZPT"

// partVersion is the part layout this package writes and reads.
const partVersion = 1

// partHeader is the size of a part's own header.
const partHeader = 64

// PartInfo describes a part: its chunks and the values they decode to.
type PartInfo struct {
	First, Chunks uint64
	// Values are the values [Values[0], Values[1]) of the tensor the part
	// decodes to.
	Values [2]uint64
	Header Header // the payload's
}

// ChunksCovering returns the chunks [first, first+k) whose values cover
// the values [lo, hi) of a tensor (k is 0 when lo == hi).
func ChunksCovering(lo, hi uint64) (first, k uint64) {
	if hi <= lo {
		return lo / ChunkValues, 0
	}
	first = lo / ChunkValues
	return first, ceilDiv(hi, ChunkValues) - first
}

// Part cuts the part of chunks [first, first+k) from payload p, whose
// checksum the caller has checked (Part checks its header and tables).
func Part(p []byte, first, k uint64) ([]byte, error) {
	h, err := ParseHeader(p)
	if err != nil {
		return nil, err
	}
	if h.Size != uint64(len(p)) {
		return nil, CheckPayload(&h, uint64(len(p)), 0, 0)
	}
	L, err := parseTables(h, func(off, n uint64) ([]byte, error) { return p[off : off+n], nil })
	if err != nil {
		return nil, err
	}
	N := h.Chunks()
	if first > N || k > N-first {
		return nil, fmt.Errorf("%w: chunks [%d, %d) of %d", ErrSize, first, first+k, N)
	}
	var lo, hi uint64
	if k > 0 {
		last := first + k - 1
		lo = L.entries[first].Offset
		hi = L.entries[last].Offset + chunkLen(h.chunkCount(last), L.entries[last].Escapes)
	}
	out := make([]byte, partHeader+HeaderSize+EntrySize*k+(hi-lo))
	copy(out, PartMagic)
	binary.LittleEndian.PutUint16(out[4:], partVersion)
	binary.LittleEndian.PutUint64(out[8:], first)
	binary.LittleEndian.PutUint64(out[16:], k)
	binary.LittleEndian.PutUint64(out[24:], hi-lo)
	copy(out[partHeader:], p[:HeaderSize])
	for j := range k {
		L.entries[first+j].put(out[partHeader+HeaderSize+EntrySize*j:])
	}
	copy(out[partHeader+HeaderSize+EntrySize*k:], p[lo:hi])
	binary.LittleEndian.PutUint32(out[32:], partChecksum(out))
	return out, nil
}

func partChecksum(part []byte) uint32 { return ChecksumWithout(part, 32) }

func partError(format string, args ...any) error {
	return fmt.Errorf("%w: part: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// ParsePart checks a part's header, checksum and payload header and
// returns what it decodes to.
func ParsePart(part []byte) (PartInfo, error) {
	if len(part) < partHeader+HeaderSize || string(part[:4]) != PartMagic {
		return PartInfo{}, partError("no part header")
	}
	if v := binary.LittleEndian.Uint16(part[4:]); v != partVersion {
		return PartInfo{}, fmt.Errorf("%w: part version %d, this build reads %d", ErrVersion, v, partVersion)
	}
	if got, want := partChecksum(part), binary.LittleEndian.Uint32(part[32:]); got != want {
		return PartInfo{}, &ChecksumError{Payload: "fixed part", Computed: got, Stored: want}
	}
	if checkZero(part[6:8]) != nil || checkZero(part[36:partHeader]) != nil {
		return PartInfo{}, partError("reserved bytes are not zero")
	}
	h, err := ParseHeader(part[partHeader:])
	if err != nil {
		return PartInfo{}, err
	}
	first, k := binary.LittleEndian.Uint64(part[8:]), binary.LittleEndian.Uint64(part[16:])
	data := binary.LittleEndian.Uint64(part[24:])
	N := h.Chunks()
	if first > N || k > N-first {
		return PartInfo{}, partError("chunks [%d, +%d) of %d", first, k, N)
	}
	if body := uint64(len(part)) - partHeader - HeaderSize; k > body/EntrySize || body-EntrySize*k != data {
		return PartInfo{}, partError("%d chunks and %d data bytes in %d bytes", k, data, body)
	}
	pi := PartInfo{First: first, Chunks: k, Header: h}
	pi.Values = [2]uint64{min(first*ChunkValues, h.Values), min((first+k)*ChunkValues, h.Values)}
	return pi, nil
}

// DecodePart decodes a part into dst, which must hold exactly its values
// (2 bytes each), checking every chunk as Decode does; it returns what
// ParsePart does.
func DecodePart(dst, part []byte) (PartInfo, error) {
	pi, err := ParsePart(part)
	if err != nil {
		return pi, err
	}
	if n := pi.Values[1] - pi.Values[0]; uint64(len(dst)) != 2*n {
		return pi, fmt.Errorf("%w: destination of %d bytes for %d values", ErrSize, len(dst), n)
	}
	if pi.Chunks == 0 {
		return pi, nil
	}
	h := &pi.Header
	ents := part[partHeader+HeaderSize:]
	data := ents[EntrySize*pi.Chunks:]
	base := getEntry(ents).Offset
	lut := pairTable(&h.Codebook)
	codes := h.Codebook.codeTable()
	for j := range pi.Chunks {
		c := pi.First + j
		e := getEntry(ents[EntrySize*j:])
		cnt := h.chunkCount(c)
		if e.Escapes != RawEscapes && int(e.Escapes) > maxCodedEscapes(cnt) {
			return pi, partError("chunk %d: %d escapes, at most %d", c, e.Escapes, maxCodedEscapes(cnt))
		}
		n := chunkLen(cnt, e.Escapes)
		if e.Offset < base || e.Offset-base > uint64(len(data)) || n > uint64(len(data))-(e.Offset-base) {
			return pi, partError("chunk %d: data at %d+%d outside the part's %d+%d", c, e.Offset, n, base, len(data))
		}
		at := 2 * (c*ChunkValues - pi.Values[0])
		if reason := decodeChunk(dst[at:at+2*uint64(cnt)], data[e.Offset-base:e.Offset-base+n], e.Escapes, &h.Codebook, lut, &codes); reason != "" {
			return pi, corrupt(e.Offset, int64(c), "%s", reason)
		}
	}
	return pi, nil
}

package entropy

import (
	"encoding/binary"
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// A part is the chunks [First, First+Chunks) of a version 2 or 3 payload with
// what decoding them needs, for a tensor-parallel rank whose share of a
// tensor is a contiguous range of values (docs/FORMAT.md, section 7):
//
//	 0  magic "SZEP"          24  u64 head bytes (the payload's header,
//	 4  u16 version (1)           code lengths and padding)
//	 6  u16 reserved          32  u64 record bytes (the chunks' records)
//	 8  u64 first chunk       40  u64 index bytes (the whole chunk index)
//	16  u64 chunks            48  u32 CRC-32C of the part, this field zero
//	                          52  u32 x 3 reserved (zero)
//	64  the head, the records, the index, verbatim
//
// The whole index travels (8 bytes a chunk) so that the payload's own
// checks of it run on the receiving rank; the records of other chunks do
// not. The part's checksum covers it, since the payload's cannot be
// checked without all records.

// PartMagic starts every entropy part.
const PartMagic = "SZEP"

const (
	partVersion = 1
	partHeader  = 64
)

// PartInfo describes an entropy part: its chunks and the values they
// decode to.
type PartInfo struct {
	First, Chunks uint64
	Values        [2]uint64 // the values [Values[0], Values[1]) of the tensor
	Header        PayloadHeader
}

// ChunksCovering returns the chunks [first, first+k) of a payload with
// chunkValues values a chunk whose values cover the values [lo, hi).
func ChunksCovering(chunkValues uint32, lo, hi uint64) (first, k uint64) {
	cv := uint64(chunkValues)
	if hi <= lo || cv == 0 {
		return 0, 0
	}
	first = lo / cv
	return first, (hi+cv-1)/cv - first
}

// Part cuts the part of chunks [first, first+k) from the version 2 or 3
// payload p, whose checksum the caller has checked (Part checks its head
// and index). A version 1 payload is ErrNoRecords.
func Part(p []byte, first, k uint64) ([]byte, error) {
	h, err := ParsePayloadHeader(p)
	if err != nil {
		return nil, err
	}
	if h.Size != uint64(len(p)) {
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, len(p), h.Size)
	}
	if !h.records() {
		return nil, ErrNoRecords
	}
	if _, err := h.table(p[:h.Others]); err != nil {
		return nil, err
	}
	at := indexAt(p[h.Index:])
	if err := h.checkIndex(at); err != nil {
		return nil, err
	}
	N := h.Chunks()
	if first > N || k > N-first {
		return nil, fmt.Errorf("%w: chunks [%d, %d) of %d", codec.ErrSize, first, first+k, N)
	}
	var rec []byte
	if k > 0 {
		rec = p[h.Others+at(first) : h.Others+at(first+k)]
	}
	head, idx := p[:h.Others], p[h.Index:]
	out := make([]byte, partHeader, partHeader+len(head)+len(rec)+len(idx))
	copy(out, PartMagic)
	binary.LittleEndian.PutUint16(out[4:], partVersion)
	binary.LittleEndian.PutUint64(out[8:], first)
	binary.LittleEndian.PutUint64(out[16:], k)
	binary.LittleEndian.PutUint64(out[24:], uint64(len(head)))
	binary.LittleEndian.PutUint64(out[32:], uint64(len(rec)))
	binary.LittleEndian.PutUint64(out[40:], uint64(len(idx)))
	out = append(append(append(out, head...), rec...), idx...)
	binary.LittleEndian.PutUint32(out[48:], partChecksum(out))
	return out, nil
}

func partChecksum(part []byte) uint32 { return codec.ChecksumWithout(part, 48) }

// sparse is the bytes of a payload a part holds, at their offsets in the
// payload: reading anything else is an error.
type sparse struct {
	spans []span
}

type span struct {
	off uint64
	b   []byte
}

func (s *sparse) ReadAt(b []byte, off int64) (int, error) {
	o := uint64(off)
	for _, sp := range s.spans {
		if o >= sp.off && o-sp.off <= uint64(len(sp.b)) && uint64(len(b)) <= uint64(len(sp.b))-(o-sp.off) {
			return copy(b, sp.b[o-sp.off:]), nil
		}
	}
	return 0, fmt.Errorf("%w: part: %d bytes at %d are not in it", ErrPayload, len(b), off)
}

// openPart checks a part and returns a Reader over the payload bytes it
// holds, with what it decodes to.
func openPart(part []byte) (*Reader, PartInfo, error) {
	bad := func(format string, args ...any) (*Reader, PartInfo, error) {
		return nil, PartInfo{}, fmt.Errorf("%w: part: %s", ErrPayload, fmt.Sprintf(format, args...))
	}
	if len(part) < partHeader || string(part[:4]) != PartMagic {
		return bad("no part header")
	}
	if v := binary.LittleEndian.Uint16(part[4:]); v != partVersion {
		return bad("version %d, this build reads %d", v, partVersion)
	}
	if got, want := partChecksum(part), binary.LittleEndian.Uint32(part[48:]); got != want {
		return nil, PartInfo{}, &codec.ChecksumError{Payload: "entropy part", Computed: got, Stored: want}
	}
	for _, b := range append(part[6:8:8], part[52:partHeader]...) {
		if b != 0 {
			return bad("reserved bytes are not zero")
		}
	}
	first, k := binary.LittleEndian.Uint64(part[8:]), binary.LittleEndian.Uint64(part[16:])
	nh, nr, ni := binary.LittleEndian.Uint64(part[24:]), binary.LittleEndian.Uint64(part[32:]), binary.LittleEndian.Uint64(part[40:])
	body := uint64(len(part) - partHeader)
	if nh > body || nr > body-nh || ni != body-nh-nr || nh < headerSize {
		return bad("%d, %d and %d bytes in %d", nh, nr, ni, body)
	}
	head := part[partHeader : partHeader+nh]
	rec := part[partHeader+nh : partHeader+nh+nr]
	idx := part[partHeader+nh+nr:]
	h, err := ParsePayloadHeader(head)
	if err != nil {
		return nil, PartInfo{}, err
	}
	if !h.records() || h.Others != nh || h.Index > h.Size || h.Size-h.Index != ni {
		return bad("head of %d and index of %d bytes for this payload header", nh, ni)
	}
	N := h.Chunks()
	if first > N || k > N-first {
		return bad("chunks [%d, +%d) of %d", first, k, N)
	}
	at := indexAt(idx)
	if k > 0 && (at(first) > at(first+k) || at(first+k)-at(first) != nr) {
		return bad("%d record bytes for chunks [%d, +%d)", nr, first, k)
	}
	sp := &sparse{spans: []span{{0, head}, {h.Index, idx}}}
	if k > 0 {
		sp.spans = append(sp.spans, span{h.Others + at(first), rec})
	}
	r, err := NewReader(sp, h.Size)
	if err != nil {
		return nil, PartInfo{}, err
	}
	cv := uint64(h.ChunkValues)
	pi := PartInfo{First: first, Chunks: k, Header: h,
		Values: [2]uint64{min(first*cv, h.Values), min((first+k)*cv, h.Values)}}
	return r, pi, nil
}

// ParsePart checks a part and returns what it decodes to.
func ParsePart(part []byte) (PartInfo, error) {
	_, pi, err := openPart(part)
	return pi, err
}

// DecodePart decodes a part into dst, which must hold exactly its values,
// checking every chunk as Decode does.
func DecodePart(dst, part []byte) (PartInfo, error) {
	r, pi, err := openPart(part)
	if err != nil {
		return pi, err
	}
	size := uint64(Fields[pi.Header.Field].Size)
	if n := pi.Values[1] - pi.Values[0]; uint64(len(dst)) != n*size {
		return pi, fmt.Errorf("%w: destination of %d bytes for %d values", codec.ErrSize, len(dst), n)
	}
	if pi.Chunks == 0 {
		return pi, nil
	}
	_, _, err = r.DecodeChunks(pi.First, pi.First+pi.Chunks, dst)
	return pi, err
}

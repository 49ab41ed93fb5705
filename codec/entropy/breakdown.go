package entropy

// Where an entropy payload's bits go: the head, the chunk index, the bits
// kept as they are, the code words, and what each chunk pays to be
// decoded in parallel.

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Breakdown is where the bits of entropy payloads go. Its fields add up to
// Bits; Add sums payloads.
type Breakdown struct {
	Values uint64 `json:"values"`
	Bits   uint64 `json:"bits"` // all of the payloads'
	// Payloads is the payloads summed, PairPayloads those of version 3
	// (pairs of fields as symbols).
	Payloads     uint64 `json:"payloads"`
	PairPayloads uint64 `json:"pair_payloads"`
	// Head is the header, the code lengths and their padding (in version
	// 1 the chunk index too, in version 3 the pair table).
	Head uint64 `json:"head_bits"`
	// Index is the chunk index of version 2 and 3 payloads.
	Index uint64 `json:"index_bits"`
	// Kept is the bits stored as they are (the other bits of each value),
	// with each chunk's padding to a byte.
	Kept uint64 `json:"kept_bits"`
	// Codes is the code words of coded chunks, CodedValues their values.
	Codes       uint64 `json:"code_bits"`
	CodedValues uint64 `json:"coded_values"`
	// Lanes is what coded chunks store to be decoded lane by lane in
	// parallel: the mode byte, the lanes' total and width, each lane's
	// length, and the padding of the lanes to a byte.
	Lanes uint64 `json:"lane_bits"`
	// Plain is the symbols of raw and constant chunks, mode bytes
	// included; PlainValues their values.
	Plain       uint64 `json:"plain_bits"`
	PlainValues uint64 `json:"plain_values"`
	// Padding is the alignment between sections (version 1).
	Padding uint64 `json:"padding_bits"`
}

// Add adds b's bits and values to s.
func (s *Breakdown) Add(b Breakdown) {
	s.Values += b.Values
	s.Payloads += b.Payloads
	s.PairPayloads += b.PairPayloads
	s.Bits += b.Bits
	s.Head += b.Head
	s.Index += b.Index
	s.Kept += b.Kept
	s.Codes += b.Codes
	s.CodedValues += b.CodedValues
	s.Lanes += b.Lanes
	s.Plain += b.Plain
	s.PlainValues += b.PlainValues
	s.Padding += b.Padding
}

// chunkHead is the most bytes a coded chunk's header and lane lengths
// take: the mode byte, 37 bits, and Lanes lengths of at most 31 bits.
const chunkHead = 1 + (37+Lanes*31+7)/8

// Explain reads the head, the chunk index and each chunk's first bytes of
// the entropy payload of size bytes in r (not its code words or kept
// bits) and says where its bits go. It checks what it reads (the header,
// the index's spans, the coded chunks' lane total) but not the checksum:
// Check or a decode does that.
func Explain(r io.ReaderAt, size uint64) (Breakdown, error) {
	var b Breakdown
	head := make([]byte, headerSize)
	if size < headerSize {
		return b, fmt.Errorf("%w: %d bytes", ErrPayload, size)
	}
	if _, err := r.ReadAt(head, 0); err != nil {
		return b, err
	}
	h, err := ParsePayloadHeader(head)
	if err != nil {
		return b, err
	}
	if h.Size != size {
		return b, fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, size, h.Size)
	}
	b.Values, b.Bits, b.Head = h.Values, 8*size, 8*h.Others
	b.Payloads = 1
	if h.Pairs {
		b.PairPayloads = 1
	}
	chunks := h.Chunks()
	// The chunk index: at the end in versions 2 and 3, after the code lengths
	// (inside the head) in version 1.
	n, at0 := 8*(chunks+1), uint64(headerSize+(h.Count+1)/2)
	if h.records() {
		n, at0 = h.Size-h.Index, h.Index
		b.Index = 8 * n
	}
	idx := make([]byte, n) // ParsePayloadHeader bounded it by the payload's size
	_, err = r.ReadAt(idx, int64(at0))
	if err != nil {
		return b, err
	}
	at := indexAt(idx)
	if err := h.checkIndex(at); err != nil {
		return b, err
	}
	ob := uint64(Fields[h.Field].Other())
	if h.Version == 1 {
		// The kept bits are one section, padded to 16 bytes.
		kept := (h.Values*ob + 7) / 8
		b.Kept, b.Padding = 8*kept, 8*(h.Symbols-h.Others-kept)
	}
	buf := make([]byte, chunkHead)
	for c := range chunks {
		oLo, oHi, sLo, sHi, err := h.spans(c, at(c), at(c+1))
		if err != nil {
			return b, err
		}
		if h.records() {
			b.Kept += 8 * (oHi - oLo)
		}
		n := h.chunkValues(c)
		m := buf[:min(uint64(chunkHead), sHi-sLo)]
		if len(m) == 0 {
			return b, fmt.Errorf("%w: chunk %d has no symbols", ErrStream, c)
		}
		if _, err := r.ReadAt(m, int64(sLo)); err != nil {
			return b, err
		}
		stored := 8 * (sHi - sLo)
		if m[0] != ModeCoded {
			b.Plain += stored
			b.PlainValues += n
			continue
		}
		if len(m) < 6 {
			return b, fmt.Errorf("%w: chunk %d: a coded chunk of %d bytes", ErrStream, c, len(m))
		}
		total := uint64(binary.BigEndian.Uint32(m[1:5]))
		lanes := 8 + 37 + uint64(lanesFor(int(h.chunkSymbols(n))))*uint64(m[5]>>3)
		if lanes+total > stored {
			return b, fmt.Errorf("%w: chunk %d: %d bits of lanes in %d bits", ErrStream, c, lanes+total, stored)
		}
		b.Codes += total
		b.CodedValues += n
		b.Lanes += stored - total
	}
	return b, nil
}

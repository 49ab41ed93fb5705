package entropy

// What a decoder on another device (a GPU) needs from the host: the
// header and the code lengths, checked, and the whole payload checked
// without decoding it.

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// Head is a version 2 payload's header with its code lengths: all a
// decoder needs besides the chunk records and the chunk index.
type Head struct {
	PayloadHeader
	// Lengths is the code length of each symbol (0: none); the code they
	// make is complete and at most MaxLen bits long.
	Lengths [MaxSymbols]uint8
	// MaxRecord is the longest chunk record, once the chunk index has been
	// checked (Check, CheckIndex); 0 until then.
	MaxRecord uint64
	// MaxSymbols is the longest symbol chunk (a record without its other
	// bits), set with MaxRecord.
	MaxSymbols uint64
}

// ParseHead parses and checks the head of a version 2 payload: its
// header and code lengths, the first Others bytes (or more) of head.
// Version 1 payloads are ErrNoRecords: no decoder on a device reads them.
func ParseHead(head []byte) (*Head, error) {
	h, err := ParsePayloadHeader(head)
	if err != nil {
		return nil, err
	}
	if h.Version != 2 {
		return nil, ErrNoRecords
	}
	e := &Head{PayloadHeader: h}
	if h.Values == 0 {
		return e, nil
	}
	if _, err := h.table(head); err != nil { // checks the lengths make a code
		return nil, err
	}
	for k := range h.Count {
		e.Lengths[h.Lo+k] = head[headerSize+k/2] >> (4 * (1 - k%2)) & 15
	}
	return e, nil
}

// ValueBytes returns the bytes of the decoded values.
func (h *PayloadHeader) ValueBytes() uint64 { return h.Values * uint64(Fields[h.Field].Size) }

// Check checks a whole version 2 payload without decoding it: its head,
// size, checksum and chunk index (every record's span, and the in-place
// flag against the invariant), and returns its head.
func Check(p []byte) (*Head, error) {
	e, err := ParseHead(p)
	if err != nil {
		return nil, err
	}
	switch {
	case uint64(len(p)) != e.Size:
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, len(p), e.Size)
	case codec.Checksum(p) != e.Checksum:
		return nil, fmt.Errorf("%w: checksum mismatch", codec.ErrChecksum)
	}
	if err := e.CheckIndex(e.indexBytes(p)); err != nil {
		return nil, err
	}
	return e, nil
}

// CheckIndex checks a version 2 payload's chunk index, the last
// 8 x (chunks+1) bytes of the payload: every record's span lies inside
// the records, and a payload flagged in place decodes in place. It sets
// MaxRecord and MaxSymbols.
func (e *Head) CheckIndex(idx []byte) error {
	if e.Version != 2 || uint64(len(idx)) != e.Size-e.Index {
		return fmt.Errorf("%w: an index of %d bytes, want %d", ErrPayload, len(idx), e.Size-e.Index)
	}
	at := indexAt(idx)
	if err := e.checkIndex(at); err != nil {
		return err
	}
	e.MaxRecord, e.MaxSymbols = 0, 0
	ob := uint64(Fields[e.Field].Other())
	for c := range e.Chunks() {
		span := at(c+1) - at(c) // at least the chunk's other bits: checked
		e.MaxRecord = max(e.MaxRecord, span)
		e.MaxSymbols = max(e.MaxSymbols, span-(e.chunkValues(c)*ob+7)/8)
	}
	return nil
}

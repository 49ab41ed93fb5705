package entropy

// What a decoder on another device (a GPU) needs from the host: the
// header and the code lengths, checked, and the whole payload checked
// without decoding it.

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// Head is a version 2 or 3 payload's header with its code lengths and
// pair table: all a decoder needs besides the chunk records and the chunk
// index.
type Head struct {
	PayloadHeader
	// Lengths is the code length of each symbol (0: none); the code they
	// make is complete and at most MaxLen bits long.
	Lengths [MaxSymbols]uint8
	// PairFields is, in version 3 (Pairs), each symbol's two fields: the
	// first in the low byte, the second in the high byte.
	PairFields [MaxSymbols]uint16
	// MaxRecord is the longest chunk record, once the chunk index has been
	// checked (Check, CheckIndex); 0 until then.
	MaxRecord uint64
	// MaxSymbols is the longest symbol chunk (a record without its other
	// bits), set with MaxRecord.
	MaxSymbols uint64
}

// MaxHead bounds the head of a payload (its first Others bytes): the
// header, the code lengths of 256 symbols, a pair table of 256 pairs and
// padding to 16 bytes. Reading min(size, MaxHead) bytes gives ParseHead
// all it needs.
const MaxHead = headerSize + MaxSymbols/2 + 2*MaxSymbols

// ParseHead parses and checks the head of a version 2 or 3 payload: its
// header, code lengths and pair table, the first Others bytes (or more)
// of head.
// Version 1 payloads are ErrNoRecords: no decoder on a device reads them.
func ParseHead(head []byte) (*Head, error) {
	e := new(Head)
	if err := parseHeadTo(head, e); err != nil {
		return nil, err
	}
	return e, nil
}

// parseHeadTo is ParseHead writing the head to e. It checks the code
// lengths and the pair table without building a decode table.
func parseHeadTo(head []byte, e *Head) error {
	h, err := ParsePayloadHeader(head)
	if err != nil {
		return err
	}
	if !h.records() {
		return ErrNoRecords
	}
	*e = Head{PayloadHeader: h}
	if h.Values == 0 {
		return nil
	}
	if uint64(len(head)) < h.headEnd() {
		return fmt.Errorf("%w: code lengths past the data", ErrPayload)
	}
	for k := range h.Count {
		e.Lengths[h.Lo+k] = head[headerSize+k/2] >> (4 * (1 - k%2)) & 15
	}
	// Symbols outside [Lo, Lo + Count) have no code: only those are checked.
	if _, err := checkLengths(e.Lengths[h.Lo:h.Lo+h.Count], h.Lo, h.MaxLen); err != nil {
		return fmt.Errorf("%w: %v", ErrPayload, err)
	}
	if h.Pairs {
		return h.pairTableTo(head, &e.PairFields)
	}
	return nil
}

// ValueBytes returns the bytes of the decoded values.
func (h *PayloadHeader) ValueBytes() uint64 { return h.Values * uint64(Fields[h.Field].Size) }

// Check checks a whole version 2 or 3 payload without decoding it: its head,
// size, checksum and chunk index (every record's span, and the in-place
// flag against the invariant), and returns its head.
func Check(p []byte) (*Head, error) {
	e := new(Head)
	if err := CheckTo(p, e); err != nil {
		return nil, err
	}
	return e, nil
}

// CheckTo is Check writing the head to e: the staging path checks small
// payloads by the hundred into heads it recycles.
func CheckTo(p []byte, e *Head) error {
	if err := parseHeadTo(p, e); err != nil {
		return err
	}
	if uint64(len(p)) != e.Size {
		return fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, len(p), e.Size)
	}
	if sum := codec.Checksum(p); sum != e.Checksum {
		return &codec.ChecksumError{Payload: "entropy payload", Computed: sum, Stored: e.Checksum}
	}
	return e.CheckIndex(e.indexBytes(p))
}

// CheckIndex checks a version 2 or 3 payload's chunk index, the last
// 8 x (chunks+1) bytes of the payload: every record's span lies inside
// the records, and a payload flagged in place decodes in place. It sets
// MaxRecord and MaxSymbols.
func (e *Head) CheckIndex(idx []byte) error {
	if !e.records() || uint64(len(idx)) != e.Size-e.Index {
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

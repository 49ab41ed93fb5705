package entropy

// Decoding in place: the payload at the start of the values' own buffer.

import (
	"fmt"

	"github.com/splitzip/splitzip/codec"
)

// ErrNotInPlace reports a payload without the in-place flag given to
// DecodeInPlace.
var ErrNotInPlace = fmt.Errorf("%w: entropy payload", codec.ErrNotInPlace)

// DecodeInPlace decodes the version 2 or 3 payload at the start of buf (its
// first size bytes) into buf, which must hold exactly its values,
// overwriting the payload. It is the reference of the in-place invariant
// (docs/FORMAT.md, "The in-place invariant"): chunks are decoded last first,
// each chunk's record read whole before its values are written, so a
// chunk's values may cover its own record and those of later chunks,
// already decoded, but never an earlier chunk's. That holds when the
// payload fits in its values and, for every chunk c after the first, its
// record starts no later than its values do (records' start plus index
// entry c at most c times a chunk's bytes); the encoder sets the flag
// then. The head (header, code lengths) and the chunk index (at the end)
// are set aside first, as a GPU decoder is given them in buffers of its
// own. A payload without
// the flag, damaged, or whose index breaks the invariant is refused
// before anything is written; a chunk that fails to decode leaves buf
// partly decoded and the call names it.
func DecodeInPlace(buf []byte, size uint64) error {
	if size > uint64(len(buf)) {
		return fmt.Errorf("%w: a payload of %d bytes in %d", ErrPayload, size, len(buf))
	}
	p := buf[:size]
	h, err := ParsePayloadHeader(p)
	if err != nil {
		return err
	}
	f := Fields[h.Field]
	switch {
	case h.Size != size:
		return fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, size, h.Size)
	case !h.InPlace:
		return ErrNotInPlace
	case uint64(len(buf)) != h.Values*uint64(f.Size):
		return fmt.Errorf("%w: %d bytes for %d %s values", codec.ErrSize, len(buf), h.Values, f.DType)
	case codec.Checksum(p) != h.Checksum:
		return &codec.ChecksumError{Payload: "entropy payload", Computed: codec.Checksum(p), Stored: h.Checksum}
	}
	head := append([]byte(nil), p[:h.Others]...)
	idx := append([]byte(nil), h.indexBytes(p)...)
	tab, err := h.tableFrom(head, true)
	if err != nil {
		return err
	}
	defer tab.release()
	at := indexAt(idx)
	if err := h.checkIndex(at); err != nil { // the invariant included
		return err
	}
	per := uint64(h.ChunkValues) * uint64(f.Size)
	// The decoders' scratch and tables, kept across calls: a small
	// tensor's payload (the packer decodes hundreds in place) allocates
	// only its head and index copies and its Table.
	sc := scratchPool.Get().(*chunkScratch)
	defer scratchPool.Put(sc)
	for c := h.Chunks(); c > 0; {
		c--
		oLo, oHi, _, sHi, _ := h.spans(c, at(c), at(c+1)) // checked
		sc.rec = append(sc.rec[:0], buf[oLo:sHi]...)
		rec := sc.rec
		n := h.chunkValues(c)
		if err := decodeValues(tab, f, rec[:oHi-oLo], rec[oHi-oLo:], sc.syms[:n], buf[c*per:c*per+n*uint64(f.Size)], sc); err != nil {
			return fmt.Errorf("chunk %d: %w", c, err)
		}
	}
	return nil
}

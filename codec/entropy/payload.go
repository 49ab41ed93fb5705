package entropy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/splitzip/splitzip/codec"
)

// The entropy payload (docs/FORMAT.md, "Entropy payloads"), versions 2
// and 3:
//
//	 0  magic "SZEN"          32  u64 offset of the chunk records
//	 4  u16 version (2, 3)    40  u64 offset of the chunk index
//	 6  u16 header size (64)  48  u64 payload size
//	 8  u64 values            56  u32 CRC-32C, this field zero (codec.Checksum)
//	16  u32 values per chunk  60  u32 flags: bit 0, decodable in place
//	20  u8 field (index into Fields), u8 code length limit,
//	    u8 smallest symbol coded, u8 reserved
//	24  u16 symbols coded (from the smallest), u16 and u32 reserved
//	64  code lengths, 4 bits each, high nibble first
//	    version 3: the pair table, 2 bytes a coded symbol (its first
//	    field, then its second)
//	    (zero padding to 16)
//	    the chunk records, one after another: a chunk's record is the
//	    other bits of its values, Field.Other() bits each, packed most
//	    significant bit first in value order and padded to a byte, then
//	    its symbol chunk (EncodeChunk)
//	    chunk index, at the end: chunks+1 u64 offsets of each chunk's
//	    record from the records' start (the last is their total size)
//
// The index comes last so that the first records lie near the payload's
// start, which decoding in place needs (DecodeInPlace).
// In version 2 each value's field is a symbol; in version 3 each symbol
// stands for the fields of two adjacent values of its chunk (values 2j
// and 2j+1; a chunk's odd last value is the first field of its last
// symbol, whose second field is ignored), which codes peaked exponents
// closer to their entropy than one code word a value can.
// A value is rebuilt from its symbol and its other bits: the bits below the
// field, the field, the bits above it. Version 1 (still read) kept the
// other bits of all values in one section (at offset 32) before all the
// symbol chunks (at offset 40), which no order of chunks decodes in place.

// PayloadMagic starts every entropy payload.
const PayloadMagic = "SZEN"

// PayloadVersion is the newest entropy payload version this package
// writes: version 3 for a payload that codes pairs of fields, version 2
// otherwise, so that payloads of single fields stay readable by builds
// that read version 2. It reads versions 1 to 3.
const PayloadVersion = 3

// pairVersion is the version of payloads whose symbols are pairs.
const pairVersion = 3

const (
	headerSize = 64
	offFields  = 20
	offOthers  = 32 // version 1: the other bits; versions 2, 3: the records
	offSymbols = 40 // version 1: the symbol chunks; versions 2, 3: the index
	offSize    = 48
	offCRC     = 56
	offFlags   = 60
	// flagInPlace marks a payload that DecodeInPlace decodes (versions 2, 3).
	flagInPlace = 1
)

// ErrPayload reports an entropy payload that is not one, or is damaged.
var ErrPayload = errors.New("corrupt entropy payload")

// PayloadHeader is the decoded fixed header of an entropy payload.
type PayloadHeader struct {
	Version     int
	Values      uint64
	ChunkValues uint32
	Field       int // index into Fields
	MaxLen      int
	Lo, Count   int // symbols Lo..Lo+Count-1 have code lengths
	// Others is where the head (header, code lengths, padding, and in
	// version 1 the chunk index) ends: the other bits start there in
	// version 1, the chunk records in versions 2 and 3. Symbols is where version
	// 1's symbol chunks start, Index where their chunk index does
	// (its last 8 x (chunks+1) bytes).
	Others   uint64
	Symbols  uint64
	Index    uint64
	Size     uint64
	Checksum uint32
	// InPlace is the flag of a version 2 or 3 payload the encoder found
	// decodable in place (see DecodeInPlace).
	InPlace bool
	// Pairs marks a version 3 payload: each symbol is a pair of fields,
	// listed in the pair table after the code lengths.
	Pairs bool
}

// records reports whether the payload is laid out in chunk records
// (versions 2 and 3), not in version 1's two sections.
func (h *PayloadHeader) records() bool { return h.Version >= 2 }

// symbolBits returns the bits of a symbol: the field's, or 8 for a pair
// symbol (an index into the pair table).
func (h *PayloadHeader) symbolBits() int {
	if h.Pairs {
		return 8
	}
	return Fields[h.Field].Bits
}

// chunkSymbols returns the symbols of a chunk of n values.
func (h *PayloadHeader) chunkSymbols(n uint64) uint64 {
	if h.Pairs {
		return (n + 1) / 2
	}
	return n
}

// headEnd returns where the code lengths and, in version 3, the pair
// table end.
func (h *PayloadHeader) headEnd() uint64 {
	n := uint64(headerSize) + uint64((h.Count+1)/2)
	if h.Pairs {
		n += 2 * uint64(h.Count)
	}
	return n
}

// table returns the decode table of the code lengths after the header at
// the start of head, with a version 3 payload's pair table (nil for a
// payload of no values).
func (h *PayloadHeader) table(head []byte) (*Table, error) { return h.tableFrom(head, false) }

// tableFrom is table with, where pooled, the tables from the pools
// (pooledTable): the caller releases it.
func (h *PayloadHeader) tableFrom(head []byte, pooled bool) (*Table, error) {
	if h.Values == 0 {
		return nil, nil
	}
	if uint64(len(head)) < h.headEnd() {
		return nil, fmt.Errorf("%w: code lengths past the data", ErrPayload)
	}
	ls := make([]uint8, 1<<h.symbolBits())
	for k := range h.Count {
		ls[h.Lo+k] = head[headerSize+k/2] >> (4 * (1 - k%2)) & 15
	}
	code, err := NewCode(ls, h.MaxLen)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	var t *Table
	if pooled {
		t = pooledTable(code)
	} else {
		t = NewTable(code)
	}
	if h.Pairs {
		if t.pairs, err = h.pairTable(head); err != nil {
			t.release()
			return nil, err
		}
	}
	return t, nil
}

// pairTable returns a version 3 payload's pair table from its head: the
// two fields of each symbol, the first in the low byte. A field wider
// than the field's bits is an error.
func (h *PayloadHeader) pairTable(head []byte) (*[MaxSymbols]uint16, error) {
	pt := new([MaxSymbols]uint16)
	if err := h.pairTableTo(head, pt); err != nil {
		return nil, err
	}
	return pt, nil
}

// pairTableTo is pairTable writing into pt, whose entries of symbols
// without a pair it leaves as they are.
func (h *PayloadHeader) pairTableTo(head []byte, pt *[MaxSymbols]uint16) error {
	at := uint64(headerSize) + uint64((h.Count+1)/2)
	if uint64(len(head)) < at+2*uint64(h.Count) {
		return fmt.Errorf("%w: pair table past the data", ErrPayload)
	}
	limit := uint16(1) << Fields[h.Field].Bits
	for k := range h.Count {
		a, b := uint16(head[at+2*uint64(k)]), uint16(head[at+2*uint64(k)+1])
		if a >= limit || b >= limit {
			return fmt.Errorf("%w: pair %d holds fields %d and %d of %d bits", ErrPayload, h.Lo+k, a, b, Fields[h.Field].Bits)
		}
		pt[h.Lo+k] = a | b<<8
	}
	return nil
}

// Chunks returns the number of chunks.
func (h *PayloadHeader) Chunks() uint64 {
	return (h.Values + uint64(h.ChunkValues) - 1) / uint64(h.ChunkValues)
}

// FieldIndex returns the index in Fields of dtype's field: the exponent,
// or with whole the whole byte of an FP8 dtype.
func FieldIndex(dtype string, whole bool) (int, error) {
	for i, f := range Fields {
		if f.DType == dtype && f.Whole == whole {
			return i, nil
		}
	}
	return 0, fmt.Errorf("entropy: no field for %s (whole bytes %v)", dtype, whole)
}

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// Encode writes the entropy payload of raw, little-endian values of field
// Fields[fi], coding chunks on up to workers goroutines (0: GOMAXPROCS).
func Encode(fi int, raw []byte, workers int) ([]byte, error) {
	if fi < 0 || fi >= len(Fields) {
		return nil, fmt.Errorf("entropy: field %d", fi)
	}
	f := Fields[fi]
	if len(raw)%f.Size != 0 {
		return nil, fmt.Errorf("entropy: %d bytes are not whole %s values", len(raw), f.DType)
	}
	n := len(raw) / f.Size
	chunkValues := codec.ChunkValues
	chunks := (n + chunkValues - 1) / chunkValues
	span := func(c int) (int, int) { return c * chunkValues, min(n, (c+1)*chunkValues) }
	// The counts: a run of whole chunks a goroutine (pairs never cross a
	// chunk, which holds an even number of values), then summed.
	w := min(workersOr(workers), max(chunks, 1))
	per := (chunks + w - 1) / w
	// Exponent fields other than BF16's are cut from the values once, into
	// fields, for the counts and the chunks (BF16's split, and a copy of
	// whole FP8 bytes, cost less a chunk at a time than a buffer of them
	// all).
	bf16 := f.DType == "BF16" && !f.Whole
	cut := !bf16 && !f.Whole
	var fields []byte
	if cut {
		fields = make([]byte, n)
	}
	counts := make([]*Counts, w)
	cerrs := make([]error, w)
	parallel(w, w, func(k int) {
		counts[k], _ = NewCounts(fi)
		lo, hi := min(k*per*chunkValues, n), min((k+1)*per*chunkValues, n)
		if !cut {
			cerrs[k] = counts[k].Add(raw[lo*f.Size : hi*f.Size])
			return
		}
		if cerrs[k] = f.Symbols(fields[lo:hi], raw[lo*f.Size:hi*f.Size]); cerrs[k] == nil {
			counts[k].addFields(fields[lo:hi])
		}
	})
	if err := errors.Join(cerrs...); err != nil {
		return nil, err
	}
	for _, cs := range counts[1:] {
		counts[0].merge(cs)
		cs.Release()
	}
	pc, err := newPayloadCode(counts[0])
	counts[0].Release()
	if err != nil {
		return nil, err
	}
	encs := make([][]byte, chunks)
	errs := make([]error, chunks)
	parallel(chunks, workers, func(c int) {
		lo, hi := span(c)
		var s []byte
		if cut {
			s = fields[lo:hi] // each chunk's own: turned into symbols in place
		} else {
			buf := chunkSyms.Get().(*[codec.ChunkValues]byte)
			defer chunkSyms.Put(buf)
			s = buf[:hi-lo]
			if errs[c] = fieldsOf(f, s, raw[lo*f.Size:hi*f.Size]); errs[c] != nil {
				return
			}
		}
		if s, errs[c] = pc.toSymbols(s); errs[c] == nil {
			encs[c], errs[c] = EncodeChunk(nil, pc.code, s, pc.symbolBits())
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// The records: each chunk's other bits (BF16: a byte a value), then
	// its symbol chunk.
	ob := f.Other()
	olen := func(c int) int { lo, hi := span(c); return ((hi-lo)*ob + 7) / 8 }
	at := make([]uint64, chunks+1)
	for c := range encs {
		at[c+1] = at[c] + uint64(olen(c)) + uint64(len(encs[c]))
	}
	index := pc.records + at[chunks]
	total := index + 8*uint64(chunks+1)
	p := make([]byte, total)
	pc.putHead(p, index, total)
	parallel(chunks, workers, func(c int) {
		lo, hi := span(c)
		rec := p[pc.records+at[c] : pc.records+at[c+1]]
		k := olen(c)
		switch {
		case bf16:
			splitBF16(nil, rec[:k], raw[2*lo:2*hi])
		case k > 0: // packed straight into the payload, exactly its bytes
			packOthers(rec[:k], f, raw[lo*f.Size:hi*f.Size])
		}
		copy(rec[k:], encs[c])
	})
	for c := range chunks {
		binary.LittleEndian.PutUint64(p[index+8*uint64(c):], at[c])
	}
	pos := at[chunks]
	binary.LittleEndian.PutUint64(p[index+8*uint64(chunks):], pos)
	pc.putFlags(p[:pc.records], p[index:])
	binary.LittleEndian.PutUint32(p[offCRC:], codec.ChecksumParallel(p, workersOr(workers)))
	return p, nil
}

// MaxLen is the code length limit of entropy payloads: a decode table of
// 4,096 16-bit entries, 8 KiB of a GPU block's shared memory.
const MaxLen = 12

// ParsePayloadHeader decodes and checks the fixed header of p.
func ParsePayloadHeader(p []byte) (PayloadHeader, error) {
	var h PayloadHeader
	bad := func(format string, a ...any) (PayloadHeader, error) {
		return h, fmt.Errorf("%w: %s", ErrPayload, fmt.Sprintf(format, a...))
	}
	if len(p) < headerSize || string(p[:4]) != PayloadMagic {
		return bad("no %s header", PayloadMagic)
	}
	h.Version = int(binary.LittleEndian.Uint16(p[4:]))
	if h.Version < 1 || h.Version > PayloadVersion {
		return bad("version %d; this build reads versions 1 to %d", h.Version, PayloadVersion)
	}
	h.Pairs = h.Version == pairVersion
	h.Values = binary.LittleEndian.Uint64(p[8:])
	h.ChunkValues = binary.LittleEndian.Uint32(p[16:])
	h.Field, h.MaxLen, h.Lo = int(p[offFields]), int(p[offFields+1]), int(p[offFields+2])
	h.Count = int(binary.LittleEndian.Uint16(p[24:]))
	h.Others = binary.LittleEndian.Uint64(p[offOthers:])
	h.Symbols = binary.LittleEndian.Uint64(p[offSymbols:])
	h.Size = binary.LittleEndian.Uint64(p[offSize:])
	h.Checksum = binary.LittleEndian.Uint32(p[offCRC:])
	switch {
	case binary.LittleEndian.Uint16(p[6:]) != headerSize:
		return bad("header size %d", binary.LittleEndian.Uint16(p[6:]))
	case h.ChunkValues != codec.ChunkValues:
		return bad("%d values per chunk", h.ChunkValues)
	case h.Field >= len(Fields):
		return bad("field %d", h.Field)
	case h.MaxLen != MaxLen:
		return bad("code length limit %d", h.MaxLen)
	case h.Lo+h.Count > 1<<h.symbolBits() || h.Values > 0 && h.Count == 0:
		return bad("%d symbols from %d", h.Count, h.Lo)
	case p[offFields+3] != 0 || binary.LittleEndian.Uint16(p[26:]) != 0 || binary.LittleEndian.Uint32(p[28:]) != 0 ||
		h.Version == 1 && binary.LittleEndian.Uint32(p[offFlags:]) != 0 ||
		h.records() && binary.LittleEndian.Uint32(p[offFlags:])&^flagInPlace != 0:
		return bad("reserved fields are set")
	case h.Values > 1<<48:
		return bad("%d values", h.Values)
	}
	f := Fields[h.Field]
	index := h.headEnd()
	if h.records() {
		h.InPlace = binary.LittleEndian.Uint32(p[offFlags:])&flagInPlace != 0
		h.Index, h.Symbols = h.Symbols, 0
		records, ix := align16(index), 8*(h.Chunks()+1)
		if h.Others != records || h.Size < ix || h.Index != h.Size-ix || h.Index < h.Others {
			return bad("records at %d and index at %d of %d bytes, want %d and %d", h.Others, h.Index, h.Size, records, h.Size-min(ix, h.Size))
		}
		return h, nil
	}
	others := align16(index + 8*(h.Chunks()+1))
	otherBytes := (h.Values*uint64(f.Other()) + 7) / 8
	if h.Others != others || h.Symbols != align16(others+otherBytes) || h.Size < h.Symbols {
		return bad("sections at %d and %d of %d bytes, want %d and %d", h.Others, h.Symbols, h.Size, others, align16(others+otherBytes))
	}
	return h, nil
}

// maxChunkOverhead bounds the bytes a chunk's encoding takes beyond its
// symbols at one byte each: a mode byte and a raw chunk's last partial
// byte, or a coded chunk's header and lane lengths (smaller than raw, or
// the encoder stores it raw).
const maxChunkOverhead = 64

// chunkValues returns the values of chunk c.
func (h *PayloadHeader) chunkValues(c uint64) uint64 {
	cv := uint64(h.ChunkValues)
	return min(h.Values, (c+1)*cv) - c*cv
}

// spans returns where chunk c's other bits and symbol chunk lie in the
// payload, from the chunk index (offsets of entry c and c+1), and fails
// when they do not lie inside it in order.
func (h *PayloadHeader) spans(c, at, next uint64) (oLo, oHi, sLo, sHi uint64, err error) {
	f := Fields[h.Field]
	ob := uint64(f.Other())
	if h.Version == 1 {
		otherBytes := (h.Values*ob + 7) / 8
		oLo, oHi = h.Others+c*uint64(h.ChunkValues)*ob/8, h.Others+min(otherBytes, ((c*uint64(h.ChunkValues)+h.chunkValues(c))*ob+7)/8)
		sLo, sHi = h.Symbols+at, h.Symbols+next
		if at > next || next > h.Size-h.Symbols || next-at > h.chunkValues(c)+maxChunkOverhead {
			err = fmt.Errorf("%w: chunk %d at [%d, %d) of %d symbol bytes", ErrPayload, c, at, next, h.Size-h.Symbols)
		}
		return
	}
	o := (h.chunkValues(c)*ob + 7) / 8
	// No record is larger than its values and a little (the encoder
	// stores a chunk raw rather than let it grow), which bounds what a
	// decoder reads for a chunk whatever the index says.
	if at > next || next > h.Index-h.Others || next-at < o || next-at > h.chunkValues(c)*uint64(f.Size)+maxChunkOverhead {
		return 0, 0, 0, 0, fmt.Errorf("%w: chunk %d's record at [%d, %d) of %d record bytes, %d bytes of other bits", ErrPayload, c, at, next, h.Index-h.Others, o)
	}
	oLo = h.Others + at
	return oLo, oLo + o, oLo + o, h.Others + next, nil
}

// inPlace reports whether a version 2 or 3 payload of size bytes with chunk
// index at (entry c) decodes in place: it fits in its values, and no
// chunk's values overlap the record of an earlier chunk (see
// DecodeInPlace).
func (h *PayloadHeader) inPlace(at func(c uint64) uint64) bool {
	f := Fields[h.Field]
	out := h.Values * uint64(f.Size)
	if !h.records() || h.Size > out {
		return false
	}
	per := uint64(h.ChunkValues) * uint64(f.Size)
	for c := uint64(1); c < h.Chunks(); c++ {
		if h.Others+at(c) > c*per {
			return false
		}
	}
	return true
}

// chunkSyms holds the symbols of one chunk while Encode codes it.
var chunkSyms = sync.Pool{New: func() any { return new([codec.ChunkValues]byte) }}

// value returns value i of raw as an unsigned integer.
func value(f Field, raw []byte, i int) uint32 {
	switch f.Size {
	case 1:
		return uint32(raw[i])
	case 2:
		return uint32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return binary.LittleEndian.Uint32(raw[4*i:])
}

// workersOr returns workers, or GOMAXPROCS for 0 (or less).
func workersOr(workers int) int {
	if workers <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return workers
}

// parallel runs fn(0..n-1) on up to workers goroutines (0: GOMAXPROCS),
// each taking the next index from a counter (no hand-off a call); with
// one worker, or one call, on the caller's goroutine.
func parallel(n, workers int, fn func(int)) {
	if workers = min(workersOr(workers), n); workers <= 1 {
		for c := range n {
			fn(c)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < n; c = int(next.Add(1) - 1) {
				fn(c)
			}
		})
	}
	wg.Wait()
}

package entropy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/splitzip/splitzip/codec"
)

// The entropy payload (docs/splitzip.md, "Entropy payloads"):
//
//	 0  magic "SZEN"          32  u64 offset of the other bits
//	 4  u16 version (1)       40  u64 offset of the symbol chunks
//	 6  u16 header size (64)  48  u64 payload size
//	 8  u64 values            56  u32 CRC-32C, this field zero (codec.Checksum)
//	16  u32 values per chunk  60  u32 flags (0)
//	20  u8 field (index into Fields), u8 code length limit,
//	    u8 smallest symbol coded, u8 reserved
//	24  u16 symbols coded (from the smallest), u16 and u32 reserved
//	64  code lengths, 4 bits each, high nibble first
//	    chunk index: chunks+1 u64 offsets of each chunk's encoding from
//	    the symbol chunks' start (the last is their total size)
//	    (zero padding to 16)
//	    the other bits of every value, Field.Other() bits each, packed
//	    most significant bit first in value order (zero padding to 16)
//	    the symbol chunks (EncodeChunk), one after another
//
// A value is rebuilt from its symbol and its other bits: the bits below the
// field, the field, the bits above it.

// PayloadMagic starts every entropy payload.
const PayloadMagic = "SZEN"

// PayloadVersion is the entropy payload version this package writes.
const PayloadVersion = 1

const (
	headerSize = 64
	offFields  = 20
	offOthers  = 32
	offSymbols = 40
	offSize    = 48
	offCRC     = 56
	offFlags   = 60
)

// ErrPayload reports an entropy payload that is not one, or is damaged.
var ErrPayload = errors.New("corrupt entropy payload")

// PayloadHeader is the decoded fixed header of an entropy payload.
type PayloadHeader struct {
	Values      uint64
	ChunkValues uint32
	Field       int // index into Fields
	MaxLen      int
	Lo, Count   int // symbols Lo..Lo+Count-1 have code lengths
	Others      uint64
	Symbols     uint64
	Size        uint64
	Checksum    uint32
}

// table returns the decode table of the code lengths after the header at
// the start of head (nil for a payload of no values).
func (h *PayloadHeader) table(head []byte) (*Table, error) {
	if h.Values == 0 {
		return nil, nil
	}
	if uint64(len(head)) < uint64(headerSize+(h.Count+1)/2) {
		return nil, fmt.Errorf("%w: code lengths past the data", ErrPayload)
	}
	ls := make([]uint8, 1<<Fields[h.Field].Bits)
	for k := range h.Count {
		ls[h.Lo+k] = head[headerSize+k/2] >> (4 * (1 - k%2)) & 15
	}
	code, err := NewCode(ls, h.MaxLen)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPayload, err)
	}
	return NewTable(code), nil
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
	syms := make([]byte, n)
	freq := make([]uint64, 1<<f.Bits)
	var bf16Others []byte
	if f.DType == "BF16" && !f.Whole {
		// BF16: symbols and the other bits in one pass.
		bf16Others = make([]byte, n)
		splitBF16(syms, bf16Others, raw)
	} else if err := f.Symbols(syms, raw); err != nil {
		return nil, err
	}
	histogram(freq, syms)
	pc, err := newPayloadCode(fi, uint64(n), freq)
	if err != nil {
		return nil, err
	}
	code := pc.code
	chunkValues := codec.ChunkValues
	chunks := (n + chunkValues - 1) / chunkValues
	encs := make([][]byte, chunks)
	errs := make([]error, chunks)
	parallel(chunks, workers, func(c int) {
		encs[c], errs[c] = EncodeChunk(nil, code, syms[c*chunkValues:min(n, (c+1)*chunkValues)], f.Bits)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	indexOff, others, symbols := pc.indexOff, pc.others, pc.symbols
	var total uint64
	for _, e := range encs {
		total += uint64(len(e))
	}
	p := make([]byte, symbols+total)
	pc.putHead(p, uint64(len(p)))
	var pos uint64
	for c, e := range encs {
		binary.LittleEndian.PutUint64(p[indexOff+8*uint64(c):], pos)
		copy(p[symbols+pos:], e)
		pos += uint64(len(e))
	}
	binary.LittleEndian.PutUint64(p[indexOff+8*uint64(chunks):], pos)
	if bf16Others != nil {
		copy(p[others:], bf16Others)
	} else {
		bw := bitWriter{buf: p[others:others]}
		packInto(&bw, f, raw)
		bw.flush()
	}
	binary.LittleEndian.PutUint32(p[offCRC:], codec.Checksum(p))
	return p, nil
}

// payloadCode is a payload's code and the layout it implies.
type payloadCode struct {
	fi                        int
	n                         uint64
	code                      *Code
	lengths                   []uint8
	lo, count                 int    // the symbols with code lengths
	indexOff, others, symbols uint64 // where the sections start
}

// newPayloadCode builds the code of n values of field Fields[fi] whose
// symbol counts are freq, and lays out the payload's sections.
func newPayloadCode(fi int, n uint64, freq []uint64) (*payloadCode, error) {
	f := Fields[fi]
	ls, err := Lengths(freq, MaxLen)
	if err != nil {
		return nil, err
	}
	code, err := NewCode(ls, MaxLen)
	if err != nil {
		return nil, err
	}
	pc := &payloadCode{fi: fi, n: n, code: code, lengths: ls, count: 0}
	hi := -1
	for s, l := range ls {
		if l > 0 {
			if hi < 0 {
				pc.lo = s
			}
			hi = s
		}
	}
	pc.count = hi - pc.lo + 1
	chunks := (n + codec.ChunkValues - 1) / codec.ChunkValues
	pc.indexOff = uint64(headerSize) + uint64((pc.count+1)/2)
	pc.others = align16(pc.indexOff + 8*(chunks+1))
	pc.symbols = align16(pc.others + (n*uint64(f.Other())+7)/8)
	return pc, nil
}

// putHead writes the fixed header and the code lengths of a payload of
// size bytes into p (the checksum and the chunk index are the caller's).
func (pc *payloadCode) putHead(p []byte, size uint64) {
	copy(p, PayloadMagic)
	binary.LittleEndian.PutUint16(p[4:], PayloadVersion)
	binary.LittleEndian.PutUint16(p[6:], headerSize)
	binary.LittleEndian.PutUint64(p[8:], pc.n)
	binary.LittleEndian.PutUint32(p[16:], codec.ChunkValues)
	p[offFields], p[offFields+1], p[offFields+2] = byte(pc.fi), MaxLen, byte(pc.lo)
	binary.LittleEndian.PutUint16(p[24:], uint16(pc.count))
	binary.LittleEndian.PutUint64(p[offOthers:], pc.others)
	binary.LittleEndian.PutUint64(p[offSymbols:], pc.symbols)
	binary.LittleEndian.PutUint64(p[offSize:], size)
	for k := range pc.count {
		p[headerSize+k/2] |= pc.lengths[pc.lo+k] << (4 * (1 - k%2))
	}
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
	if v := binary.LittleEndian.Uint16(p[4:]); v != PayloadVersion {
		return bad("version %d; this build reads version %d", v, PayloadVersion)
	}
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
	case h.Lo+h.Count > 1<<Fields[h.Field].Bits || h.Values > 0 && h.Count == 0:
		return bad("%d symbols from %d", h.Count, h.Lo)
	case p[offFields+3] != 0 || binary.LittleEndian.Uint16(p[26:]) != 0 || binary.LittleEndian.Uint32(p[28:]) != 0 ||
		binary.LittleEndian.Uint32(p[offFlags:]) != 0:
		return bad("reserved fields are set")
	case h.Values > 1<<48:
		return bad("%d values", h.Values)
	}
	f := Fields[h.Field]
	index := uint64(headerSize) + uint64((h.Count+1)/2)
	others := align16(index + 8*(h.Chunks()+1))
	otherBytes := (h.Values*uint64(f.Other()) + 7) / 8
	if h.Others != others || h.Symbols != align16(others+otherBytes) || h.Size < h.Symbols {
		return bad("sections at %d and %d of %d bytes, want %d and %d", h.Others, h.Symbols, h.Size, others, align16(others+otherBytes))
	}
	return h, nil
}

// Decode checks payload p (header, checksum, tables) and decodes it into
// dst, which must hold exactly its values, on up to workers goroutines
// (0: GOMAXPROCS). A damaged payload is an error, never a read or write
// out of bounds.
func Decode(dst, p []byte, workers int) error {
	h, err := ParsePayloadHeader(p)
	if err != nil {
		return err
	}
	f := Fields[h.Field]
	switch {
	case uint64(len(p)) != h.Size:
		return fmt.Errorf("%w: %d bytes, header says %d", ErrPayload, len(p), h.Size)
	case codec.Checksum(p) != h.Checksum:
		return fmt.Errorf("%w: checksum mismatch", codec.ErrChecksum)
	case uint64(len(dst)) != h.Values*uint64(f.Size):
		return fmt.Errorf("%w: %d bytes for %d %s values", codec.ErrSize, len(dst), h.Values, f.DType)
	}
	tab, err := h.table(p)
	if err != nil {
		return err
	}
	chunks := int(h.Chunks())
	index := uint64(headerSize) + uint64((h.Count+1)/2)
	span := func(c int) (uint64, uint64) {
		return binary.LittleEndian.Uint64(p[index+8*uint64(c):]), binary.LittleEndian.Uint64(p[index+8*uint64(c+1):])
	}
	symBytes := h.Size - h.Symbols
	for c := range chunks {
		a, b := span(c)
		if a > b || b > symBytes {
			return fmt.Errorf("%w: chunk %d at [%d, %d) of %d symbol bytes", ErrPayload, c, a, b, symBytes)
		}
	}
	if chunks > 0 {
		if _, last := span(chunks - 1); last != symBytes {
			return fmt.Errorf("%w: chunks end at %d of %d symbol bytes", ErrPayload, last, symBytes)
		}
	}
	n := int(h.Values)
	syms := make([]byte, n)
	errs := make([]error, chunks)
	cv := int(h.ChunkValues)
	parallel(chunks, workers, func(c int) {
		a, b := span(c)
		src := p[h.Symbols+a : h.Symbols+b]
		lo, hi := c*cv, min(n, (c+1)*cv)
		sc := scratchPool.Get().(*chunkScratch)
		used, err := decodeChunk(tab, src, f.Bits, syms[lo:hi], sc)
		scratchPool.Put(sc)
		if err == nil && uint64(used) != b-a {
			err = fmt.Errorf("%w: %d bytes after its symbols", ErrStream, b-a-uint64(used))
		}
		if err != nil {
			errs[c] = fmt.Errorf("chunk %d: %w", c, err)
			return
		}
		// The chunk's values while its symbols are in cache; a chunk's
		// other bits start on a byte (16,384 values of any width).
		ob := uint64(f.Other())
		unpackValues(dst[lo*f.Size:hi*f.Size], f, p[h.Others+uint64(lo)*ob/8:h.Symbols], syms[lo:hi])
	})
	return errors.Join(errs...)
}

// unpackValues rebuilds the values from their symbols and other bits.
func unpackValues(dst []byte, f Field, others, syms []byte) {
	ob := f.Other()
	if f.DType == "BF16" && !f.Whole { // a byte of other bits a value: sign, 7 of mantissa
		others = others[:len(syms)]
		dst = dst[:2*len(syms)]
		// Eight values at a time, bytes side by side in 64-bit words: a
		// value's high byte is its sign and the exponent's top 7 bits,
		// its low byte the exponent's low bit and 7 of mantissa.
		i := 0
		for ; i+8 <= len(syms); i += 8 {
			sy := binary.LittleEndian.Uint64(syms[i:])
			o := binary.LittleEndian.Uint64(others[i:])
			hi := o&0x8080808080808080 | sy>>1&0x7f7f7f7f7f7f7f7f
			lo := sy<<7&0x8080808080808080 | o&0x7f7f7f7f7f7f7f7f
			binary.LittleEndian.PutUint64(dst[2*i:], spread(uint32(lo))|spread(uint32(hi))<<8)
			binary.LittleEndian.PutUint64(dst[2*i+8:], spread(uint32(lo>>32))|spread(uint32(hi>>32))<<8)
		}
		for ; i < len(syms); i++ {
			o := uint16(others[i])
			binary.LittleEndian.PutUint16(dst[2*i:], o&0x80<<8|uint16(syms[i])<<7|o&0x7f)
		}
		return
	}
	br := bitReader{buf: others}
	for i, s := range syms {
		var o uint32
		switch {
		case ob == 0:
		case ob == 8:
			o = uint32(others[i])
		default:
			v, _ := br.read(ob) // the header check bounds the section
			o = uint32(v)
		}
		v := uint32(s)
		if !f.Whole {
			v = o>>f.Shift<<(f.Shift+f.Bits) | v<<f.Shift | o&(1<<f.Shift-1)
		}
		switch f.Size {
		case 1:
			dst[i] = byte(v)
		case 2:
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
		case 4:
			binary.LittleEndian.PutUint32(dst[4*i:], v)
		}
	}
}

// histogram adds the counts of syms to freq, a table of at most 256,
// through four tables so that runs of one symbol do not serialize on one
// counter; blocks of 2^30 symbols keep each table's counts in 32 bits.
func histogram(freq []uint64, syms []byte) {
	var t [4][256]uint32
	for len(syms) > 0 {
		b := syms[:min(len(syms), 1<<30)]
		syms = syms[len(b):]
		i := 0
		for ; i+4 <= len(b); i += 4 {
			t[0][b[i]]++
			t[1][b[i+1]]++
			t[2][b[i+2]]++
			t[3][b[i+3]]++
		}
		for ; i < len(b); i++ {
			t[0][b[i]]++
		}
		flushHistogram(freq, &t)
	}
}

func flushHistogram(freq []uint64, t *[4][256]uint32) {
	for s := range freq {
		freq[s] += uint64(t[0][s]) + uint64(t[1][s]) + uint64(t[2][s]) + uint64(t[3][s])
		t[0][s], t[1][s], t[2][s], t[3][s] = 0, 0, 0, 0
	}
}

// spread moves the four bytes of x to the low bytes of four 16-bit lanes.
func spread(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

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

// parallel runs fn(0..n-1) on up to workers goroutines (0: GOMAXPROCS).
func parallel(n, workers int, fn func(int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for c := range next {
				fn(c)
			}
		})
	}
	for c := range n {
		next <- c
	}
	close(next)
	wg.Wait()
}

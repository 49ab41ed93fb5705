package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/splitzip/splitzip/codec/internal/crc32c"
)

// Sink receives a payload. The encoder writes the data sections in order,
// then the tables and the header at their places; it computes the
// checksum from the CRCs of the pieces as it writes them and reads
// nothing back.
type Sink interface {
	io.WriterAt
}

// segmentChunks is how many chunks an Encoder stages at a time at most.
const segmentChunks = 256

// maxChunkBytes is the largest stored chunk.
const maxChunkBytes = 2 * ChunkValues

// Encoder writes one tensor as a payload. Values arrive through Write in
// pieces that are whole chunks, except the last.
type Encoder struct {
	sink     Sink
	h        Header
	codes    [256]byte
	tab      *encTables
	opts     options
	chunk    uint64 // next chunk to encode
	pos      uint64 // next free payload offset
	l1       []uint64
	entries  []entry
	stage    []byte
	out      []byte
	lens     []uint64
	escs     []uint16
	crcs     []uint32 // of each staged chunk
	chunkCRC []uint32 // of every chunk's data
	scratch  [][]escape
	stats    Stats
	done     bool
}

// Stats describes an encoded payload.
type Stats struct {
	Size       uint64 // payload bytes
	Escapes    uint64 // escaped values in coded chunks
	RawChunks  uint64 // chunks stored raw
	Chunks     uint64
	InPlace    bool  // the payload is decodable in place
	NotInPlace error // why it is not, when it is not
}

type escape struct {
	pos uint16
	exp byte
}

// NewEncoder starts a payload for a tensor of n values with codebook cb.
func NewEncoder(sink Sink, n uint64, cb Codebook, opts ...Option) (*Encoder, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if n > MaxValues {
		return nil, fmt.Errorf("%w: %d values, at most %d", ErrTooLarge, n, MaxValues)
	}
	if !cb.valid() {
		return nil, fmt.Errorf("codec: codebook entries are not distinct: %v", cb)
	}
	e := &Encoder{sink: sink, opts: o, codes: cb.codeTable(), tab: newEncTables(&cb)}
	e.h = Header{Values: n, ChunkValues: ChunkValues, GroupChunks: groupChunksFor(n), Codebook: cb}
	e.l1 = make([]uint64, e.h.Groups())
	e.entries = make([]entry, e.h.Chunks())
	e.chunkCRC = make([]uint32, e.h.Chunks())
	e.pos = e.h.DataStart()
	e.scratch = make([][]escape, o.workers)
	return e, nil
}

// Write encodes the next values (little-endian BF16, 2 bytes each). Every
// call but the one that completes the tensor must carry whole chunks.
func (e *Encoder) Write(values []byte) error {
	if e.done {
		return fmt.Errorf("codec: write after close")
	}
	if len(values)%2 != 0 {
		return fmt.Errorf("%w: odd byte count %d", ErrSize, len(values))
	}
	n := uint64(len(values) / 2)
	first := e.chunk * ChunkValues
	if first+n > e.h.Values {
		return fmt.Errorf("%w: %d values written past the %d declared", ErrSize, first+n-e.h.Values, e.h.Values)
	}
	if first+n < e.h.Values && n%ChunkValues != 0 {
		return fmt.Errorf("%w: a write must carry whole chunks of %d values", ErrSize, ChunkValues)
	}
	for len(values) > 0 {
		k := min(ceilDiv(uint64(len(values)/2), ChunkValues), segmentChunks)
		take := min(uint64(len(values)), k*2*ChunkValues)
		if err := e.writeSegment(values[:take], int(k)); err != nil {
			return err
		}
		values = values[take:]
	}
	return nil
}

// writeSegment encodes k chunks in parallel into the stage, then lays them
// out in order and writes them with one call.
func (e *Encoder) writeSegment(values []byte, k int) error {
	if len(e.stage) < k*maxChunkBytes {
		e.stage = make([]byte, k*maxChunkBytes)
		e.lens = make([]uint64, k)
		e.escs = make([]uint16, k)
		e.crcs = make([]uint32, k)
	}
	encode := func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			src := values[i*2*ChunkValues : min(len(values), (i+1)*2*ChunkValues)]
			stage := e.stage[i*maxChunkBytes : (i+1)*maxChunkBytes]
			e.lens[i], e.escs[i], e.scratch[w] = encodeChunk(stage, src, &e.codes, e.tab, e.scratch[w])
			e.crcs[i] = crc32c.Checksum(stage[:e.lens[i]])
		}
	}
	parallel(e.opts.workers, k, encode)

	// Lay out: a group starts with its entry table, filled in by Close.
	start := e.pos
	end := start
	for i := range k {
		c := e.chunk + uint64(i)
		if g, j := e.h.group(c); j == 0 {
			_, cnt := e.h.groupSpan(g)
			e.l1[g] = end
			end += align(EntrySize * cnt)
		}
		e.entries[c] = entry{Offset: end, Escapes: e.escs[i]}
		e.chunkCRC[c] = e.crcs[i]
		end += e.lens[i]
	}
	// An in-memory sink is laid out directly; others through e.out.
	var out []byte
	if b, ok := e.sink.(*Buffer); ok {
		out = b.extend(start, end)
	} else {
		if uint64(cap(e.out)) < end-start {
			e.out = make([]byte, end-start)
		}
		out = e.out[:end-start]
	}
	// Entry tables are written by Close; keep their bytes deterministic.
	for i := range k {
		c := e.chunk + uint64(i)
		if g, j := e.h.group(c); j == 0 {
			clear(out[e.l1[g]-start : e.entries[c].Offset-start])
		}
	}
	for i := range k {
		c := e.chunk + uint64(i)
		off := e.entries[c].Offset - start
		copy(out[off:], e.stage[i*maxChunkBytes:uint64(i*maxChunkBytes)+e.lens[i]])
		if e.escs[i] == RawEscapes {
			e.stats.RawChunks++
		} else {
			e.stats.Escapes += uint64(e.escs[i])
		}
	}
	if _, ok := e.sink.(*Buffer); !ok {
		if _, err := e.sink.WriteAt(out, int64(start)); err != nil {
			return err
		}
	}
	e.pos = end
	e.chunk += uint64(k)
	return nil
}

// Close writes the tables, the header and the checksum. A payload that
// breaks the in-place invariant is still complete and valid; its header
// lacks FlagInPlace and Stats says why.
func (e *Encoder) Close() (Header, error) {
	if e.done {
		return e.h, fmt.Errorf("codec: close twice")
	}
	e.done = true
	if e.chunk != e.h.Chunks() {
		return e.h, fmt.Errorf("%w: %d of %d values written", ErrSize, min(e.chunk*ChunkValues, e.h.Values), e.h.Values)
	}
	e.h.Size = e.pos
	e.h.Escapes = e.stats.Escapes
	e.stats.Size = e.pos
	e.stats.Chunks = e.h.Chunks()
	if err := computeReaders(&e.h, e.l1, e.entries); err != nil {
		if !errors.Is(err, ErrNotInPlace) {
			return e.h, err
		}
		e.stats.NotInPlace = err
	} else {
		e.h.InPlace = true
	}
	e.stats.InPlace = e.h.InPlace
	// The header and group table, then each group's entries and chunks,
	// in file order, with their CRCs combined as they go.
	head := make([]byte, e.h.DataStart())
	e.h.put(head)
	for g, off := range e.l1 {
		binary.LittleEndian.PutUint64(head[HeaderSize+8*g:], off)
	}
	sum := crc32c.Checksum(head)
	lenPow := map[uint64]uint32{}
	combine := func(crcB uint32, n uint64) {
		p, ok := lenPow[n]
		if !ok {
			p = crc32c.Shift(n)
			lenPow[n] = p
		}
		sum = crc32c.CombineShift(sum, crcB, p)
	}
	for g, off := range e.l1 {
		first, cnt := e.h.groupSpan(uint64(g))
		tab := make([]byte, align(EntrySize*cnt))
		for i := range cnt {
			e.entries[first+i].put(tab[i*EntrySize:])
		}
		if _, err := e.sink.WriteAt(tab, int64(off)); err != nil {
			return e.h, err
		}
		combine(crc32c.Checksum(tab), uint64(len(tab)))
		for c := first; c < first+cnt; c++ {
			combine(e.chunkCRC[c], chunkLen(e.h.chunkCount(c), e.entries[c].Escapes))
		}
	}
	if _, err := e.sink.WriteAt(head, 0); err != nil {
		return e.h, err
	}
	e.h.Checksum = sum
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], sum)
	if _, err := e.sink.WriteAt(b[:], offChecksum); err != nil {
		return e.h, err
	}
	return e.h, nil
}

// Stats returns what the encoder wrote; complete after Close.
func (e *Encoder) Stats() Stats { return e.stats }

// encodeChunk encodes the values in src into dst (at least align(len(src))
// bytes) and returns the stored length and the escape count, RawEscapes
// when the chunk is stored raw. esc is scratch space, returned for reuse.
func encodeChunk(dst, src []byte, codes *[256]byte, tab *encTables, esc []escape) (uint64, uint16, []escape) {
	cnt := len(src) / 2
	limit := maxCodedEscapes(cnt)
	if limit < 0 {
		return storeRaw(dst, src), RawEscapes, esc
	}
	nibOff := nibOffset(cnt)
	sm := dst[:cnt]
	nib := dst[nibOff : nibOff+uint64(cnt+1)/2]
	esc = esc[:0]
	i := 0
	for i+8 <= cnt {
		if n := encodeGroups(sm[i:], nib[i/2:], src[2*i:], tab); n > 0 {
			i += n
			continue
		}
		// A group with escapes, or the last values: eight at a time.
		in := (*[16]byte)(src[2*i:])
		x := binary.LittleEndian.Uint64(in[:8])
		y := binary.LittleEndian.Uint64(in[8:])
		binary.LittleEndian.PutUint64(sm[i:], uint64(signMantissa(x))|uint64(signMantissa(y))<<32)
		c0, c1, c2, c3 := codes[byte(x>>7)], codes[byte(x>>23)], codes[byte(x>>39)], codes[byte(x>>55)]
		c4, c5, c6, c7 := codes[byte(y>>7)], codes[byte(y>>23)], codes[byte(y>>39)], codes[byte(y>>55)]
		if (c0|c1|c2|c3|c4|c5|c6|c7)&escapeCode != 0 {
			cs := [8]byte{c0, c1, c2, c3, c4, c5, c6, c7}
			for j := range cs {
				if cs[j]&escapeCode != 0 {
					w := x
					if j >= 4 {
						w = y
					}
					esc = append(esc, escape{uint16(i + j), byte(w >> (16*(j%4) + 7))})
					cs[j] = 0
				}
			}
			if len(esc) > limit {
				return storeRaw(dst, src), RawEscapes, esc
			}
			c0, c1, c2, c3, c4, c5, c6, c7 = cs[0], cs[1], cs[2], cs[3], cs[4], cs[5], cs[6], cs[7]
		}
		binary.LittleEndian.PutUint32(nib[i/2:], uint32(c0)|uint32(c1)<<4|uint32(c2)<<8|uint32(c3)<<12|
			uint32(c4)<<16|uint32(c5)<<20|uint32(c6)<<24|uint32(c7)<<28)
		i += 8
	}
	for ; i < cnt; i++ {
		v := binary.LittleEndian.Uint16(src[2*i:])
		sm[i] = byte(v>>8)&0x80 | byte(v)&0x7f
		c := codes[(v>>7)&0xff]
		if c&escapeCode != 0 {
			esc = append(esc, escape{uint16(i), byte(v >> 7)})
			c = 0
		}
		if i%2 == 0 {
			nib[i/2] = c
		} else {
			nib[i/2] |= c << 4
		}
	}
	if len(esc) > limit {
		return storeRaw(dst, src), RawEscapes, esc
	}
	escOff := escOffset(cnt)
	n := escOff + align(3*uint64(len(esc)))
	clear(dst[cnt:nibOff])
	clear(dst[nibOff+uint64(len(nib)) : escOff])
	for j, x := range esc {
		binary.LittleEndian.PutUint16(dst[escOff+2*uint64(j):], x.pos)
		dst[escOff+2*uint64(len(esc))+uint64(j)] = x.exp
	}
	clear(dst[escOff+3*uint64(len(esc)) : n])
	return n, uint16(len(esc)), esc
}

// signMantissa packs the sign and mantissa bytes of four BF16 values.
func signMantissa(x uint64) uint32 {
	y := (x>>8)&0x0080008000800080 | x&0x007F007F007F007F
	y = (y | y>>8) & 0x0000FFFF0000FFFF
	return uint32(y | y>>16)
}

func storeRaw(dst, src []byte) uint64 {
	n := align(uint64(len(src)))
	copy(dst, src)
	clear(dst[len(src):n])
	return n
}

// parallel runs fn over [0, n) split into at most workers contiguous ranges.
func parallel(workers, n int, fn func(w, lo, hi int)) {
	workers = min(workers, n)
	if workers <= 1 {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*n/workers, (w+1)*n/workers
		wg.Go(func() { fn(w, lo, hi) })
	}
	wg.Wait()
}

// Buffer is an in-memory Sink.
type Buffer struct{ b []byte }

// WriteAt writes p at off, growing the buffer as needed.
func (b *Buffer) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(b.b) {
		if end > cap(b.b) {
			nb := make([]byte, end, max(end, 2*cap(b.b)))
			copy(nb, b.b)
			b.b = nb
		}
		b.b = b.b[:end]
	}
	return copy(b.b[off:], p), nil
}

// extend grows the buffer to end bytes and returns bytes [start, end).
func (b *Buffer) extend(start, end uint64) []byte {
	if end > uint64(len(b.b)) {
		var zero [1]byte
		b.WriteAt(zero[:], int64(end-1))
	}
	return b.b[start:end]
}

// ReadAt reads len(p) bytes at off.
func (b *Buffer) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b.b)) {
		return 0, io.EOF
	}
	n := copy(p, b.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Bytes returns the buffer's contents.
func (b *Buffer) Bytes() []byte { return b.b }

// Encode encodes a whole tensor held in memory with the codebook of its own
// histogram.
func Encode(values []byte, opts ...Option) ([]byte, Stats, error) {
	if len(values)%2 != 0 {
		return nil, Stats{}, fmt.Errorf("%w: odd byte count %d", ErrSize, len(values))
	}
	var h Histogram
	h.Add(values)
	var buf Buffer
	buf.b = make([]byte, 0, len(values)*3/4+len(values)/64+4096)
	enc, err := NewEncoder(&buf, uint64(len(values)/2), NewCodebook(&h), opts...)
	if err != nil {
		return nil, Stats{}, err
	}
	if err := enc.Write(values); err != nil {
		return nil, Stats{}, err
	}
	if _, err := enc.Close(); err != nil {
		return nil, enc.Stats(), err
	}
	return buf.Bytes(), enc.Stats(), nil
}

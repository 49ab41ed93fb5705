package entropy

// Chunks of symbols: the decode table, coding a chunk's symbols into
// interleaved lanes (chunk_decode.go reads them back), and the bit writer.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Lanes is the most interleaved bitstreams a chunk's symbols are coded
// into: symbol i goes to lane i mod L, so the threads of a warp each
// decode one lane, with no serial scan across the chunk.
const Lanes = 32

// ErrStream reports a chunk that does not decode to the symbols it
// should: short, a bit pattern no code has, or lane lengths that do not
// add up.
var ErrStream = errors.New("corrupt entropy-coded chunk")

// Table is a decode table of 2^MaxLen entries: entry v, for the next
// MaxLen bits of a lane read as a number, is the symbol whose code starts
// those bits in its low byte and the code's length above it (0: no code
// starts so).
type Table struct {
	MaxLen  int
	Entries []uint16
	// multi, for MaxLen tables, decodes several symbols a lookup; it is
	// built on the first chunk that uses it (full, or of partialLanesMin
	// symbols and more: a small tensor has none).
	multiOnce  sync.Once
	multi      *multiTable
	multiBuilt atomic.Bool // multi is built (a chunk that is not full may then use it)
	single     bool        // one symbol a lookup only (the reference path, tests)
	pooled     bool        // its tables are the pools' (pooledTable)
	// pairs, for a version 3 payload, is each symbol's two fields (first
	// | second<<8).
	pairs *[MaxSymbols]uint16
}

// multiTable returns t's several-symbols table, building it once, or nil
// for a table of another length limit.
func (t *Table) multiTable() *multiTable {
	if t.single || t.MaxLen != MaxLen || len(t.Entries) != 1<<MaxLen {
		return nil
	}
	t.multiOnce.Do(func() {
		var mt *multiTable
		if t.pooled {
			mt = multiPool.Get().(*multiTable)
		}
		t.multi = newMultiTable(t.Entries, mt)
		t.multiBuilt.Store(true)
	})
	return t.multi
}

// entriesPool and multiPool hold the tables of payloads decoded whole
// (pooledTable, release): a small tensor's payload then allocates none
// of its 24 KiB of tables.
var (
	entriesPool = sync.Pool{New: func() any { return new([1 << MaxLen]uint16) }}
	multiPool   = sync.Pool{New: func() any { return new(multiTable) }}
)

// pooledTable is NewTable of a MaxLen code with its tables from the
// pools; give them back with release once nothing decodes with it.
func pooledTable(c *Code) *Table {
	if c.MaxLen != MaxLen {
		return NewTable(c)
	}
	e := entriesPool.Get().(*[1 << MaxLen]uint16)
	clear(e[:])
	t := &Table{MaxLen: MaxLen, Entries: e[:], pooled: true}
	t.fill(c)
	return t
}

// release gives a pooledTable's tables back; t is unusable after it.
func (t *Table) release() {
	if t == nil || !t.pooled {
		return
	}
	entriesPool.Put((*[1 << MaxLen]uint16)(t.Entries))
	if t.multi != nil {
		multiPool.Put(t.multi)
	}
	t.Entries, t.multi, t.pooled = nil, nil, false
}

// NewTable returns c's decode table.
func NewTable(c *Code) *Table {
	t := &Table{MaxLen: c.MaxLen, Entries: make([]uint16, 1<<c.MaxLen)}
	t.fill(c)
	return t
}

// fill writes c's entries into t's (zeros where no code starts).
func (t *Table) fill(c *Code) {
	for s := range MaxSymbols {
		l := int(c.Lengths[s])
		if l == 0 {
			continue
		}
		lo := c.Codes[s] << (c.MaxLen - l)
		e := uint16(s) | uint16(l)<<8
		fillDoubling(t.Entries[lo:lo+1<<(c.MaxLen-l)], e)
	}
}

// fillDoubling sets every element of s to e: a short run an element a
// store, a long one by copying each filled prefix after itself, so that
// memmove's wide stores write most of it.
func fillDoubling[E uint16 | uint32](s []E, e E) {
	k := min(len(s), 16)
	for i := range s[:k] {
		s[i] = e
	}
	for ; k < len(s); k *= 2 {
		copy(s[k:], s[:k])
	}
}

// Chunk modes, the first byte of an encoded chunk.
const (
	ModeRaw      = 0 // the symbols, Bits bits each, packed
	ModeConstant = 1 // every symbol is the next byte
	ModeCoded    = 2 // lanes of the code (see EncodeChunk)
)

// lanesFor is the lanes of a coded chunk of n symbols: one per 128
// symbols, at most Lanes, so a small chunk pays for few lane lengths.
func lanesFor(n int) int { return max(1, min(Lanes, (n+127)/128)) }

// EncodeChunk appends to dst the chunk of syms (symbols of bits bits each)
// in the smallest of three modes, and returns it. A coded chunk is
//
//	byte   mode (ModeCoded)
//	32 bits total: the bits of all lanes
//	5 bits  w: the width of a lane's deviation
//	L x w bits  each lane's bit length minus total/L, sign and magnitude
//	the lanes, bit-packed one after another
//
// all packed most significant bit first and padded to a byte; symbol i
// is in lane i mod L, L = lanesFor(len(syms)). A constant chunk is the mode
// and the symbol; a raw chunk the mode and the symbols packed.
func EncodeChunk(dst []byte, c *Code, syms []byte, bits int) ([]byte, error) {
	n := len(syms)
	if n == 0 {
		return append(dst, ModeRaw), nil
	}
	if constant(syms) {
		return append(dst, ModeConstant, syms[0]), nil
	}
	if bits < 1 || bits > 8 {
		return nil, fmt.Errorf("entropy: symbols of %d bits", bits)
	}
	tab, maxLen := codeTable(c, bits)
	L := lanesFor(n)
	var laneBits [Lanes]uint64
	var total uint64
	// A full chunk's lanes are summed with vector instructions where they
	// can be. Where they cannot (wide alphabets: FP8's whole bytes) and the
	// codes fit codeLanes, the lanes are coded first, into scratch, and
	// their lengths learnt on the way, then joined to the head
	// (appendLanes). Otherwise (and for a symbol of no code, to name it)
	// they are summed here.
	var lanes []byte
	var start uint64
	vec := L == Lanes && laneBitsVec(&tab, syms, &laneBits)
	if !vec && maxLen <= quadBits {
		sc := laneScratch.Get().(*[]byte)
		defer laneScratch.Put(sc)
		lanes, start, vec = codeLanesFirst(sc, &tab, syms, L, &laneBits)
	}
	for base := 0; !vec && base < n; base += L {
		for k, sym := range syms[base:min(n, base+L)] {
			e := tab[sym]
			if e == 0 {
				return nil, fmt.Errorf("%w: symbol %d has no code of %d bits", ErrCode, sym, bits)
			}
			laneBits[k&(Lanes-1)] += uint64(e & 31)
		}
	}
	for _, b := range laneBits[:L] {
		total += b
	}
	mean := total / uint64(L)
	var dev uint64
	for _, b := range laneBits[:L] {
		dev = max(dev, max(b, mean)-min(b, mean))
	}
	w := 1 + bitLen(dev)
	coded := headBits + uint64(w*L) + total
	if coded >= 8+uint64(bits*n) || total >= 1<<32 || w > 31 {
		bw := bitWriter{buf: append(dst, ModeRaw)}
		for _, s := range syms {
			bw.write(uint64(s), bits)
		}
		return bw.flush(), nil
	}
	bw := bitWriter{buf: append(dst, ModeCoded)}
	bw.write(total, 32)
	bw.write(uint64(w), 5)
	for _, b := range laneBits[:L] {
		if b >= mean {
			bw.write(b-mean, w)
		} else {
			bw.write(1<<(w-1)|(mean-b), w)
		}
	}
	size := len(dst) + int((coded+7)/8)
	if lanes != nil && (start%8 == 0 || uint64(bw.nbits) == start%8) {
		return appendLanes(bw, lanes, start, size), nil
	}
	if bits <= joinBits && n >= 4*L && maxLen <= joinLen {
		// Symbols of at most joinBits bits (F16's exponents, FP8's): two
		// of a lane coded with one lookup of their joined code, where the
		// lanes are long enough to pay for the table.
		var joined [1 << (2 * joinBits)]uint32
		joinTable(&joined, &tab, uint(bits))
		return encodeJoined(bw, &tab, &joined, uint(bits), syms, L, size), nil
	}
	return encodeLanes(bw, &tab, syms, L, size, maxLen), nil
}

// laneScratch holds codeLanesFirst's buffers.
var laneScratch = sync.Pool{New: func() any { return new([]byte) }}

// A coded chunk's head is headBits plus w bits a lane; for L a multiple of
// 8 it ends headPhase bits into a byte whatever w is, so codeLanesFirst
// codes such a chunk's lanes at that bit of a byte, after headRoom bytes
// (room for the longest head), and the head is joined to them without
// shifting them.
const (
	headBits  = 8 + 32 + 5
	headPhase = headBits % 8
	headRoom  = (headBits + 31*Lanes + 7) / 8
)

// codeLanesFirst codes lanes 0..L-1 of syms into a buffer it takes from
// *sc (growing it) and sets laneBits to each lane's length. It returns
// the buffer, in which the lanes start at bit 0 or, for L a multiple of
// 8, at bit headPhase of byte headRoom (then before them, from bit 0 of
// that byte, headPhase zero bits), followed by zeros to a whole 8 bytes
// past their end; the bit they start at; and true, or false when a
// symbol has no code (codes of at most quadBits bits).
func codeLanesFirst(sc *[]byte, tab *[MaxSymbols]uint32, syms []byte, L int, laneBits *[Lanes]uint64) ([]byte, uint64, bool) {
	need := headRoom + (quadBits*len(syms)+7)/8 + 16
	if cap(*sc) < need {
		*sc = make([]byte, need)
	}
	out := (*sc)[:need]
	pos, nb := 0, uint(0)
	if L%8 == 0 {
		pos, nb = headRoom, headPhase
	}
	start := 8*uint64(pos) + uint64(nb)
	var ends [Lanes]uint64
	pos, acc, nb, ok := codeLanes(out, pos, 0, nb, tab, syms, L, &ends)
	if !ok {
		return nil, 0, false
	}
	prev := start
	for k, e := range ends[:L] {
		laneBits[k], prev = e-prev, e
	}
	clear(out[pos : pos+9])
	flushBits(out, pos, acc, nb)
	return out[:pos+9], start, true
}

// appendLanes appends to the head in bw the lanes codeLanesFirst coded,
// starting at bit start of lanes, to make a chunk that ends at byte size:
// joined at the byte they share where the head ends where the lanes start
// in a byte (start%8 bits pending in bw), otherwise (start a whole byte)
// shifted in 64 bits a step.
func appendLanes(bw bitWriter, lanes []byte, start uint64, size int) []byte {
	if uint64(bw.nbits) == start%8 && start%8 != 0 {
		at := int(start / 8)
		out := slices.Grow(bw.buf, size-len(bw.buf))
		out = append(out, lanes[at]|byte(bw.acc<<(8-bw.nbits)))
		return append(out, lanes[at+1:at+size-len(bw.buf)]...)
	}
	out := slices.Grow(bw.buf, size+8-len(bw.buf))[:size+8]
	pos := len(bw.buf)
	nb := uint(bw.nbits) // < 8
	pend := bw.acc & (1<<nb - 1)
	for i := int(start / 8); pos < size; i += 8 {
		v := binary.BigEndian.Uint64(lanes[i : i+8])
		binary.BigEndian.PutUint64(out[pos:pos+8], pend<<(64-nb)|v>>nb)
		pend = v & (1<<nb - 1)
		pos += 8
	}
	return out[:size]
}

// codeTable returns each symbol's code and length in one word, code<<5 |
// length (0 for a symbol with no code, or wider than bits), and the
// longest code's length.
func codeTable(c *Code, bits int) (tab [MaxSymbols]uint32, maxLen int) {
	for sym := range 1 << bits {
		if l := c.Lengths[sym]; l > 0 {
			tab[sym] = c.Codes[sym]<<5 | uint32(l)
			maxLen = max(maxLen, int(l))
		}
	}
	return tab, maxLen
}

// joinBits is the widest symbols whose codes are joined two at a time, and
// joinLen the longest code they may have: a pair's code and its length
// (5 bits) fit a 32-bit table entry.
const (
	joinBits = 5
	joinLen  = 13
)

// joinTable fills joined[a<<bits|b] with the joined code of symbols a and
// b, as tab holds single ones: code<<5 | length (at most 2 x MaxLen bits).
// A pair with a symbol of no code is left 0 (EncodeChunk has refused such
// a symbol before it codes the lanes).
func joinTable(joined *[1 << (2 * joinBits)]uint32, tab *[MaxSymbols]uint32, bits uint) {
	for a := range uint32(1) << bits {
		ea := tab[a]
		if ea == 0 {
			continue
		}
		for b := range uint32(1) << bits {
			if eb := tab[b]; eb != 0 {
				joined[a<<bits|b] = (ea>>5<<(eb&31)|eb>>5)<<5 | (ea&31 + eb&31)
			}
		}
	}
}

// encodeLanes appends lanes 0..L-1 of syms (symbol i in lane i mod L),
// each code from tab, to the chunk's first bits in bw, and returns the
// chunk, which ends at byte size of the slice. Codes of at most quadBits
// bits (maxLen, the longest in tab) are joined four at a time and written
// with one 64-bit store and no branch; longer ones a 32-bit word at a time.
func encodeLanes(bw bitWriter, tab *[MaxSymbols]uint32, syms []byte, L, size, maxLen int) []byte {
	if maxLen > quadBits {
		return encodeLanesWide(bw, tab, syms, L, size)
	}
	pos := len(bw.buf)
	out := slices.Grow(bw.buf, max(size+8, pos+(quadBits*len(syms)+7)/8+16)-pos)
	out = out[:cap(out)]
	var ends [Lanes]uint64
	pos, acc, nb, _ := codeLanes(out, pos, bw.acc, uint(bw.nbits), tab, syms, L, &ends)
	flushBits(out, pos, acc, nb)
	return out[:size]
}

// codeLanesGo codes lanes 0..L-1 of syms (codes of at most quadBits bits)
// after the nb (< 8) bits pending in acc, whole bytes written to out up to
// pos, which has 8 bytes of room past the last; it sets ends[k] to the
// bit (from out's start) where lane k ends, and returns the state to
// flush and whether every symbol had a code. acc's bits above the nb
// pending ones are never written; nb < 8 between groups of four.
func codeLanesGo(out []byte, pos int, acc uint64, nb uint, tab *[MaxSymbols]uint32, syms []byte, L int, ends *[Lanes]uint64) (int, uint64, uint, bool) {
	n := len(syms)
	// A symbol of no code has entry 0, which sets miss's top bit; every
	// other entry is under 2^31.
	var miss uint32
	for lane := range L {
		i := lane
		for ; i+3*L < n; i += 4 * L {
			e3 := tab[syms[i+3*L]]
			e0, e1, e2 := tab[syms[i]], tab[syms[i+L]], tab[syms[i+2*L]]
			miss |= (e0 - 1) | (e1 - 1) | (e2 - 1) | (e3 - 1)
			acc = acc<<(e0&31) | uint64(e0>>5)
			acc = acc<<(e1&31) | uint64(e1>>5)
			acc = acc<<(e2&31) | uint64(e2>>5)
			acc = acc<<(e3&31) | uint64(e3>>5)
			nb += uint(e0&31 + e1&31 + e2&31 + e3&31)
			pos, nb = putBits(out, pos, acc, nb)
		}
		for ; i < n; i += L {
			e := tab[syms[i]]
			miss |= e - 1
			acc = acc<<(e&31) | uint64(e>>5)
			pos, nb = putBits(out, pos, acc, nb+uint(e&31))
		}
		ends[lane&(Lanes-1)] = 8*uint64(pos) + uint64(nb)
	}
	return pos, acc, nb, miss>>31 == 0
}

// quadBits is the longest code encodeLanes joins four of in its
// accumulator: 4 x 14 bits and 7 pending fit 64.
const quadBits = 14

// putBits writes the nb (at most 64) bits pending in acc's low bits to out
// from byte pos with one 8-byte store (out must have 8 bytes from pos; the
// bytes after the pending bits are written zero) and returns the position
// of the byte that holds the nb&7 bits still pending, and their count.
func putBits(out []byte, pos int, acc uint64, nb uint) (int, uint) {
	binary.BigEndian.PutUint64(out[pos:pos+8], acc<<(64-nb))
	return pos + int(nb>>3), nb & 7
}

// encodeLanesWide is encodeLanes for codes longer than quadBits.
func encodeLanesWide(bw bitWriter, tab *[MaxSymbols]uint32, syms []byte, L, size int) []byte {
	out := slices.Grow(bw.buf, size-len(bw.buf))[:size]
	pos := len(bw.buf)
	acc, nb := bw.acc, uint(bw.nbits)
	for lane := range L {
		for i := lane; i < len(syms); i += L {
			pos, acc, nb = appendCode(out, pos, acc, nb, tab[syms[i]])
		}
	}
	flushBits(out, pos, acc, nb)
	return out
}

// appendCode appends the code of e (code<<5 | length) to the nb bits
// pending in acc, writing out a 32-bit word at pos once there is one: nb
// stays under 32 between codes, and a code adds at most 31.
func appendCode(out []byte, pos int, acc uint64, nb uint, e uint32) (int, uint64, uint) {
	acc = acc<<(e&31) | uint64(e>>5)
	nb += uint(e & 31)
	if nb >= 32 {
		nb -= 32
		binary.BigEndian.PutUint32(out[pos:], uint32(acc>>nb))
		pos += 4
	}
	return pos, acc, nb
}

// encodeJoined is encodeLanes taking a lane's symbols two at a time from
// joined (symbols of bits bits, each with a code of at most joinLen bits),
// two joined codes a store.
func encodeJoined(bw bitWriter, tab *[MaxSymbols]uint32, joined *[1 << (2 * joinBits)]uint32, bits uint, syms []byte, L, size int) []byte {
	out := slices.Grow(bw.buf, size+8-len(bw.buf))[:size+8]
	pos := len(bw.buf)
	acc, nb := bw.acc, uint(bw.nbits)
	const mask = 1<<(2*joinBits) - 1
	n := len(syms)
	for lane := range L {
		i := lane
		for ; i+3*L < n; i += 4 * L {
			s3 := uint(syms[i+3*L])
			p0 := joined[(uint(syms[i])<<bits|uint(syms[i+L]))&mask]
			p1 := joined[(uint(syms[i+2*L])<<bits|s3)&mask]
			acc = acc<<(p0&31) | uint64(p0>>5)
			acc = acc<<(p1&31) | uint64(p1>>5)
			pos, nb = putBits(out, pos, acc, nb+uint(p0&31+p1&31))
		}
		for ; i < n; i += L {
			e := tab[syms[i]]
			acc = acc<<(e&31) | uint64(e>>5)
			pos, nb = putBits(out, pos, acc, nb+uint(e&31))
		}
	}
	flushBits(out, pos, acc, nb)
	return out[:size]
}

// flushBits writes the nb bits pending in acc's low bits to out from byte
// pos, the last byte padded with zeros.
func flushBits(out []byte, pos int, acc uint64, nb uint) {
	for nb >= 8 {
		nb -= 8
		out[pos] = byte(acc >> nb)
		pos++
	}
	if nb > 0 {
		out[pos] = byte(acc << (8 - nb))
	}
}

// bitWriter packs values most significant bit first.
type bitWriter struct {
	buf   []byte
	acc   uint64
	nbits int
}

func (w *bitWriter) write(v uint64, n int) {
	for n > 0 {
		k := min(n, 32)
		n -= k
		w.acc = w.acc<<k | (v>>n)&(1<<k-1)
		w.nbits += k
		for w.nbits >= 8 {
			w.nbits -= 8
			w.buf = append(w.buf, byte(w.acc>>w.nbits))
		}
		w.acc &= 1<<w.nbits - 1
	}
}

func (w *bitWriter) flush() []byte {
	for w.nbits >= 8 {
		w.nbits -= 8
		w.buf = append(w.buf, byte(w.acc>>w.nbits))
	}
	w.acc &= 1<<w.nbits - 1
	if w.nbits > 0 {
		w.buf = append(w.buf, byte(w.acc<<(8-w.nbits)))
	}
	return w.buf
}

func constant(b []byte) bool {
	for _, x := range b {
		if x != b[0] {
			return false
		}
	}
	return true
}

func bitLen(v uint64) int {
	n := 0
	for v > 0 {
		n++
		v >>= 1
	}
	return n
}

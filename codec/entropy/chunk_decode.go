package entropy

// Decoding a chunk: its mode, the lanes' lengths and the lanes (through
// the multi-symbol lane decoder for full chunks), and the bit reader.

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/splitzip/splitzip/codec"
)

// DecodeChunk decodes len(dst) symbols of bits bits from the chunk at the
// start of src and returns the bytes it took. It fails, never reading
// past src, when the chunk does not hold them.
func DecodeChunk(t *Table, src []byte, bits int, dst []byte) (int, error) {
	return decodeChunk(t, src, bits, dst, new(chunkScratch))
}

// chunkScratch is what decoding a chunk needs besides its input and
// output, kept across the chunks one goroutine decodes so that none is
// allocated or cleared a chunk.
type chunkScratch struct {
	pad   []byte
	lanes [Lanes * laneStride]byte
	// For Reader: a range's records, and a chunk's symbols.
	rec  []byte
	syms [codec.ChunkValues]byte
	// pairs holds a chunk's pair symbols before they are expanded.
	pairs [codec.ChunkValues / 2]byte
}

// scratchPool holds chunkScratch for the payload decoders.
var scratchPool = sync.Pool{New: func() any { return new(chunkScratch) }}

func decodeChunk(t *Table, src []byte, bits int, dst []byte, sc *chunkScratch) (int, error) {
	n := len(dst)
	if len(src) == 0 {
		return 0, fmt.Errorf("%w: no chunk", ErrStream)
	}
	br := bitReader{buf: src, pos: 8}
	switch src[0] {
	case ModeConstant:
		if len(src) < 2 || n == 0 {
			return 0, fmt.Errorf("%w: constant chunk of %d symbols", ErrStream, n)
		}
		if bits < 8 && src[1]>>bits != 0 {
			return 0, fmt.Errorf("%w: symbol %d wider than %d bits", ErrStream, src[1], bits)
		}
		for i := range dst {
			dst[i] = src[1]
		}
		return 2, nil
	case ModeRaw:
		for i := range dst {
			v, ok := br.read(bits)
			if !ok {
				return 0, fmt.Errorf("%w: raw chunk short", ErrStream)
			}
			dst[i] = byte(v)
		}
		return br.end(), nil
	case ModeCoded:
	default:
		return 0, fmt.Errorf("%w: mode %d", ErrStream, src[0])
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: coded chunk of no symbols", ErrStream)
	}
	total, ok1 := br.read(32)
	w64, ok2 := br.read(5)
	w := int(w64)
	if !ok1 || !ok2 || w == 0 {
		return 0, fmt.Errorf("%w: coded chunk header", ErrStream)
	}
	L := lanesFor(n)
	mean := total / uint64(L)
	var lensA [Lanes]uint64
	lens := lensA[:L]
	var sum uint64
	for k := range lens {
		d, ok := br.read(w)
		if !ok {
			return 0, fmt.Errorf("%w: lane lengths short", ErrStream)
		}
		mag := d &^ (1 << (w - 1))
		if d>>(w-1) != 0 {
			if mag > mean {
				return 0, fmt.Errorf("%w: lane %d length below zero", ErrStream, k)
			}
			lens[k] = mean - mag
		} else {
			lens[k] = mean + mag
		}
		sum += lens[k]
	}
	if sum != total || total > uint64(8*len(src))-uint64(br.pos) {
		return 0, fmt.Errorf("%w: lane lengths sum to %d of %d bits, %d bits left", ErrStream, sum, total, 8*len(src)-br.pos)
	}
	// Lanes are decoded side by side, a symbol of each in turn: their
	// codes are independent, so the processor overlaps them, and dst is
	// written in order.
	var pos, end [Lanes]int
	p := br.pos
	for k := range L {
		pos[k] = p
		p += int(lens[k])
		end[k] = p
	}
	entries := t.Entries
	shift := 64 - t.MaxLen
	mask := uint64(len(entries) - 1)
	// The lanes with 8 bytes of zeros after them, so that every load of 8
	// bytes is in bounds without a branch.
	need := p/8 + 1 + 8
	if cap(sc.pad) < need {
		sc.pad = make([]byte, need)
	}
	pad := sc.pad[:need]
	k := copy(pad, src[:min(len(src), p/8+1)])
	clear(pad[k:])
	base := 0
	// Only a full chunk, or one of partialLanesMin symbols, builds the
	// multi-symbol table (on first use: building it costs more than
	// decoding a small payload); any chunk of Lanes lanes (more than
	// 3,968 symbols, at most a full chunk's) takes it once it is built.
	if fullLanes(n, L) || L == Lanes && n <= Lanes*laneSyms && (n >= partialLanesMin || t.multiBuilt.Load()) {
		if mt := t.multiTable(); mt != nil {
			var err error
			if fullLanes(n, L) {
				err = decodeLanes(mt, (*[1 << MaxLen]uint16)(entries), pad, &pos, &end, dst, &sc.lanes, n/Lanes)
			} else {
				err = decodeLanesPartial(mt, (*[1 << MaxLen]uint16)(entries), pad, &pos, &end, dst, &sc.lanes, n)
			}
			if err != nil {
				return 0, err
			}
			br.pos = p
			return br.end(), nil
		}
	}
	if t.MaxLen == MaxLen && len(entries) == 1<<MaxLen {
		// Four symbols of each lane a load: 64 bits less at most 7 of
		// the byte hold 57, four codes at most 48. Checks per lane and
		// group: an entry of no code (length 0) or a lane read past its
		// end fails the chunk, whatever the symbols decoded meanwhile.
		tab := (*[1 << MaxLen]uint16)(entries)
		const sh = 64 - MaxLen
		for ; base+4*L <= n; base += 4 * L {
			// The group's four rows of L symbols, of one length, so that
			// their stores need no bounds checks.
			o0 := dst[base : base+L]
			o1 := dst[base+L : base+2*L][:len(o0)]
			o2 := dst[base+2*L : base+3*L][:len(o0)]
			o3 := dst[base+3*L : base+4*L][:len(o0)]
			for k := range o0 {
				q := pos[k]
				w := binary.BigEndian.Uint64(pad[q>>3:]) << (q & 7)
				// Shift counts masked to 6 bits, as the processor masks
				// them, so the compiler adds no check for counts of 64
				// and more: no code is longer than MaxLen (a table built
				// by hand with longer ones decodes wrongly, never outside
				// the lane: q is checked against its end).
				e0 := tab[w>>sh]
				w <<= e0 >> 8 & 63
				e1 := tab[w>>sh]
				w <<= e1 >> 8 & 63
				e2 := tab[w>>sh]
				w <<= e2 >> 8 & 63
				e3 := tab[w>>sh]
				o0[k], o1[k], o2[k], o3[k] = byte(e0), byte(e1), byte(e2), byte(e3)
				q += int(e0>>8 + e1>>8 + e2>>8 + e3>>8)
				// An entry below 0x100 has no code (length 0).
				if min(e0, e1, e2, e3) < 0x100 || q > end[k] {
					return 0, fmt.Errorf("%w: lane %d, symbols %d to %d", ErrStream, k, base+k, base+3*L+k)
				}
				pos[k] = q
			}
		}
	}
	for ; base < n; base += L {
		for k := range min(L, n-base) {
			q := pos[k]
			w := binary.BigEndian.Uint64(pad[q>>3:])
			// The next MaxLen bits, whatever follows the lane: a code
			// that fits the lane is found the same whatever comes after
			// it, and one that does not fit is an error either way.
			e := entries[(w<<(q&7))>>shift&mask]
			cl := int(e >> 8)
			if cl == 0 || q+cl > end[k] {
				return 0, fmt.Errorf("%w: lane %d, symbol %d", ErrStream, k, base+k)
			}
			dst[base+k] = byte(e)
			pos[k] = q + cl
		}
	}
	for k := range L {
		if pos[k] != end[k] {
			return 0, fmt.Errorf("%w: lane %d has %d bits past its symbols", ErrStream, k, end[k]-pos[k])
		}
	}
	br.pos = p
	return br.end(), nil
}

// bitReader reads bits most significant first from buf, from bit pos, up
// to bit limit (0: the end of buf).
type bitReader struct {
	buf        []byte
	pos, limit int
}

func (r *bitReader) lim() int {
	if r.limit > 0 {
		return min(r.limit, 8*len(r.buf))
	}
	return 8 * len(r.buf)
}

// peek returns the next n bits (n <= 32), zeros past the limit.
func (r *bitReader) peek(n int) uint64 {
	var b [8]byte
	i := r.pos / 8
	copy(b[:], r.buf[min(i, len(r.buf)):])
	v := binary.BigEndian.Uint64(b[:]) << (r.pos % 8) >> (64 - n)
	// Bits past the limit read as zero.
	if over := r.pos + n - r.lim(); over > 0 {
		v &^= 1<<min(over, n) - 1
	}
	return v
}

func (r *bitReader) read(n int) (uint64, bool) {
	if r.pos+n > r.lim() {
		return 0, false
	}
	v := r.peek(n)
	r.pos += n
	return v, true
}

// end returns the bytes read, the last one partly.
func (r *bitReader) end() int { return (r.pos + 7) / 8 }

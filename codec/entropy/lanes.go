package entropy

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Lanes is the number of interleaved bitstreams a chunk's symbols are
// coded into: symbol i goes to lane i mod Lanes, so the threads of a warp
// each decode one lane, with no serial scan across the chunk.
const Lanes = 32

// ErrStream reports lane data that does not decode to the symbols it
// should: a lane too short, a bit pattern no code has, or lengths that
// do not add up.
var ErrStream = errors.New("corrupt entropy-coded lanes")

// EncodeLanes codes syms with c into Lanes bitstreams, each a whole number
// of 32-bit words (codes most significant bit first, big-endian words,
// zero padding), and returns them one after another with each lane's
// length in words. Every symbol must have a code.
func EncodeLanes(c *Code, syms []byte) ([]byte, [Lanes]uint32, error) {
	var words [Lanes]uint32
	var out []byte
	for lane := range Lanes {
		var acc uint64 // bits not yet written, in the low acc bits
		nbits := 0
		start := len(out)
		for i := lane; i < len(syms); i += Lanes {
			s := syms[i]
			l := int(c.Lengths[s])
			if l == 0 {
				return nil, words, fmt.Errorf("%w: symbol %d has no code", ErrCode, s)
			}
			acc = acc<<l | uint64(c.Codes[s])
			nbits += l
			for nbits >= 32 {
				nbits -= 32
				out = binary.BigEndian.AppendUint32(out, uint32(acc>>nbits))
				acc &= 1<<nbits - 1
			}
		}
		if nbits > 0 {
			out = binary.BigEndian.AppendUint32(out, uint32(acc<<(32-nbits)))
		}
		words[lane] = uint32((len(out) - start) / 4)
	}
	return out, words, nil
}

// Table is a decode table of 2^MaxLen entries: entry v, for the next
// MaxLen bits of a lane read as a number, is the symbol whose code starts
// those bits in its low byte and the code's length above it (0: no code
// starts so).
type Table struct {
	MaxLen  int
	Entries []uint16
}

// NewTable returns c's decode table.
func NewTable(c *Code) *Table {
	t := &Table{MaxLen: c.MaxLen, Entries: make([]uint16, 1<<c.MaxLen)}
	for s := range MaxSymbols {
		l := int(c.Lengths[s])
		if l == 0 {
			continue
		}
		lo := c.Codes[s] << (c.MaxLen - l)
		for v := lo; v < lo+1<<(c.MaxLen-l); v++ {
			t.Entries[v] = uint16(s) | uint16(l)<<8
		}
	}
	return t
}

// DecodeLanes decodes n symbols from lanes laid out as EncodeLanes lays
// them out into dst (len n). It fails, without reading outside data, when
// the lanes do not hold them.
func DecodeLanes(t *Table, data []byte, words [Lanes]uint32, dst []byte) error {
	n := len(dst)
	pos := 0
	for lane := range Lanes {
		w := int(words[lane])
		if w < 0 || w > (len(data)-pos)/4 {
			return fmt.Errorf("%w: lane %d of %d words past the data", ErrStream, lane, w)
		}
		l := data[pos : pos+4*w]
		pos += 4 * w
		var acc uint64 // the next bits, left-aligned in acc
		have := 0      // valid bits in acc
		next := 0      // next byte of l to load
		for i := lane; i < n; i += Lanes {
			for have <= 56 && next < len(l) {
				acc |= uint64(l[next]) << (56 - have)
				have += 8
				next++
			}
			e := t.Entries[acc>>(64-t.MaxLen)]
			cl := int(e >> 8)
			if cl == 0 || cl > have {
				return fmt.Errorf("%w: lane %d, symbol %d", ErrStream, lane, i)
			}
			dst[i] = byte(e)
			acc <<= cl
			have -= cl
		}
		// What is left must be padding: under one word, all zero.
		rest := l[next:]
		if have+8*len(rest) >= 32 || acc != 0 || !allZero(rest) {
			return fmt.Errorf("%w: lane %d has bits past its symbols", ErrStream, lane)
		}
	}
	if pos != len(data) {
		return fmt.Errorf("%w: %d bytes after the lanes", ErrStream, len(data)-pos)
	}
	return nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

package entropy

// Histograms of a tensor's symbols, eight tables fed from 64-bit loads.

import (
	"encoding/binary"

	"github.com/splitzip/splitzip/codec"
)

// histogramBF16 adds the counts of the exponents of the BF16 values of raw
// to freq (256 counts): codec's exponent histogram.
func histogramBF16(freq []uint64, raw []byte) {
	var h codec.Histogram
	h.Add(raw)
	for e, n := range h {
		freq[e] += n
	}
}

// histogram adds the counts of syms to freq, a table of at most 256,
// through eight tables, a byte of each 64-bit load to each, so that runs
// of one symbol do not serialize on one counter (five times the rate of
// four tables and byte loads on N(0, 0.02) FP8 bytes and exponents, dev-2);
// blocks of 2^30 symbols keep each table's counts in 32 bits.
func histogram(freq []uint64, syms []byte) {
	var t hist8
	for len(syms) > 0 {
		b := syms[:min(len(syms), 1<<30)]
		syms = syms[len(b):]
		t.add(b)
		t.fold(freq)
	}
}

// hist8 is histogram's eight tables of 32-bit counts, kept across calls
// of add by a caller that folds them before 2^32 symbols.
type hist8 [8][256]uint32

// add counts syms.
func (t *hist8) add(b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		t[0][byte(v)]++
		t[1][byte(v>>8)]++
		t[2][byte(v>>16)]++
		t[3][byte(v>>24)]++
		t[4][byte(v>>32)]++
		t[5][byte(v>>40)]++
		t[6][byte(v>>48)]++
		t[7][byte(v>>56)]++
	}
	for ; i < len(b); i++ {
		t[0][b[i]]++
	}
}

// fold adds the counts to freq (at most 256 of them) and clears them.
func (t *hist8) fold(freq []uint64) {
	for s := range freq {
		var n uint64
		for k := range t {
			n += uint64(t[k][s])
			t[k][s] = 0
		}
		freq[s] += n
	}
}

// spread moves the four bytes of x to the low bytes of four 16-bit lanes.
func spread(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}

//go:build amd64 && !noasm

package codec

import "encoding/binary"

// histTable is histAVX512's constants: rows of 0..15, then the window base.
type histTable [17][64]byte

// histAVX512 counts exponents in a window of 16 values for up to 255
// blocks of 64 values; see hist_amd64.s.
//
//go:noescape
func histAVX512(src *byte, blocks int, tab *histTable, acc *[16][64]byte, flags *byte)

// histBlocks is the most blocks histAVX512 counts per call (byte counters).
const histBlocks = 255

// addVector counts exponents with AVX-512 where most of them fall in one
// window of 16 consecutive values, as in trained weights, and returns the
// number of bytes it consumed (0 when it does not apply). Exponents outside
// the window are counted one by one, so the result is exact whatever the
// data; data that is not concentrated makes it give up early.
func (h *Histogram) addVector(src []byte) int {
	const sample = 1 << 16 // bytes
	if !useAVX512 || len(src) < 4*sample {
		return 0
	}
	var s Histogram
	s.add(src[:sample])
	base, best := 0, uint64(0)
	for b := 0; b+16 <= 256; b++ {
		var sum uint64
		for k := range 16 {
			sum += s[b+k]
		}
		if sum > best {
			base, best = b, sum
		}
	}
	if best < s.Total()*15/16 {
		return 0
	}
	var tab histTable
	for k := range 16 {
		for i := range 64 {
			tab[k][i] = byte(k)
		}
	}
	for i := range 64 {
		tab[16][i] = byte(base)
	}
	var acc [16][64]byte
	var flags [histBlocks]byte
	done := 0
	for len(src)-done >= 128 {
		blocks := min((len(src)-done)/128, histBlocks)
		histAVX512(&src[done], blocks, &tab, &acc, &flags[0])
		for k := range 16 {
			var sum uint64
			for _, c := range acc[k] {
				sum += uint64(c)
			}
			h[base+k] += sum
		}
		outside := 0
		for b := range blocks {
			if flags[b] == 0 {
				continue
			}
			outside++
			blk := src[done+128*b : done+128*(b+1)]
			for i := 0; i < 128; i += 2 {
				e := int(binary.LittleEndian.Uint16(blk[i:])>>7) & 0xff
				if e-base < 0 || e-base >= 16 {
					h[e]++
				}
			}
		}
		done += 128 * blocks
		if outside > blocks/8 {
			break // not concentrated enough: the scalar loop does better
		}
	}
	return done
}

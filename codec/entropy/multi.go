package entropy

// Decoding a whole chunk's lanes several symbols a table lookup: each
// lane is decoded on its own into a lane-major buffer, then the buffer is
// transposed into symbol order eight lanes by eight symbols at a time.

import (
	"encoding/binary"
	"fmt"
)

// multiTable is a decode table of 2^MaxLen entries for up to three
// symbols a lookup: entry v, for the next MaxLen bits read as a number,
// holds the symbols of the codes that start those bits and fit in them,
// in its low three bytes, their count in bits 24-25 and their total length
// in bits 26-29; 0 where no code starts so.
type multiTable [1 << MaxLen]uint32

// newMultiTable returns the multi-symbol table of single-symbol entries
// (Table.Entries of a MaxLen table), written into mt (nil: a new one).
// It is filled a code at a time, not an entry at a time: the entries
// that start with code a are a block, and within it those whose next
// code b also fits are a smaller block, and so on for a third; each
// block is written with one value. That is about three stores an entry,
// where three dependent lookups an entry cost more than decoding a small
// payload takes.
func newMultiTable(single []uint16, mt *multiTable) *multiTable {
	if mt == nil {
		mt = new(multiTable)
	} else {
		clear(mt[:])
	}
	tab := (*[1 << MaxLen]uint16)(single)
	// The codes, shortest first (counted by length, then placed), each
	// packed in a word of codes: first entry (bits 0-11), length (12-15)
	// and symbol (16-23); a kilobyte of stack, so that a decoder's new
	// goroutine does not grow its stack for it.
	var count [MaxLen + 2]int
	for v := uint32(0); v < 1<<MaxLen; {
		l := uint32(tab[v] >> 8)
		if l == 0 || l > MaxLen { // no code starts here (a one-symbol code's other half)
			v++
			continue
		}
		count[l+1]++
		v += 1 << (MaxLen - l)
	}
	for l := 1; l < len(count); l++ {
		count[l] += count[l-1]
	}
	var codes [MaxSymbols]uint32
	n := 0
	for v := uint32(0); v < 1<<MaxLen; {
		e := uint32(tab[v])
		l := e >> 8
		if l == 0 || l > MaxLen {
			v++
			continue
		}
		if i := count[l]; i < len(codes) {
			codes[i] = v | l<<12 | (e&0xff)<<16
			count[l]++
			n = max(n, i+1)
		}
		v += 1 << (MaxLen - l)
	}
	cs := codes[:n]
	fill := func(lo, bits uint32, e uint32) {
		// Clamped, so that entries of no prefix code (a Table built by
		// hand) give a wrong table, never a write out of bounds.
		fillDoubling(mt[min(lo, 1<<MaxLen):min(lo+1<<(MaxLen-bits), 1<<MaxLen)], e)
	}
	for _, a := range cs {
		alo, abits, asym := a&0xfff, a>>12&0xf, a>>16
		fill(alo, abits, asym|1<<24|abits<<26)
		for _, b := range cs {
			blo, bbits, bsym := b&0xfff, b>>12&0xf, b>>16
			ab := abits + bbits
			if ab > MaxLen {
				break
			}
			lo := alo + blo>>abits
			fill(lo, ab, asym|bsym<<8|2<<24|ab<<26)
			for _, c := range cs {
				clo, cbits, csym := c&0xfff, c>>12&0xf, c>>16
				abc := ab + cbits
				if abc > MaxLen {
					break
				}
				fill(lo+clo>>ab, abc, asym|bsym<<8|csym<<16|3<<24|abc<<26)
			}
		}
	}
	return mt
}

// laneSyms is the symbols a lane of a full chunk holds (a full chunk of
// pair symbols holds half as many); laneStride the bytes a lane takes in
// the lane-major buffer, with room for the spare bytes of its last
// lookups.
const (
	laneSyms   = 16384 / Lanes
	laneStride = laneSyms + 16
)

// fullLanes reports whether a chunk of n symbols in L lanes is decoded
// lane by lane (decodeLanes): Lanes lanes of laneSyms symbols each (a
// full chunk), or of half as many (a full chunk of pair symbols).
func fullLanes(n, L int) bool {
	return L == Lanes && (n == Lanes*laneSyms || n == Lanes*laneSyms/2)
}

// decodeLanes decodes the Lanes lanes of m symbols each of a full chunk
// (fullLanes; lane k's bits are [pos[k], end[k]) of pad) into dst in
// symbol order. It fails, never reading outside pad, on an entry of no
// code or a lane that does not end exactly at its length.
func decodeLanes(mt *multiTable, single *[1 << MaxLen]uint16, pad []byte, pos, end *[Lanes]int, dst []byte, lanes *[Lanes * laneStride]byte, m int) error {
	if err := decodeLaneBufs(mt, single, pad, pos, end, lanes, func(int) int { return m }); err != nil {
		return err
	}
	// Transpose: symbol r*Lanes+k is lane k's symbol r.
	if !transposeLanes(dst[:Lanes*m], lanes, m) {
		transposeLanesGo(dst[:Lanes*m], lanes, m)
	}
	return nil
}

// decodeLaneBufs decodes the Lanes lanes of a chunk into their buffers,
// lane k's count(k) symbols (count not increasing in k, at most
// laneSyms): four lanes side by side while each has room for twelve more
// symbols, then each lane to its end on its own.
func decodeLaneBufs(mt *multiTable, single *[1 << MaxLen]uint16, pad []byte, pos, end *[Lanes]int, lanes *[Lanes * laneStride]byte, count func(int) int) error {
	const stride = laneStride
	for k := 0; k < Lanes; k += 4 {
		s := laneQuad{lim: count(k+3) - 12} // the four's fewest symbols, less twelve
		copy(s.q[:], pos[k:k+4])
		copy(s.end[:], end[k:k+4])
		if s.lim >= 0 && !laneSteps4(mt, pad, lanes[k*stride:(k+4)*stride], &s) {
			return fmt.Errorf("%w: lanes %d to %d: a bit pattern no code has", ErrStream, k, k+3)
		}
		for i := range 4 {
			if err := laneTail(mt, single, pad, lanes[(k+i)*stride:(k+i+1)*stride], s.q[i], s.j[i], end[k+i], k+i, count(k+i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// partialLanesMin is the fewest symbols a chunk that is not full
// (fullLanes false) must hold to build the multi-symbol table and be
// decoded lane by lane through it (decodeLanesPartial): below it,
// building the table costs more than it saves (dev-2,
// BenchmarkDecodeSmall: 4,096 symbols 22-26 µs without it, 25-27 with).
const partialLanesMin = 8192

// decodeLanesPartial is decodeLanes for a chunk of n symbols in Lanes
// lanes that is not full (more than 3,968 symbols: lanesFor gives 32):
// lane k holds symbols k, k + Lanes, ... (n/Lanes of them, or one more),
// written to dst in symbol order by a plain loop. It fails as
// decodeLanes does.
func decodeLanesPartial(mt *multiTable, single *[1 << MaxLen]uint16, pad []byte, pos, end *[Lanes]int, dst []byte, lanes *[Lanes * laneStride]byte, n int) error {
	count := func(k int) int { return (n - k + Lanes - 1) / Lanes }
	if err := decodeLaneBufs(mt, single, pad, pos, end, lanes, count); err != nil {
		return err
	}
	dst = dst[:n]
	for k := range Lanes {
		for r, v := range lanes[k*laneStride : k*laneStride+count(k)] {
			dst[r*Lanes+k] = v
		}
	}
	return nil
}

// transposeLanesGo writes the lane-major buffer of a full chunk of m
// symbols a lane (a multiple of 8) to dst (Lanes*m bytes) in symbol
// order: symbol r*Lanes+k is lane k's symbol r.
func transposeLanesGo(dst []byte, lanes *[Lanes * laneStride]byte, m int) {
	const stride = laneStride
	dst = dst[:Lanes*m]
	for kb := 0; kb < Lanes; kb += 8 {
		for rb := 0; rb < m; rb += 8 {
			// An 8x8 transpose of bytes (transpose8, written out here so
			// that it stays in registers).
			x0 := binary.LittleEndian.Uint64(lanes[(kb+0)*stride+rb:])
			x1 := binary.LittleEndian.Uint64(lanes[(kb+1)*stride+rb:])
			x2 := binary.LittleEndian.Uint64(lanes[(kb+2)*stride+rb:])
			x3 := binary.LittleEndian.Uint64(lanes[(kb+3)*stride+rb:])
			x4 := binary.LittleEndian.Uint64(lanes[(kb+4)*stride+rb:])
			x5 := binary.LittleEndian.Uint64(lanes[(kb+5)*stride+rb:])
			x6 := binary.LittleEndian.Uint64(lanes[(kb+6)*stride+rb:])
			x7 := binary.LittleEndian.Uint64(lanes[(kb+7)*stride+rb:])
			const m1, m2, m4 = 0x00ff00ff00ff00ff, 0x0000ffff0000ffff, 0x00000000ffffffff
			t := (x0>>8 ^ x1) & m1
			x1, x0 = x1^t, x0^t<<8
			t = (x2>>8 ^ x3) & m1
			x3, x2 = x3^t, x2^t<<8
			t = (x4>>8 ^ x5) & m1
			x5, x4 = x5^t, x4^t<<8
			t = (x6>>8 ^ x7) & m1
			x7, x6 = x7^t, x6^t<<8
			t = (x0>>16 ^ x2) & m2
			x2, x0 = x2^t, x0^t<<16
			t = (x1>>16 ^ x3) & m2
			x3, x1 = x3^t, x1^t<<16
			t = (x4>>16 ^ x6) & m2
			x6, x4 = x6^t, x4^t<<16
			t = (x5>>16 ^ x7) & m2
			x7, x5 = x7^t, x5^t<<16
			t = (x0>>32 ^ x4) & m4
			x4, x0 = x4^t, x0^t<<32
			t = (x1>>32 ^ x5) & m4
			x5, x1 = x5^t, x1^t<<32
			t = (x2>>32 ^ x6) & m4
			x6, x2 = x6^t, x2^t<<32
			t = (x3>>32 ^ x7) & m4
			x7, x3 = x7^t, x3^t<<32
			o := dst[rb*Lanes+kb:]
			binary.LittleEndian.PutUint64(o[0*Lanes:], x0)
			binary.LittleEndian.PutUint64(o[1*Lanes:], x1)
			binary.LittleEndian.PutUint64(o[2*Lanes:], x2)
			binary.LittleEndian.PutUint64(o[3*Lanes:], x3)
			binary.LittleEndian.PutUint64(o[4*Lanes:], x4)
			binary.LittleEndian.PutUint64(o[5*Lanes:], x5)
			binary.LittleEndian.PutUint64(o[6*Lanes:], x6)
			binary.LittleEndian.PutUint64(o[7*Lanes:], x7)
		}
	}
}

// laneQuad is four lanes' state while they are decoded side by side:
// lane i's next bit q[i], the symbols it has decoded j[i], and the bit
// where it ends; and the last symbol a step may start at, lim (the
// lanes' symbols less twelve). The assembly of laneSteps4 reads and
// writes it at fixed offsets: q at 0, j at 32, end at 64, lim at 96.
type laneQuad struct {
	q, j, end [4]int
	lim       int
}

// laneSteps4Go decodes the four lanes of s, whose buffers are lanes
// (laneStride bytes each), side by side while each has room for twelve
// more symbols and has not passed its end: their chains of lookups are
// independent, so the processor overlaps them. It returns false at an
// entry of no code.
func laneSteps4Go(mt *multiTable, pad, lanes []byte, s *laneQuad) bool {
	const stride = laneStride
	l0, l1, l2, l3 := lanes[:stride], lanes[stride:2*stride], lanes[2*stride:3*stride], lanes[3*stride:4*stride]
	q0, q1, q2, q3 := s.q[0], s.q[1], s.q[2], s.q[3]
	j0, j1, j2, j3 := s.j[0], s.j[1], s.j[2], s.j[3]
	var bad uint32 = 1
	for bad != 0 && max(j0, j1, j2, j3) <= s.lim && q0 <= s.end[0] && q1 <= s.end[1] && q2 <= s.end[2] && q3 <= s.end[3] {
		var b0, b1, b2, b3 uint32
		q0, j0, b0 = laneStep(mt, pad, l0, q0, j0)
		q1, j1, b1 = laneStep(mt, pad, l1, q1, j1)
		q2, j2, b2 = laneStep(mt, pad, l2, q2, j2)
		q3, j3, b3 = laneStep(mt, pad, l3, q3, j3)
		bad = min(bad, b0, b1, b2, b3)
	}
	s.q, s.j = [4]int{q0, q1, q2, q3}, [4]int{j0, j1, j2, j3}
	return bad != 0
}

// laneStep makes four lookups from the 64 bits of pad at bit q into lane
// buffer lb from symbol j, and returns the new q and j and the smallest
// entry's nonzero-ness (0: an entry of no code was met). q must be in
// pad's reach (at most its lane's end).
func laneStep(mt *multiTable, pad, lb []byte, q, j int) (int, int, uint32) {
	const sh = 64 - MaxLen
	w := binary.BigEndian.Uint64(pad[q>>3:]) << (q & 7)
	e0 := mt[w>>sh]
	w <<= e0 >> 26
	e1 := mt[w>>sh]
	w <<= e1 >> 26
	e2 := mt[w>>sh]
	w <<= e2 >> 26
	e3 := mt[w>>sh]
	binary.LittleEndian.PutUint32(lb[j:], e0)
	j += int(e0 >> 24 & 3)
	binary.LittleEndian.PutUint32(lb[j:], e1)
	j += int(e1 >> 24 & 3)
	binary.LittleEndian.PutUint32(lb[j:], e2)
	j += int(e2 >> 24 & 3)
	binary.LittleEndian.PutUint32(lb[j:], e3)
	j += int(e3 >> 24 & 3)
	q += int(e0>>26 + e1>>26 + e2>>26 + e3>>26)
	return q, j, min(e0, e1, e2, e3)
}

// laneTail decodes lane k (buffer lb, m symbols) from bit q and symbol j
// to its end: four lookups a load while twelve more symbols fit, then one
// symbol a lookup; it fails on an entry of no code, a lane read past its
// end, or one that does not end exactly at its length.
func laneTail(mt *multiTable, single *[1 << MaxLen]uint16, pad, lb []byte, q, j, end, k, m int) error {
	const sh = 64 - MaxLen
	for j+12 <= m {
		if q > end {
			return fmt.Errorf("%w: lane %d past its end", ErrStream, k)
		}
		var b uint32
		if q, j, b = laneStep(mt, pad, lb, q, j); b == 0 {
			return fmt.Errorf("%w: lane %d, symbol %d", ErrStream, k, j*Lanes+k)
		}
	}
	for j < m {
		if q > end {
			return fmt.Errorf("%w: lane %d past its end", ErrStream, k)
		}
		e := single[binary.BigEndian.Uint64(pad[q>>3:])<<(q&7)>>sh]
		if e>>8 == 0 {
			return fmt.Errorf("%w: lane %d, symbol %d", ErrStream, k, j*Lanes+k)
		}
		lb[j] = byte(e)
		j++
		q += int(e >> 8)
	}
	if q != end {
		return fmt.Errorf("%w: lane %d ends %d bits from its length", ErrStream, k, q-end)
	}
	return nil
}

// transpose8 transposes an 8x8 matrix of bytes, row i in x[i] with
// column j in byte j (little-endian), in place: the reference of the
// transpose decodeLanes writes out.
func transpose8(x *[8]uint64) {
	for i := 0; i < 8; i += 2 {
		t := (x[i]>>8 ^ x[i+1]) & 0x00ff00ff00ff00ff
		x[i+1] ^= t
		x[i] ^= t << 8
	}
	for _, i := range [4]int{0, 1, 4, 5} {
		t := (x[i]>>16 ^ x[i+2]) & 0x0000ffff0000ffff
		x[i+2] ^= t
		x[i] ^= t << 16
	}
	for i := range 4 {
		t := (x[i]>>32 ^ x[i+4]) & 0x00000000ffffffff
		x[i+4] ^= t
		x[i] ^= t << 32
	}
}

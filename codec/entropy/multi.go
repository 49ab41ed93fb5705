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
// (Table.Entries of a MaxLen table).
func newMultiTable(single []uint16) *multiTable {
	var mt multiTable
	for v := range mt {
		var syms, count, used uint32
		for count < 3 {
			e := single[(v<<used)&(1<<MaxLen-1)]
			l := uint32(e >> 8)
			if l == 0 || used+l > MaxLen {
				break
			}
			syms |= uint32(e&0xff) << (8 * count)
			count++
			used += l
		}
		if count > 0 {
			mt[v] = syms | count<<24 | used<<26
		}
	}
	return &mt
}

// laneSyms is the symbols a lane of a full chunk holds.
const laneSyms = 16384 / Lanes

// decodeLanes decodes the Lanes lanes of a full chunk (16,384 symbols;
// lane k's bits are [pos[k], end[k]) of pad) into dst in symbol order. It
// fails, never reading outside pad, on an entry of no code or a lane that
// does not end exactly at its length.
func decodeLanes(mt *multiTable, single *[1 << MaxLen]uint16, pad []byte, pos, end *[Lanes]int, dst []byte) error {
	const sh = 64 - MaxLen
	const stride = laneSyms + 16 // room for the last lookups' spare bytes
	var lanes [Lanes * stride]byte
	for k := range Lanes {
		lb := lanes[k*stride : (k+1)*stride]
		q, j := pos[k], 0
		// Four lookups a load (57 bits in reach, four of at most 12),
		// while even twelve more symbols stay inside the lane's count.
		for j+12 <= laneSyms {
			if q > end[k] {
				return fmt.Errorf("%w: lane %d past its end", ErrStream, k)
			}
			w := binary.BigEndian.Uint64(pad[q>>3:]) << (q & 7)
			for range 4 {
				e := mt[w>>sh]
				if e == 0 {
					return fmt.Errorf("%w: lane %d, symbol %d", ErrStream, k, j*Lanes+k)
				}
				binary.LittleEndian.PutUint32(lb[j:], e)
				j += int(e >> 24 & 3)
				b := e >> 26
				w <<= b
				q += int(b)
			}
		}
		for j < laneSyms {
			if q > end[k] {
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
		if q != end[k] {
			return fmt.Errorf("%w: lane %d ends %d bits from its length", ErrStream, k, q-end[k])
		}
	}
	// Transpose: symbol r*Lanes+k is lane k's symbol r.
	dst = dst[:Lanes*laneSyms]
	for kb := 0; kb < Lanes; kb += 8 {
		for rb := 0; rb < laneSyms; rb += 8 {
			var x [8]uint64
			for i := range x {
				x[i] = binary.LittleEndian.Uint64(lanes[(kb+i)*stride+rb:])
			}
			transpose8(&x)
			for j := range x {
				binary.LittleEndian.PutUint64(dst[(rb+j)*Lanes+kb:], x[j])
			}
		}
	}
	return nil
}

// transpose8 transposes an 8x8 matrix of bytes, row i in x[i] with
// column j in byte j (little-endian), in place.
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

package crc32c

// Arithmetic modulo the CRC-32C polynomial, in the reflected bit order of
// the checksums (bit 31-i the coefficient of x^i): concatenating CRCs, the
// method of zlib's crc32_combine, and the folding's constants.

// poly is the CRC-32C polynomial without its x^32 term, reflected, as
// hash/crc32's Castagnoli.
const poly = 0x82F63B78

// mulModP returns a*b modulo the polynomial.
func mulModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ poly
		} else {
			b >>= 1
		}
	}
}

// powers[k] is x^(2^k) modulo the polynomial, for k up to 66: enough for
// x^(8n) with any 64-bit n.
var powers = func() (t [67]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = mulModP(p, p)
	}
	return t
}()

// xPow returns x^(e * 2^k) modulo the polynomial.
func xPow(e uint64, k int) uint32 {
	p := uint32(1) << 31 // x^0
	for ; e != 0; k++ {
		if e&1 != 0 {
			p = mulModP(powers[k], p)
		}
		e >>= 1
	}
	return p
}

// Shift returns x^(8n) modulo the polynomial: what appending n bytes
// multiplies a CRC by (CombineShift), for callers that combine many
// pieces of one length.
func Shift(n uint64) uint32 { return xPow(n, 3) }

// CombineShift returns the CRC-32C of A followed by B from crc(A), crc(B)
// and Shift(len(B)).
func CombineShift(crcA, crcB, shift uint32) uint32 { return mulModP(shift, crcA) ^ crcB }

// Combine returns the CRC-32C of A followed by B from crc(A), crc(B) and
// len(B).
func Combine(crcA, crcB uint32, lenB uint64) uint32 { return CombineShift(crcA, crcB, Shift(lenB)) }

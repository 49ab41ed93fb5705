package crc32c

// The folding's constants: a lane's 128 bits A, the high-degree half H
// (its first 8 bytes) and the low L, stand for H x^64 + L; moved T bits
// further on they are H x^(T+64) + L x^T, which modulo the polynomial is
// H (x^(T+64) mod P) + L (x^T mod P): two carry-less products of 64 by 32
// bits, which fit the 128. In the reflected bit order of the data (a
// register's bit i is the coefficient of x^(127-i)) a 64-bit operand
// reflect32(x^(E-1) mod P) << 32 makes the product land aligned with the
// lanes, so no shift follows it.

// poly is the CRC-32C polynomial without its x^32 term, bit 31-i the
// coefficient of x^i (reflected), as hash/crc32's Castagnoli.
const poly = 0x82F63B78

// foldK: {x^(512+63), x^(512-1)} for four lanes 512 bits apart, then
// {x^(128+63), x^(128-1)} to fold one lane into the next.
var foldK = [4]uint64{kOperand(512 + 63), kOperand(512 - 1), kOperand(128 + 63), kOperand(128 - 1)}

// kOperand returns reflect32(x^e mod P) << 32.
func kOperand(e int) uint64 {
	return uint64(xPowMod(e)) << 32
}

// xPowMod returns x^e mod P, reflected (bit 31-i the coefficient of x^i).
func xPowMod(e int) uint32 {
	r := uint32(1) << 31 // x^0
	for range e {
		// multiply by x: in the reflected order a right shift; the x^32
		// that leaves is replaced by the polynomial's lower terms.
		if r&1 != 0 {
			r = r>>1 ^ poly
		} else {
			r >>= 1
		}
	}
	return r
}

package crc32c

// The folding's constants: a lane's 128 bits A, the high-degree half H
// (its first 8 bytes) and the low L, stand for H x^64 + L; moved T bits
// further on they are H x^(T+64) + L x^T, which modulo the polynomial is
// H (x^(T+64) mod P) + L (x^T mod P): two carry-less products of 64 by 32
// bits, which fit the 128. In the reflected bit order of the data (a
// register's bit i is the coefficient of x^(127-i)) a 64-bit operand
// reflect32(x^(E-1) mod P) << 32 makes the product land aligned with the
// lanes, so no shift follows it.

// foldK: {x^(512+63), x^(512-1)} for four lanes 512 bits apart, then
// {x^(128+63), x^(128-1)} to fold one lane into the next.
var foldK = [4]uint64{kOperand(512 + 63), kOperand(512 - 1), kOperand(128 + 63), kOperand(128 - 1)}

// foldWideK: {x^(2048+63), x^(2048-1)} for sixteen lanes 2048 bits apart,
// {x^(512+63), x^(512-1)} to fold one register of four lanes into the
// next, and {x^(128+63), x^(128-1)} as in foldK.
var foldWideK = [6]uint64{kOperand(2048 + 63), kOperand(2048 - 1), kOperand(512 + 63), kOperand(512 - 1), kOperand(128 + 63), kOperand(128 - 1)}

// kOperand returns reflect32(x^e mod P) << 32.
func kOperand(e int) uint64 { return uint64(xPow(uint64(e), 0)) << 32 }

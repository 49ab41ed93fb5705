// Package codec implements the fixed codec's BF16 payload format, version 1.
//
// A BF16 value is 16 bits: a sign, an 8-bit exponent and 7 mantissa bits.
// The fixed codec keeps the sign and mantissa of every value as one byte, exactly,
// and replaces the exponent by a 4-bit code from a per-tensor codebook of the
// 16 most frequent exponents. Exponents outside the codebook are listed in a
// chunk-local escape stream. Trained weights use few exponents, so a tensor
// shrinks to a little over 12 bits per value and decodes with one table
// lookup per value.
//
// The payload is laid out so that it can be decoded in place: placed at the
// start of the tensor's destination range, the decoded tensor can overwrite
// it chunk by chunk. docs/FORMAT.md specifies the byte layout and the
// invariant that makes this possible; [Validate] checks both.
//
// The pure-Go [Decode] is the reference every other decoder (the GPU kernel
// in package gpu) is checked against, bit for bit.
package codec

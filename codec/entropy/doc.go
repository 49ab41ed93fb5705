// Package entropy is the entropy payload of float tensors (BF16, F16,
// F32, F8_E4M3, F8_E5M2): the exponent field of each value (or, for FP8,
// the whole byte) coded with a per-tensor canonical, length-limited
// Huffman code (package-merge lengths, a decode table of 2^MaxLen
// entries), every other bit stored as it is. Symbols are coded in chunks
// of up to 16,384, each stored raw, as one constant symbol, or in up to 32
// interleaved lanes with compact lane lengths, so that a GPU warp can
// decode one chunk with one lane per thread. Encode and Decode work on
// whole payloads in parallel; Encoder writes the same bytes from values
// given a piece at a time, and DecodeStream reads a payload back a chunk
// at a time.
//
// Caches store these payloads as objects of kind entropy (index version
// 3; docs/FORMAT.md, "Entropy payloads"). This package is the reference
// any GPU decoder is checked against bit for bit.
package entropy

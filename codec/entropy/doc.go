// Package entropy is the canonical, length-limited Huffman coder that
// entropy payloads (issue 12) are built from: optimal code lengths under a
// length limit (package-merge), canonical codes, a decode table of
// 2^MaxLen entries, the exponent fields of each float dtype, and the chunk
// format (EncodeChunk): a chunk of up to 16,384 symbols is stored raw,
// as one constant symbol, or coded in up to 32 interleaved lanes,
// bit-packed, with compact lane lengths, so that a GPU warp decodes one
// chunk with one lane per thread.
//
// This package is the reference any GPU decoder is checked against bit
// for bit. It codes symbols only; the payload format that stores the
// other bits around them is still to be specified (docs/splitzip.md,
// "Entropy chunks").
package entropy

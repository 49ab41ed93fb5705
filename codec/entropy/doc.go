// Package entropy is the canonical, length-limited Huffman coder that
// entropy payloads (issue 12) are built from: optimal code lengths under a
// length limit (package-merge), canonical codes, and a chunk format of
// interleaved lanes, so that a GPU warp decodes one chunk with one lane per
// thread and a table of 2^MaxLen entries in shared memory.
//
// This package is the reference: the encoder and a table-driven decoder
// that any GPU decoder is checked against bit for bit. It codes symbols
// (the exponent fields of float values); the payload format that stores
// the other bits around them is specified in docs/splitzip.md.
package entropy

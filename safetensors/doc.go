// Package safetensors reads the header of safetensors files: the tensor
// names, dtypes, shapes and byte ranges, validated, from an io.ReaderAt. It
// never reads tensor data, so files of any size cost only their header.
//
// Read holds a file to the rules of the reference implementation
// (huggingface/safetensors): tensors ordered by (begin, end) with no
// overlap, sizes checked in bits against shapes for every reference dtype,
// a header of at most MaxHeaderSize bytes of UTF-8 JSON. Three things the
// reference refuses are kept, so such files still restore byte for byte:
// holes between tensors, bytes after the last tensor, and dtypes it does
// not know (raw bytes); File.Deviations lists them. Sharded checkpoints are
// described by ReadIndex.
package safetensors

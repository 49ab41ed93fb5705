// Package safetensors reads the header of safetensors files: the tensor
// names, dtypes, shapes and byte ranges, validated, from an io.ReaderAt. It
// never reads tensor data, so files of any size cost only their header.
//
// Every dtype string is accepted; dtypes this package knows (DTypeSize) get
// their byte sizes checked against their shapes, others pass through as raw
// bytes. Sharded checkpoints are described by ReadIndex.
package safetensors

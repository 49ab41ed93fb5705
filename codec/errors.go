package codec

import (
	"errors"
	"fmt"
)

// Errors callers test with errors.Is.
var (
	// ErrCorrupt reports a payload that violates the format.
	ErrCorrupt = errors.New("corrupt SplitZip payload")
	// ErrChecksum reports a payload whose CRC-32C does not match its header.
	ErrChecksum = errors.New("SplitZip payload checksum mismatch")
	// ErrVersion reports a payload of a format version this package does not read.
	ErrVersion = errors.New("unsupported SplitZip payload version")
	// ErrTooLarge reports a tensor larger than MaxValues.
	ErrTooLarge = errors.New("tensor too large for SplitZip format version 1")
	// ErrNotInPlace reports an encoding that breaks the in-place invariant;
	// such a tensor is stored raw.
	ErrNotInPlace = errors.New("encoding is not decodable in place")
	// ErrSize reports a buffer whose length does not fit the tensor.
	ErrSize = errors.New("buffer size does not match the tensor")
)

// CorruptError locates a format violation. It matches ErrCorrupt (or
// ErrChecksum) with errors.Is.
type CorruptError struct {
	Offset uint64 // byte offset in the payload
	Chunk  int64  // chunk index, or -1 for the header and tables
	Reason string
	Err    error // ErrCorrupt or ErrChecksum
}

func (e *CorruptError) Error() string {
	if e.Chunk >= 0 {
		return fmt.Sprintf("%v: chunk %d at offset %d: %s", e.Err, e.Chunk, e.Offset, e.Reason)
	}
	return fmt.Sprintf("%v: offset %d: %s", e.Err, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

func corrupt(off uint64, chunk int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Chunk: chunk, Reason: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

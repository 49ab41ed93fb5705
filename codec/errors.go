package codec

import (
	"errors"
	"fmt"
)

// Errors callers test with errors.Is.
var (
	// ErrCorrupt reports a fixed payload that violates the format.
	ErrCorrupt = errors.New("corrupt fixed payload")
	// ErrChecksum reports a payload of either codec whose CRC-32C does not
	// match its header. Its text names no codec: the errors that wrap it
	// (ChecksumError, CorruptError) say which one failed.
	ErrChecksum = errors.New("payload checksum mismatch")
	// ErrVersion reports a fixed payload of a format version this package
	// does not read.
	ErrVersion = errors.New("unsupported fixed payload version")
	// ErrTooLarge reports a tensor larger than MaxValues.
	ErrTooLarge = errors.New("tensor too large for fixed payload format version 1")
	// ErrNotInPlace reports an encoding that breaks the in-place invariant;
	// such a tensor is stored raw.
	ErrNotInPlace = errors.New("encoding is not decodable in place")
	// ErrSize reports a buffer whose length does not fit the tensor.
	ErrSize = errors.New("buffer size does not match the tensor")
)

// CorruptError locates a format violation in a fixed payload. It matches
// ErrCorrupt (or ErrChecksum) with errors.Is.
type CorruptError struct {
	Offset uint64 // byte offset in the payload
	Chunk  int64  // chunk index, or -1 for the header and tables
	Reason string
	Err    error // ErrCorrupt or ErrChecksum
}

func (e *CorruptError) Error() string {
	what := e.Err.Error()
	if e.Err == ErrChecksum {
		// Offset is the checksum field's, not where the damage is.
		return "fixed " + what + ": " + e.Reason
	}
	if e.Chunk >= 0 {
		return fmt.Sprintf("%s: chunk %d at offset %d: %s", what, e.Chunk, e.Offset, e.Reason)
	}
	return fmt.Sprintf("%s: offset %d: %s", what, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// ChecksumError reports a CRC-32C computed over a payload (or a part of
// one) that differs from the one it stores. It matches ErrChecksum with
// errors.Is.
type ChecksumError struct {
	Payload  string // what was checked, codec first: "entropy payload", "entropy part"
	Computed uint32
	Stored   uint32
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s checksum mismatch: computed %08x, stored %08x", e.Payload, e.Computed, e.Stored)
}

// Unwrap returns ErrChecksum.
func (e *ChecksumError) Unwrap() error { return ErrChecksum }

func corrupt(off uint64, chunk int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Chunk: chunk, Reason: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

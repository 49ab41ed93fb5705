package transport

import (
	"errors"
	"fmt"
)

// Errors callers test with errors.Is.
var (
	// ErrShortRead reports a source file that ends before a tensor does.
	ErrShortRead = errors.New("short read: source file truncated")
	// ErrTooLarge reports a payload larger than the staging buffers.
	ErrTooLarge = errors.New("payload larger than the staging buffers")
	// ErrOption reports an option out of its range, refused where the
	// options are built rather than clamped.
	ErrOption = errors.New("invalid transport option")
	// ErrLayout reports a shared copy's layout (SharedLayout) that does
	// not fit its buffer or places payloads and packs inconsistently.
	ErrLayout = errors.New("inconsistent shared layout")
	// ErrMismatch reports a tensor whose bytes in device memory, read
	// back by CheckArena, differ from its source or its content key:
	// stored data that decoded wrong (a payload forged with a matching
	// checksum, say), not a fault of the load.
	ErrMismatch = errors.New("device bytes differ from their reference")
)

// badOption returns an ErrOption naming the option and its value.
func badOption(name string, v any, want string) error {
	return fmt.Errorf("%w: %s is %v, want %s", ErrOption, name, v, want)
}

// Error names the tensor an upload failed for.
type Error struct {
	Tensor string
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("tensor %q: %v", e.Tensor, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

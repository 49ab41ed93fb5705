package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
)

// Progress receives progress of a long job. Add may be called from several
// goroutines at once.
type Progress interface {
	Start(label string, total uint64) // a phase of total bytes (0: of unknown length) begins
	Add(n uint64)
	Finish()
}

type nopProgress struct{}

func (nopProgress) Start(string, uint64) {}
func (nopProgress) Add(uint64)           {}
func (nopProgress) Finish()              {}

func orNop(p Progress) Progress {
	if p == nil {
		return nopProgress{}
	}
	return p
}

// ErrOption reports an option out of its range (a job count, a fraction,
// a size, a codec name), found before any work or output.
var ErrOption = errors.New("invalid option")

// ErrOutputExists reports an output that decompress would overwrite: a
// restored file's name taken in the output folder, or an output that is a
// file. It matches fs.ErrExist too.
var ErrOutputExists error = outputExists{}

type outputExists struct{}

func (outputExists) Error() string        { return "already exists" }
func (outputExists) Is(target error) bool { return target == fs.ErrExist }

// ErrMismatch reports a tensor that does not round-trip, or a source that
// no longer matches the cache.
var ErrMismatch = errors.New("mismatch")

// TensorError names the file and tensor an error is about.
type TensorError struct {
	File   string
	Tensor string
	Err    error
}

func (e *TensorError) Error() string {
	if e.Tensor == "" {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: tensor %q: %v", e.File, e.Tensor, e.Err)
}

func (e *TensorError) Unwrap() error { return e.Err }

package transport

import (
	"errors"

	"github.com/splitzip/splitzip/engine"
)

// Fence completes when an upload has finished. It is an engine.Event, a
// set of them, or an error known at submission.
type Fence = engine.Event

// errFence is a fence that failed before anything was submitted.
type errFence struct{ err error }

func (f errFence) Wait() error { return f.err }
func (f errFence) Done() bool  { return true }

// doneFence has nothing to wait for.
type doneFence struct{}

func (doneFence) Wait() error { return nil }
func (doneFence) Done() bool  { return true }

// allFence completes when all its fences have.
type allFence []Fence

func (fs allFence) Wait() error {
	var first error
	for _, f := range fs {
		if err := f.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (fs allFence) Done() bool {
	for _, f := range fs {
		if !f.Done() {
			return false
		}
	}
	return true
}

// wrapFence names the tensor in its error.
type wrapFence struct {
	f    Fence
	name string
}

func (w *wrapFence) Wait() error {
	if err := w.f.Wait(); err != nil {
		return &Error{Tensor: w.name, Err: err}
	}
	return nil
}

func (w *wrapFence) Done() bool { return w.f.Done() }

// Failed returns, without waiting, the error of a fence that failed before
// its work was submitted (a read, checksum or submission error), or nil.
// Errors of submitted work surface through Wait.
func Failed(f Fence) error {
	switch f := f.(type) {
	case errFence:
		return f.err
	case *wrapFence:
		if err := Failed(f.f); err != nil {
			var te *Error
			if errors.As(err, &te) {
				return err
			}
			return &Error{Tensor: f.name, Err: err}
		}
	case allFence:
		for _, g := range f {
			if err := Failed(g); err != nil {
				return err
			}
		}
	}
	return nil
}

package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDriver reports that libcuda.so.1 or a CUDA device is absent.
var ErrNoDriver = errors.New("no CUDA driver or GPU found")

// Result is a CUresult.
type Result int32

// Results callers test.
const (
	Success      Result = 0
	ErrNotReady  Result = 600 // CUDA_ERROR_NOT_READY
	errNoDevice  Result = 100 // CUDA_ERROR_NO_DEVICE
	errNotInited Result = 3   // CUDA_ERROR_NOT_INITIALIZED
)

// Error is a failed driver call.
type Error struct {
	Call string
	Code Result
	Name string // CUDA_ERROR_...
	Text string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Text)
}

// Is makes an Error for CUDA_ERROR_NO_DEVICE match ErrNoDriver.
func (e *Error) Is(target error) bool { return target == ErrNoDriver && e.Code == errNoDevice }

// check turns a result into an error naming the call.
func (l *Library) check(call string, r Result) error {
	if r == Success {
		return nil
	}
	e := &Error{Call: call, Code: r, Name: "CUDA_ERROR_UNKNOWN", Text: "unknown error"}
	var p *byte
	if l.cuGetErrorName != nil && l.cuGetErrorName(r, &p) == Success && p != nil {
		e.Name = goString(p)
	}
	if l.cuGetErrorString != nil && l.cuGetErrorString(r, &p) == Success && p != nil {
		e.Text = goString(p)
	}
	return e
}

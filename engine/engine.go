package engine

import (
	"errors"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/vmm"
)

// DevPtr is an address in the engine's device memory.
type DevPtr = vmm.Ptr

// Event marks a point in an engine stream.
type Event interface {
	// Wait blocks the host until the work before the event has finished
	// and returns the first error of that work.
	Wait() error
	// Done reports whether the work before the event has finished.
	Done() bool
}

// Engine is the device side of a transport: pinned host memory, device
// memory with virtual address ranges, and streams that run copies and
// decodes in order. The GPU engine drives CUDA; the CPU engine does the
// same work with memcpy and the Go reference decoder, so the transport
// logic runs, and is tested with -race, on machines without a GPU.
type Engine interface {
	Name() string
	// Pinned allocates page-locked host memory; FreePinned frees it.
	Pinned(n uint64) ([]byte, error)
	FreePinned(b []byte) error
	// Device memory for the weight arena.
	vmm.Memory
	// Streams returns how many upload streams the engine has.
	Streams() int
	// CopyHtoD enqueues a copy on stream s; src must stay unchanged until
	// an event recorded after it completes.
	CopyHtoD(s int, dst DevPtr, src []byte) error
	// DecodeInPlace enqueues the in-place decode of the payload at dst,
	// whose header is h, on stream s.
	DecodeInPlace(s int, dst DevPtr, h *codec.Header) error
	// Scatter enqueues on stream s one copy of packed to device staging
	// memory and one pass that writes each item to its range (raw bytes
	// copied, payloads decoded). packed starts with room for the item
	// table (ScatterTableBytes), which Scatter fills after checking the
	// items; its length is a multiple of 16, and it must stay unchanged
	// until an event recorded after the pass completes.
	Scatter(s int, packed []byte, items []ScatterItem) error
	// Record enqueues an event on stream s.
	Record(s int) (Event, error)
	// WaitEvent makes later work on stream s wait for e.
	WaitEvent(s int, e Event) error
	// ReadBack copies device memory to the host synchronously.
	ReadBack(dst []byte, src DevPtr) error
	Close() error
}

// DecodeErrorer is implemented by engines whose device reports decode
// errors per decoder rather than per event (cudaengine: the kernel sets
// an error flag). For them, an event after a corrupt payload's decode
// completes without error, and DecodeErrors, called once such events have
// completed, returns the errors found since the last call. Engines that
// do not implement it report decode errors through the event recorded
// after the decode (hostengine).
type DecodeErrorer interface {
	DecodeErrors() error
}

// ErrInjected is returned by fault hooks in tests.
var ErrInjected = errors.New("injected fault")

// ScatterItem is one tensor of a packed staging buffer (the table format
// the scatter kernel reads is gpu's; engines and transports name it here).
type ScatterItem = gpu.ScatterItem

// ScatterTableBytes returns the bytes a table of n items takes at the
// start of a packed staging buffer.
func ScatterTableBytes(n int) uint64 { return gpu.ScatterTableBytes(n) }

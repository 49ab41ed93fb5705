package engine

import (
	"errors"
	"fmt"

	"github.com/splitzip/splitzip/codec/payload"
	"github.com/splitzip/splitzip/scatter"
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
// memory with virtual address ranges, and streams that run copies in
// order, each decode after the copies submitted to its stream before it.
// The GPU engine drives CUDA; the CPU engine does the same work with
// memcpy and the Go reference decoder, so the transport logic runs, and
// is tested with -race, on machines without a GPU.
type Engine interface {
	Name() string
	// Pinned allocates page-locked host memory; FreePinned frees it.
	Pinned(n uint64) ([]byte, error)
	FreePinned(b []byte) error
	// Device memory for the weight arena.
	vmm.Memory
	// Streams returns how many upload streams the engine has.
	Streams() int
	// Submit enqueues w on stream s, then an event that completes once
	// w's work has run, and returns that event: one submission, so that
	// the event follows exactly w's work however many goroutines submit
	// to s. w's decode runs after w's copy and every copy submitted to s
	// before it; a later submission's copy may run while it decodes (the
	// CUDA engine decodes on a stream of its own beside s), so a copy
	// into a range an earlier decode writes must wait for that decode's
	// event. Scatters run in submission order with the copies. Src must
	// stay unchanged until the event completes. An error that Submit
	// finds before enqueueing anything (a bad stream, a scatter item
	// outside its buffer) is returned with a nil event; a failure of the
	// work itself (a failed copy or launch, a corrupt payload on engines
	// without DecodeErrors) is the event's error. When Submit returns an
	// error and no event, nothing of w is running.
	Submit(s int, w Work) (Event, error)
	// WaitEvent makes later work on stream s wait for e.
	WaitEvent(s int, e Event) error
	// ReadBack copies device memory to the host synchronously.
	ReadBack(dst []byte, src DevPtr) error
	Close() error
}

// Stager is implemented by engines whose loads stage best under a lower
// cap than the transports' default, where a load leaves its cap to them:
// StagingLimit is that cap for a load of readers reader goroutines
// (hostengine: its staging is plain memory, which deep rings push out of
// the caches the copies after them read).
type Stager interface {
	StagingLimit(readers int) int64
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

// Peered is implemented by engines that copy from the device memory of
// other engines of their kind (Work.Peer): on the GPU, peer copies
// between devices, whose memory must be mapped for each other's access,
// so AllowPeers is called with every engine a load copies between before
// any memory is mapped. It fails, naming the devices, when a pair cannot
// access each other's memory.
type Peered interface {
	AllowPeers(peers []Engine) error
}

// Registrar is implemented by engines that pin host memory they did not
// allocate, so that copies from it run as from Pinned memory: a segment
// of memory several processes share, mapped read-only (package
// nodeshare). Register pins b, read-only for the device; Unregister
// undoes it. Engines without it copy from such memory as it is.
type Registrar interface {
	Register(b []byte) error
	Unregister(b []byte) error
}

// Preparer is implemented by engines whose decoders load on first use
// (the CUDA engine's entropy kernels, a few milliseconds a decoder; its
// scatter kernel): PrepareEntropy loads the entropy kernels now, so that
// a load whose cache holds entropy payloads does not wait for them in its
// first upload, and PrepareScatter the kernel that writes packs.
type Preparer interface {
	PrepareEntropy() error
	PrepareScatter() error
}

// ErrInjected is returned by fault hooks in tests.
var ErrInjected = errors.New("injected fault")

// Work is what one Submit enqueues on a stream, in this order: the copy
// of Src to Dst (none when Src is empty), or with N > 0 the copy of N
// bytes of device memory at From to Dst; then the in-place decode of the
// payload at Dst whose head is Decode (none when nil): a payload that
// decodes in place (Decode.InPlace()), checked whole (package payload's
// Check, which for an entropy payload checks its chunk index too). With Items, Src
// is a packed staging buffer instead: it starts with room for the item
// table (scatter.TableBytes), which Submit fills after checking the items,
// its length is a multiple of 16, and it is copied to device staging
// memory and written to the items' ranges by one pass (raw bytes copied,
// payloads decoded); Dst and Decode are then unused. Submit keeps
// neither Items nor their headers once it returns, so a caller may reuse
// them (Src is read until the event completes). Table, with Items, is
// where the item table goes instead: Submit writes it there (at least
// scatter.TableBytes bytes, pinned as Src is, and read until the event
// completes, as Src is), never writes Src, and the table lands over the
// room at the start of the staged copy before the pass runs. Src may
// then be memory this process must not write (a segment that processes
// share read-only). Entropy, with Items or without, are entropy payloads
// of the packed staging buffer Src: EntropyAt is the end of its table and
// staged bytes (a multiple of 16, where the items' stored bytes end),
// after which Src has room for their descriptors
// (scatter.EntropyBytes), which Submit writes; once copied (and after the
// scatter) they are decoded out of place into their destinations by one
// pass. Table must then be nil. Submit keeps neither Entropy nor their
// heads once it returns, as with Items. Work with neither Src nor Items nor
// Entropy enqueues only the event.
type Work struct {
	Dst  DevPtr
	Src  []byte
	From DevPtr
	N    uint64
	// Peer, when set with N > 0, is the engine whose device memory From is
	// in: the copy is a peer copy from another device (engines that
	// implement Peered, after AllowPeers named Peer).
	Peer   Engine
	Decode payload.Head
	Items  []scatter.Item
	Table  []byte
	// Entropy and EntropyAt: see above.
	Entropy   []scatter.Entropy
	EntropyAt uint64
}

// ErrEntropyTable is returned by Submit for Work with both Entropy and
// Table (the descriptors are written into Src); it is a
// scatter.ErrInvalid, as Submit's other refusals of a staging buffer.
var ErrEntropyTable = fmt.Errorf("%w: entropy payloads of a staging buffer that has its table apart", scatter.ErrInvalid)

// Staged returns the end of w's table and staged bytes, the bytes its
// scatter items must lie in: EntropyAt with Entropy, else all of Src.
func (w Work) Staged() uint64 {
	if len(w.Entropy) > 0 {
		return w.EntropyAt
	}
	return uint64(len(w.Src))
}

// CheckEntropy checks w's entropy payloads (scatter.CheckEntropy): Submit
// checks them, and its items, before it writes anything.
func (w Work) CheckEntropy() error {
	if w.Table != nil {
		return ErrEntropyTable
	}
	return scatter.CheckEntropy(w.Src, w.EntropyAt, scatter.TableBytes(len(w.Items)), w.Entropy)
}

// PutEntropy writes the descriptors of w's entropy payloads into Src
// (scatter.PutEntropy), after its table of Items.
func (w Work) PutEntropy() error {
	if w.Table != nil {
		return ErrEntropyTable
	}
	return scatter.PutEntropy(w.Src, w.EntropyAt, scatter.TableBytes(len(w.Items)), w.Entropy)
}

// TableDst returns where Submit writes the item table of Work with
// Items: Table when set, else Src, whose room at the start it fills.
func (w Work) TableDst() []byte {
	if w.Table != nil {
		return w.Table
	}
	return w.Src
}

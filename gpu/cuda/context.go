package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Device attributes used by this module (CUdevice_attribute values).
const (
	AttrMultiprocessorCount  = 16
	AttrComputeCapabilityMaj = 75
	AttrComputeCapabilityMin = 76
	AttrL2CacheSize          = 38
	AttrClockRate            = 13
	AttrMemoryClockRate      = 36
	AttrGlobalMemoryBusWidth = 37
	// AttrMaxSharedPerBlockOptin is the shared memory a block may use
	// after opting in (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
	AttrMaxSharedPerBlockOptin = 97
)

// Context is a device's primary context, the one the CUDA runtime (and so
// PyTorch) uses, retained until Close.
type Context struct {
	lib *Library
	dev Device
	ctx Ctx
}

// NewContext retains the primary context of device ordinal.
func (l *Library) NewContext(ordinal int) (*Context, error) {
	c := &Context{lib: l}
	if err := l.check("cuDeviceGet", l.cuDeviceGet(&c.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := l.check("cuDevicePrimaryCtxRetain", l.cuDevicePrimaryCtxRetain(&c.ctx, c.dev)); err != nil {
		return nil, err
	}
	return c, nil
}

// Library returns the driver library.
func (c *Context) Library() *Library { return c.lib }

// Do runs fn on a locked OS thread with the context current. Calls into
// the driver through this package need not use it; it is for callers
// (such as another binding) that call the driver themselves.
func (c *Context) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.lib.check("cuCtxSetCurrent", c.lib.cuCtxSetCurrent(c.ctx)); err != nil {
		return err
	}
	return fn()
}

// call runs one driver call with the context current and checks it.
func (c *Context) call(name string, f func() Result) error {
	return c.Do(func() error { return c.lib.check(name, f()) })
}

// Close releases the primary context.
func (c *Context) Close() error {
	return c.lib.check("cuDevicePrimaryCtxRelease", c.lib.cuDevicePrimaryCtxRelease(c.dev))
}

// Name returns the device name.
func (c *Context) Name() (string, error) {
	b := make([]byte, 256)
	if err := c.lib.check("cuDeviceGetName", c.lib.cuDeviceGetName(&b[0], int32(len(b)), c.dev)); err != nil {
		return "", err
	}
	return goString(&b[0]), nil
}

// Attribute returns a device attribute.
func (c *Context) Attribute(attr int) (int, error) {
	var v int32
	return int(v), c.lib.check("cuDeviceGetAttribute", c.lib.cuDeviceGetAttribute(&v, int32(attr), c.dev))
}

// TotalMem returns the device's memory size.
func (c *Context) TotalMem() (uint64, error) {
	var n uint64
	return n, c.lib.check("cuDeviceTotalMem", c.lib.cuDeviceTotalMem(&n, c.dev))
}

// MemInfo returns the free and total device memory.
func (c *Context) MemInfo() (free, total uint64, err error) {
	err = c.call("cuMemGetInfo", func() Result { return c.lib.cuMemGetInfo(&free, &total) })
	return
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error { return c.call("cuCtxSynchronize", c.lib.cuCtxSynchronize) }

// NewStream creates a non-blocking stream (no implicit sync with stream 0).
func (c *Context) NewStream() (Stream, error) {
	var s Stream
	return s, c.call("cuStreamCreate", func() Result { return c.lib.cuStreamCreate(&s, 1) })
}

// DestroyStream destroys a stream.
func (c *Context) DestroyStream(s Stream) error {
	return c.call("cuStreamDestroy", func() Result { return c.lib.cuStreamDestroy(s) })
}

// StreamSynchronize waits for a stream.
func (c *Context) StreamSynchronize(s Stream) error {
	return c.call("cuStreamSynchronize", func() Result { return c.lib.cuStreamSynchronize(s) })
}

// StreamWaitEvent makes later work on s wait for e, without blocking the host.
func (c *Context) StreamWaitEvent(s Stream, e Event) error {
	return c.call("cuStreamWaitEvent", func() Result { return c.lib.cuStreamWaitEvent(s, e, 0) })
}

// Event flags.
const (
	EventDefault       = 0
	EventDisableTiming = 2
	// EventBlockingSync makes EventSynchronize block the calling thread
	// instead of spinning on a CPU core.
	EventBlockingSync = 1
)

// NewEvent creates an event.
func (c *Context) NewEvent(flags uint32) (Event, error) {
	var e Event
	return e, c.call("cuEventCreate", func() Result { return c.lib.cuEventCreate(&e, flags) })
}

// DestroyEvent destroys an event.
func (c *Context) DestroyEvent(e Event) error {
	return c.call("cuEventDestroy", func() Result { return c.lib.cuEventDestroy(e) })
}

// Record records e on s.
func (c *Context) Record(e Event, s Stream) error {
	return c.call("cuEventRecord", func() Result { return c.lib.cuEventRecord(e, s) })
}

// Query reports whether the work before e has completed.
func (c *Context) Query(e Event) (bool, error) {
	var r Result
	err := c.Do(func() error { r = c.lib.cuEventQuery(e); return nil })
	if err != nil || r == ErrNotReady {
		return false, err
	}
	return true, c.lib.check("cuEventQuery", r)
}

// EventSynchronize waits for e.
func (c *Context) EventSynchronize(e Event) error {
	return c.call("cuEventSynchronize", func() Result { return c.lib.cuEventSynchronize(e) })
}

// Elapsed returns the milliseconds between two completed events.
func (c *Context) Elapsed(start, end Event) (float32, error) {
	var ms float32
	return ms, c.call("cuEventElapsedTime", func() Result { return c.lib.cuEventElapsedTime(&ms, start, end) })
}

// Alloc allocates device memory.
func (c *Context) Alloc(n uint64) (DevicePtr, error) {
	var p DevicePtr
	if err := c.call("cuMemAlloc", func() Result { return c.lib.cuMemAlloc(&p, max(n, 1)) }); err != nil {
		return 0, fmt.Errorf("allocating %d bytes: %w", n, err)
	}
	return p, nil
}

// Free frees device memory.
func (c *Context) Free(p DevicePtr) error {
	return c.call("cuMemFree", func() Result { return c.lib.cuMemFree(p) })
}

// MemsetD8Async sets n bytes at p to v.
func (c *Context) MemsetD8Async(p DevicePtr, v uint8, n uint64, s Stream) error {
	return c.call("cuMemsetD8Async", func() Result { return c.lib.cuMemsetD8Async(p, v, n, s) })
}

// CopyHtoDAsync copies src to dst on s. src must stay unchanged until the
// copy completes; it should be pinned (HostAlloc, HostRegister) for the
// copy to be asynchronous and fast.
func (c *Context) CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return c.call("cuMemcpyHtoDAsync", func() Result {
		return c.lib.cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uint64(len(src)), s)
	})
}

// CopyDtoHAsync copies to dst from src on s.
func (c *Context) CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return c.call("cuMemcpyDtoHAsync", func() Result {
		return c.lib.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, uint64(len(dst)), s)
	})
}

// CopyDtoDAsync copies n bytes between device ranges on s.
func (c *Context) CopyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	return c.call("cuMemcpyDtoDAsync", func() Result { return c.lib.cuMemcpyDtoDAsync(dst, src, n, s) })
}

// CopyPeerAsync copies n bytes on s from src, memory of from's device,
// to dst, memory of c's device (a peer copy; from may be c).
func (c *Context) CopyPeerAsync(dst DevicePtr, src DevicePtr, from *Context, n uint64, s Stream) error {
	return c.call("cuMemcpyPeerAsync", func() Result { return c.lib.cuMemcpyPeerAsync(dst, c.ctx, src, from.ctx, n, s) })
}

// CanAccessPeer reports whether c's device can map memory of o's device
// (true for the same device).
func (c *Context) CanAccessPeer(o *Context) (bool, error) {
	if o.dev == c.dev {
		return true, nil
	}
	var v int32
	err := c.lib.check("cuDeviceCanAccessPeer", c.lib.cuDeviceCanAccessPeer(&v, c.dev, o.dev))
	return v != 0, err
}

// Host allocation flags.
const (
	HostAllocPortable      = 1
	HostAllocWriteCombined = 4
	HostRegisterPortable   = 1
	// HostRegisterReadOnly registers memory the device only reads; it is
	// required for memory mapped read-only.
	HostRegisterReadOnly = 8
)

// HostAlloc allocates n bytes of pinned host memory, returned as a slice
// the Go collector does not manage: free it with FreeHost.
func (c *Context) HostAlloc(n uint64, flags uint32) ([]byte, error) {
	var p unsafe.Pointer
	if err := c.call("cuMemHostAlloc", func() Result { return c.lib.cuMemHostAlloc(&p, max(n, 1), flags) }); err != nil {
		return nil, fmt.Errorf("pinning %d bytes: %w", n, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost frees memory from HostAlloc.
func (c *Context) FreeHost(b []byte) error {
	p := unsafe.Pointer(unsafe.SliceData(b))
	return c.call("cuMemFreeHost", func() Result { return c.lib.cuMemFreeHost(p) })
}

// HostRegister pins existing host memory (which must not be Go-managed
// memory the collector could free while pinned; use it for mmap'd or
// C-allocated buffers).
func (c *Context) HostRegister(b []byte, flags uint32) error {
	p := unsafe.Pointer(unsafe.SliceData(b))
	return c.call("cuMemHostRegister", func() Result { return c.lib.cuMemHostRegister(p, uint64(len(b)), flags) })
}

// HostUnregister unpins memory pinned by HostRegister.
func (c *Context) HostUnregister(b []byte) error {
	p := unsafe.Pointer(unsafe.SliceData(b))
	return c.call("cuMemHostUnregister", func() Result { return c.lib.cuMemHostUnregister(p) })
}

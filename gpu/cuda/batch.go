package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// ErrNoBatchCopy is returned by CopyBatchAsync when the driver has no
// batched copies (cuMemcpyBatchAsync, CUDA 13 drivers and later).
var ErrNoBatchCopy = errors.New("cuda: the driver has no batched copies")

// memcpyAttributes is CUmemcpyAttributes: a source access order, two
// location hints (CUmemLocation: type and id) and flags.
type memcpyAttributes struct {
	srcAccessOrder int32
	srcLocType     int32
	srcLocID       int32
	dstLocType     int32
	dstLocID       int32
	flags          uint32
}

// srcAccessStream is CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: sources are read
// in stream order, as by any other copy on the stream.
const srcAccessStream = 1

// HasBatchCopy reports whether CopyBatchAsync is available.
func (l *Library) HasBatchCopy() bool { return l.cuMemcpyBatchAsync != nil }

// CopyBatchAsync copies srcs[i] (host memory, pinned for the copies to
// be asynchronous) to dsts[i] on s with one driver call. The batch runs in
// stream order, but its copies in no order among themselves: their
// destinations must not overlap. On the H200, 64 copies of 1.6 MB
// batched ran at 55 GB/s where the same copies queued one by one ran at
// 49.7 (scripts/h2d-batch-probe.py).
func (c *Context) CopyBatchAsync(dsts []DevicePtr, srcs [][]byte, s Stream) error {
	if c.lib.cuMemcpyBatchAsync == nil {
		return ErrNoBatchCopy
	}
	if len(dsts) != len(srcs) {
		return fmt.Errorf("cuda: %d destinations for %d sources", len(dsts), len(srcs))
	}
	if len(dsts) == 0 {
		return nil
	}
	from := make([]DevicePtr, len(srcs))
	sizes := make([]uint64, len(srcs))
	for i, b := range srcs {
		if len(b) == 0 {
			return fmt.Errorf("cuda: empty copy %d in a batch", i)
		}
		from[i] = DevicePtr(uintptr(unsafe.Pointer(&b[0])))
		sizes[i] = uint64(len(b))
	}
	attr := memcpyAttributes{srcAccessOrder: srcAccessStream}
	var first uint64 // the attributes apply from copy 0 on
	err := c.call("cuMemcpyBatchAsync", func() Result {
		return c.lib.cuMemcpyBatchAsync(&dsts[0], &from[0], &sizes[0], uint64(len(dsts)), &attr, &first, 1, s)
	})
	runtime.KeepAlive(srcs)
	return err
}

package cudaengine

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page (x86-64 and arm64 with
// 4 KiB base pages).
const hugePage = 2 << 20

// hugePinned says whether mapHost backs buffers of a huge page or more
// with transparent huge pages (SPLITZIP_PINNED_PAGES=small: never).
var hugePinned = os.Getenv("SPLITZIP_PINNED_PAGES") != "small"

// hostSize is the length of mapHost(n)'s mapping.
func hostSize(n uint64) uint64 {
	n = max(n, 1)
	if !hugePinned || n < hugePage {
		return n
	}
	return (n + hugePage - 1) &^ (hugePage - 1)
}

// mapHost maps n bytes (at least 1) of anonymous memory, every page
// touched, for registering with the driver. A buffer of a huge page or
// more is rounded up to whole huge pages, aligned to one and advised to
// the kernel as huge (MADV_HUGEPAGE; what the kernel grants is best
// effort): the device then reads it with one translation a huge page,
// not 512.
func mapHost(n uint64) ([]byte, error) {
	size := hostSize(n)
	if !hugePinned || size < hugePage {
		p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
		if err != nil {
			return nil, fmt.Errorf("mapping %d bytes: %w", size, err)
		}
		return unsafe.Slice((*byte)(p), size), nil
	}
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes: %w", size, err)
	}
	// Keep the aligned middle; give back the slack on either side.
	head := uintptr(-int(uintptr(p))) & (hugePage - 1)
	if head > 0 {
		unix.MunmapPtr(p, head)
	}
	start := unsafe.Add(p, head)
	if tail := hugePage - head; tail > 0 {
		unix.MunmapPtr(unsafe.Add(start, size), tail)
	}
	b := unsafe.Slice((*byte)(start), size)
	unix.Madvise(b, unix.MADV_HUGEPAGE) // advice: refused where THP is off, and then small pages serve
	if unix.Madvise(b, unix.MADV_POPULATE_WRITE) != nil {
		// Kernels before 5.14: touch a byte of every base page.
		for i := 0; i < len(b); i += 4096 {
			b[i] = 0
		}
	}
	return b, nil
}

// unmapHost unmaps a buffer from mapHost (b as mapHost returned it).
func unmapHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b)))
}

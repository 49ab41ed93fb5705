package cudaengine

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page where base pages are
// 4 KiB (x86-64, arm64 with 4 KiB pages); with other base pages (arm64's
// 64 KiB, whose huge pages are 512 MiB) mapHost maps base pages only.
const hugePage = 2 << 20

// basePage is the kernel's page size.
var basePage = os.Getpagesize()

// pinnedPages reads a value of SPLITZIP_PINNED_PAGES, which an engine
// reads when it is made: whether mapHost backs buffers of a huge page or
// more with transparent huge pages, huge (the default) or small (never).
func pinnedPages(v string) (bool, error) {
	switch v {
	case "", "huge":
		return true, nil
	case "small":
		return false, nil
	}
	return true, fmt.Errorf("cuda engine: SPLITZIP_PINNED_PAGES=%q: want huge (the default) or small", v)
}

// hugeFor says whether mapHost maps n bytes on huge pages, where huge
// pages are asked for.
func hugeFor(n uint64, huge bool) bool { return huge && basePage == 4096 && n >= hugePage }

// hostSize is the length of mapHost(n, huge)'s mapping.
func hostSize(n uint64, huge bool) uint64 {
	n = max(n, 1)
	if !hugeFor(n, huge) {
		return n
	}
	return (n + hugePage - 1) &^ (hugePage - 1)
}

// mapHost maps n bytes (at least 1) of anonymous memory, every page
// touched, for registering with the driver. A buffer of a huge page or
// more is rounded up to whole huge pages, aligned to one and advised to
// the kernel as huge (MADV_HUGEPAGE; what the kernel grants is best
// effort): the device then reads it with one translation a huge page,
// not 512. With huge false every buffer is mapped on base pages.
func mapHost(n uint64, huge bool) ([]byte, error) {
	size := hostSize(n, huge)
	if !hugeFor(size, huge) {
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
	unix.MunmapPtr(unsafe.Add(start, size), hugePage-head)
	b := unsafe.Slice((*byte)(start), size)
	unix.Madvise(b, unix.MADV_HUGEPAGE) // advice: refused where THP is off, and then small pages serve
	switch err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); {
	case err == unix.EINVAL:
		// Kernels before 5.14: touch a byte of every base page.
		for i := 0; i < len(b); i += basePage {
			b[i] = 0
		}
	case err != nil: // out of memory: an error, not a fault when touched
		unmapHost(b)
		return nil, fmt.Errorf("populating %d bytes: %w", size, err)
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

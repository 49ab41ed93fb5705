package main

// Uploads into device memory, layer packs and their scatter, residency,
// events and products from payloads (loader/gpu.go, loader/pack.go,
// loader/gemv.go).

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define SZ_NO_PROTOTYPES
#include "splitzip.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/splitzip/splitzip/loader"
)

//export sz_upload
func sz_upload(h C.uintptr_t, index C.uint64_t, device C.int, dst, capacity C.uint64_t, stream C.uintptr_t, event *C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if event == nil {
			return fmt.Errorf("%w: NULL event", loader.ErrInvalid)
		}
		ev, err := l.Upload(int(index), int(device), uint64(dst), uint64(capacity), uintptr(stream))
		if err == nil {
			*event = C.uintptr_t(ev)
		}
		return err
	})
}

// maxBatch bounds sz_upload_batch's n, so that a garbage count is an
// error rather than a wild read.
const maxBatch = 1 << 24

//export sz_upload_batch
func sz_upload_batch(h C.uintptr_t, n C.uint64_t, indices *C.uint64_t, device C.int, dsts, caps *C.uint64_t, stream C.uintptr_t, event *C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if event == nil {
			return fmt.Errorf("%w: NULL event", loader.ErrInvalid)
		}
		idx, d, c, err := batchArgs(l, n, indices, dsts, caps, true)
		if err != nil {
			return err
		}
		ev, err := l.UploadBatch(idx, int(device), d, c, uintptr(stream))
		if err == nil {
			*event = C.uintptr_t(ev)
		}
		return err
	})
}

// batchArgs copies and checks the arrays of a batch of n tensors: the
// indices, and with withDsts the destinations and capacities (else nil).
func batchArgs(l *loader.Loader, n C.uint64_t, indices *C.uint64_t, dsts, caps *C.uint64_t, withDsts bool) (idx []int, d, c []uint64, err error) {
	switch {
	case n > maxBatch:
		return nil, nil, nil, fmt.Errorf("%w: %d tensors in one batch (at most %d)", loader.ErrInvalid, uint64(n), maxBatch)
	case n > 0 && (indices == nil || withDsts && (dsts == nil || caps == nil)):
		return nil, nil, nil, fmt.Errorf("%w: NULL array", loader.ErrInvalid)
	}
	idx = make([]int, n)
	if n == 0 {
		return idx, nil, nil, nil
	}
	for k, i := range unsafe.Slice((*uint64)(unsafe.Pointer(indices)), int(n)) {
		if i >= uint64(len(l.Tensors())) {
			return nil, nil, nil, fmt.Errorf("%w: tensor index %d: want 0 to %d", loader.ErrInvalid, i, len(l.Tensors())-1)
		}
		idx[k] = int(i)
	}
	if withDsts {
		d = append([]uint64(nil), unsafe.Slice((*uint64)(unsafe.Pointer(dsts)), int(n))...)
		c = append([]uint64(nil), unsafe.Slice((*uint64)(unsafe.Pointer(caps)), int(n))...)
	}
	return idx, d, c, nil
}

// packFlags checks sz_pack's flags (SZ_PACK_*).
func packFlags(flags C.uint64_t) (loader.PackFlags, error) {
	if flags&^C.SZ_PACK_ENTROPY != 0 {
		return 0, fmt.Errorf("%w: unknown pack flags %#x", loader.ErrInvalid, uint64(flags))
	}
	var f loader.PackFlags
	if flags&C.SZ_PACK_ENTROPY != 0 {
		f |= loader.PackEntropy
	}
	return f, nil
}

//export sz_pack_size
func sz_pack_size(h C.uintptr_t, n C.uint64_t, indices *C.uint64_t, flags C.uint64_t, size *C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if size == nil {
			return fmt.Errorf("%w: NULL size", loader.ErrInvalid)
		}
		f, err := packFlags(flags)
		if err != nil {
			return err
		}
		idx, _, _, err := batchArgs(l, n, indices, nil, nil, false)
		if err != nil {
			return err
		}
		s, err := l.PackSize(idx, f)
		*size = C.uint64_t(s)
		return err
	})
}

//export sz_pack
func sz_pack(h C.uintptr_t, n C.uint64_t, indices *C.uint64_t, dsts, caps *C.uint64_t, buf unsafe.Pointer, capacity C.uint64_t, flags C.uint64_t, info *C.sz_pack_info) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if info == nil {
			return fmt.Errorf("%w: NULL info", loader.ErrInvalid)
		}
		f, err := packFlags(flags)
		if err != nil {
			return err
		}
		idx, d, c, err := batchArgs(l, n, indices, dsts, caps, true)
		if err != nil {
			return err
		}
		b, err := hostBytes(buf, capacity, "buffer")
		if err != nil {
			return err
		}
		pi, err := l.Pack(idx, d, c, b, f)
		if err == nil {
			e := pi.Entropy
			*info = C.sz_pack_info{staged: C.uint64_t(pi.Staged), count: C.uint64_t(pi.Count), units: C.uint64_t(pi.Units),
				entropy_at: C.uint64_t(pi.EntropyAt), entropy_count: C.uint64_t(e.Count), entropy_units: C.uint64_t(e.Units),
				entropy_buf: C.uint64_t(e.Buf), entropy_chunks: C.uint64_t(e.Chunks)}
		}
		return err
	})
}

//export sz_gpu_prepare
func sz_gpu_prepare(h C.uintptr_t, device C.int) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.PrepareScatter(int(device)) })
}

//export sz_scatter
func sz_scatter(h C.uintptr_t, device C.int, base C.uint64_t, info *C.sz_pack_info, stream C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if info == nil || info.count > maxBatch {
			return fmt.Errorf("%w: no pack info, or more than %d tensors", loader.ErrInvalid, maxBatch)
		}
		pi := loader.PackInfo{Staged: uint64(info.staged), Count: int(info.count), Units: uint64(info.units),
			EntropyAt: uint64(info.entropy_at), Entropy: loader.EntropyBatch{Count: int(info.entropy_count),
				Units: uint64(info.entropy_units), Buf: int(info.entropy_buf), Chunks: uint64(info.entropy_chunks)}}
		if info.entropy_count > maxBatch || info.entropy_buf > 1<<30 {
			// Checked before they become ints: loader.Scatter checks the rest.
			return fmt.Errorf("%w: pack info with %d entropy payloads, a %d-byte buffer a warp", loader.ErrInvalid, uint64(info.entropy_count), uint64(info.entropy_buf))
		}
		return l.Scatter(int(device), uint64(base), pi, uintptr(stream))
	})
}

//export sz_scatter_routed
func sz_scatter_routed(h C.uintptr_t, device C.int, packs, want, n, active C.uint64_t, stream C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if n > maxBatch || active > maxBatch {
			return fmt.Errorf("%w: %d candidates, %d active (at most %d)", loader.ErrInvalid, n, active, maxBatch)
		}
		return l.ScatterRouted(int(device), uint64(packs), uint64(want), int(n), int(active), uintptr(stream))
	})
}

//export sz_scatter_check
func sz_scatter_check(h C.uintptr_t, device C.int, stream C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.ScatterCheck(int(device), uintptr(stream)) })
}

//export sz_set_resident
func sz_set_resident(h C.uintptr_t, on C.int) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.SetResident(on != 0) })
}

// shareDirEnvName is nodeshare.DirEnv (capi_test checks: capi imports
// only loader).
const shareDirEnvName = "SPLITZIP_SHARE_DIR"

//export sz_set_shared
func sz_set_shared(h C.uintptr_t, on C.int) C.sz_status {
	// The folder comes from the C environment as it is now: Go copied the
	// environment when the library was loaded, and a host that sets the
	// variable later (Python's os.environ) changes only the C one.
	name := C.CString(shareDirEnvName)
	defer C.free(unsafe.Pointer(name))
	dir := ""
	if v := C.getenv(name); v != nil {
		dir = C.GoString(v)
	}
	return call(h, func(l *loader.Loader) error { return l.SetShared(on != 0, dir) })
}

//export sz_event_wait
func sz_event_wait(h C.uintptr_t, event C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.EventWait(uintptr(event)) })
}

//export sz_event_release
func sz_event_release(h C.uintptr_t, event C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.EventRelease(uintptr(event)) })
}

//export sz_release_idle
func sz_release_idle(closed *C.int) C.sz_status {
	n := loader.ReleaseIdle()
	if closed != nil {
		*closed = C.int(n)
	}
	return C.SZ_OK
}

//export sz_gemv_prepare
func sz_gemv_prepare(h C.uintptr_t, device C.int) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.PrepareGemv(int(device)) })
}

//export sz_gemv
func sz_gemv(h C.uintptr_t, device C.int, w, wLen C.uint64_t, head *C.uint8_t, rows, cols, x, y C.uint64_t, batch C.int, stream C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if head == nil {
			return fmt.Errorf("%w: no payload header", loader.ErrInvalid)
		}
		hb := C.GoBytes(unsafe.Pointer(head), C.int(loader.PayloadHeadBytes))
		return l.Gemv(int(device), uint64(w), uint64(wLen), hb, uint64(rows), uint64(cols), uint64(x), uint64(y), int(batch), uintptr(stream))
	})
}

//export sz_gemv_check
func sz_gemv_check(h C.uintptr_t, device C.int, stream C.uintptr_t) C.sz_status {
	return call(h, func(l *loader.Loader) error { return l.GemvCheck(int(device), uintptr(stream)) })
}

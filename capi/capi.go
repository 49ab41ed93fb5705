// Command capi is libsplitzip.so: the C ABI of splitzip (splitzip.h),
// built with `go build -buildmode=c-shared`. Each exported function is a
// thin translation to package loader: C arguments are checked and copied,
// errors become sz_status codes plus a message kept on the handle, and a
// panic is recovered into SZ_ERR_INTERNAL so that it never crosses into
// the host process.
package main

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
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/splitzip/splitzip/loader"
	"github.com/splitzip/splitzip/safetensors"
)

func main() {}

// handle is what a C handle refers to.
type handle struct {
	l      *loader.Loader
	mu     sync.Mutex
	last   map[int]lastError // last error per calling thread
	prune  int               // how many errors last may hold before setError prunes it
	closed bool
}

// handles tracks live handles so that a stale or forged value is
// rejected instead of crashing.
var handles sync.Map // uintptr -> *handle

func lookup(h C.uintptr_t) (*handle, C.sz_status) {
	v, ok := handles.Load(uintptr(h))
	if !ok {
		return nil, C.SZ_ERR_INVALID
	}
	return v.(*handle), C.SZ_OK
}

// status maps an error to a code (loader.StatusOf).
func status(err error) C.sz_status { return C.sz_status(loader.StatusOf(err)) }

// The codes of splitzip.h and loader.Status agree: each index below is a
// constant that must be 0, so a mismatch does not compile.
var (
	_ = [1]struct{}{}[C.SZ_OK-C.sz_status(loader.StatusOK)]
	_ = [1]struct{}{}[C.SZ_ERR_INVALID-C.sz_status(loader.StatusInvalid)]
	_ = [1]struct{}{}[C.SZ_ERR_NOT_FOUND-C.sz_status(loader.StatusNotFound)]
	_ = [1]struct{}{}[C.SZ_ERR_CORRUPT-C.sz_status(loader.StatusCorrupt)]
	_ = [1]struct{}{}[C.SZ_ERR_SOURCE_CHANGED-C.sz_status(loader.StatusSourceChanged)]
	_ = [1]struct{}{}[C.SZ_ERR_TOO_SMALL-C.sz_status(loader.StatusTooSmall)]
	_ = [1]struct{}{}[C.SZ_ERR_NO_GPU-C.sz_status(loader.StatusNoGPU)]
	_ = [1]struct{}{}[C.SZ_ERR_CUDA-C.sz_status(loader.StatusCUDA)]
	_ = [1]struct{}{}[C.SZ_ERR_IO-C.sz_status(loader.StatusIO)]
	_ = [1]struct{}{}[C.SZ_ERR_INTERNAL-C.sz_status(loader.StatusInternal)]
)

// call runs fn for handle h, records its error on the handle and recovers
// panics.
func call(h C.uintptr_t, fn func(l *loader.Loader) error) (st C.sz_status) {
	hd, st := lookup(h)
	if st != C.SZ_OK {
		return st
	}
	defer func() {
		if r := recover(); r != nil {
			hd.setError(lastError{msg: fmt.Sprintf("internal error: %v", r)})
			st = C.SZ_ERR_INTERNAL
		}
	}()
	hd.mu.Lock()
	closed := hd.closed
	hd.mu.Unlock()
	if closed {
		return C.SZ_ERR_INVALID
	}
	err := fn(hd.l)
	if err != nil {
		hd.setError(lastError{msg: err.Error(), file: loader.FileOf(err)})
	}
	return status(err)
}

// copyString writes s into buf (cap bytes), NUL-terminated and truncated.
func copyString(s string, buf *C.char, capacity C.size_t) {
	if buf == nil || capacity == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity))
	n := copy(b[:len(b)-1], s)
	b[n] = 0
}

//export sz_abi_version
func sz_abi_version() C.int { return C.SPLITZIP_ABI_VERSION }

//export sz_open
func sz_open(dir, source *C.char, out *C.uintptr_t, errbuf *C.char, errcap C.size_t) (st C.sz_status) {
	defer func() {
		if r := recover(); r != nil {
			copyString(fmt.Sprintf("internal error: %v", r), errbuf, errcap)
			st = C.SZ_ERR_INTERNAL
		}
	}()
	if dir == nil || out == nil {
		copyString("sz_open: cache_dir and handle must not be NULL", errbuf, errcap)
		return C.SZ_ERR_INVALID
	}
	src := ""
	if source != nil {
		src = C.GoString(source)
	}
	l, err := loader.Open(C.GoString(dir), src)
	if err != nil {
		copyString(err.Error(), errbuf, errcap)
		return status(err)
	}
	hv := cgo.NewHandle(&handle{l: l, last: map[int]lastError{}})
	handles.Store(uintptr(hv), hv.Value())
	*out = C.uintptr_t(hv)
	return C.SZ_OK
}

//export sz_close
func sz_close(h C.uintptr_t) C.sz_status {
	hd, st := lookup(h)
	if st != C.SZ_OK {
		return st
	}
	handles.Delete(uintptr(h))
	hd.mu.Lock()
	hd.closed = true
	hd.mu.Unlock()
	hd.l.Close()
	cgo.Handle(h).Delete()
	return C.SZ_OK
}

//export sz_last_error
func sz_last_error(h C.uintptr_t, buf *C.char, capacity C.size_t) C.sz_status {
	hd, st := lookup(h)
	if st != C.SZ_OK {
		return st
	}
	hd.mu.Lock()
	defer hd.mu.Unlock()
	copyString(hd.lastOf().msg, buf, capacity)
	return C.SZ_OK
}

// sz_last_error_file copies the path of the file the calling thread's
// last failed call is about (loader.FileOf: a damaged cache object, a
// source shard) into buf, "" where it is about none; a buf too small is
// SZ_ERR_TOO_SMALL with *size the bytes needed. It records no error of
// its own, so that a caller may ask for the message and the file in
// either order.
//
//export sz_last_error_file
func sz_last_error_file(h C.uintptr_t, buf *C.char, capacity C.size_t, size *C.size_t) C.sz_status {
	hd, st := lookup(h)
	if st != C.SZ_OK {
		return st
	}
	hd.mu.Lock()
	file := hd.lastOf().file
	hd.mu.Unlock()
	if size != nil {
		*size = C.size_t(len(file) + 1)
	}
	if buf == nil || uint64(capacity) < uint64(len(file))+1 {
		// A path cut short names another file: none is written.
		copyString("", buf, capacity)
		return C.SZ_ERR_TOO_SMALL
	}
	copyString(file, buf, capacity)
	return C.SZ_OK
}

//export sz_count
func sz_count(h C.uintptr_t, n *C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if n == nil {
			return fmt.Errorf("%w: NULL count", loader.ErrInvalid)
		}
		*n = C.uint64_t(len(l.Tensors()))
		return nil
	})
}

//export sz_info
func sz_info(h C.uintptr_t, index C.uint64_t, info *C.sz_tensor, name *C.char, capacity C.size_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		t, err := l.Tensor(int(index))
		if err != nil {
			return err
		}
		if name != nil && uint64(len(t.Name)) >= uint64(capacity) {
			return fmt.Errorf("tensor %q: %w: its name needs %d bytes, the buffer has %d", t.Name, loader.ErrTooSmall, len(t.Name)+1, capacity)
		}
		if info != nil {
			if len(t.DType) >= len(info.dtype) {
				return fmt.Errorf("tensor %q: %w: dtype %q is longer than %d bytes", t.Name, loader.ErrTooSmall, t.DType, len(info.dtype)-1)
			}
			*info = C.sz_tensor{}
			info.index = C.uint64_t(t.Index)
			info.nbytes = C.uint64_t(t.Size)
			info.offset = C.uint64_t(t.Offset)
			info.stored = C.uint64_t(t.Stored)
			info.ndim = C.uint32_t(len(t.Shape))
			if t.Compressed {
				info.compressed = 1
			}
			for i, d := range t.Shape {
				if i < 8 {
					info.shape[i] = C.uint64_t(d)
				}
			}
			copyString(t.DType, &info.dtype[0], C.size_t(len(info.dtype)))
		}
		copyString(t.Name, name, capacity)
		return nil
	})
}

// sz_name copies tensor index's name, its every byte (NUL characters
// included) and a terminating NUL, into buf, with its length in *size;
// a buf too small is SZ_ERR_TOO_SMALL and receives "" (capacity > 0),
// never a name cut short.
//
//export sz_name
func sz_name(h C.uintptr_t, index C.uint64_t, buf *C.char, capacity C.size_t, size *C.size_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		t, err := l.Tensor(int(index))
		if err != nil {
			return err
		}
		switch {
		case buf == nil && (size == nil || capacity > 0):
			return fmt.Errorf("%w: NULL name buffer (of %d bytes)", loader.ErrInvalid, capacity)
		case size != nil:
			*size = C.size_t(len(t.Name))
		}
		if buf == nil {
			return nil // the length alone
		}
		if uint64(len(t.Name)) >= uint64(capacity) {
			copyString("", buf, capacity)
			return fmt.Errorf("tensor %q (index %d): %w: its name needs %d bytes, the buffer has %d", t.Name, t.Index, loader.ErrTooSmall, len(t.Name)+1, capacity)
		}
		copyString(t.Name, buf, capacity)
		return nil
	})
}

//export sz_shape
func sz_shape(h C.uintptr_t, index C.uint64_t, shape *C.uint64_t, capacity C.size_t, ndim *C.uint32_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		t, err := l.Tensor(int(index))
		if err != nil {
			return err
		}
		if ndim == nil {
			return fmt.Errorf("%w: NULL ndim", loader.ErrInvalid)
		}
		*ndim = C.uint32_t(len(t.Shape))
		if uint64(capacity) < uint64(len(t.Shape)) {
			return fmt.Errorf("tensor %q: %w: %d dimensions, room for %d", t.Name, loader.ErrTooSmall, len(t.Shape), capacity)
		}
		if len(t.Shape) == 0 {
			return nil
		}
		if shape == nil {
			return fmt.Errorf("%w: NULL shape", loader.ErrInvalid)
		}
		out := unsafe.Slice((*C.uint64_t)(unsafe.Pointer(shape)), len(t.Shape))
		for i, d := range t.Shape {
			out[i] = C.uint64_t(d)
		}
		return nil
	})
}

func find(h C.uintptr_t, index *C.uint64_t, fn func(l *loader.Loader) (int, error)) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if index == nil {
			return fmt.Errorf("%w: NULL index", loader.ErrInvalid)
		}
		i, err := fn(l)
		if err == nil {
			*index = C.uint64_t(i)
		}
		return err
	})
}

func goString(s *C.char) (string, error) {
	if s == nil {
		return "", fmt.Errorf("%w: NULL string", loader.ErrInvalid)
	}
	return C.GoString(s), nil
}

//export sz_find_name
func sz_find_name(h C.uintptr_t, name *C.char, index *C.uint64_t) C.sz_status {
	return find(h, index, func(l *loader.Loader) (int, error) {
		s, err := goString(name)
		if err != nil {
			return 0, err
		}
		return l.FindName(s)
	})
}

// sz_find_name_len is sz_find_name for a name of len bytes, which may
// hold NUL characters.
//
//export sz_find_name_len
func sz_find_name_len(h C.uintptr_t, name *C.char, length C.size_t, index *C.uint64_t) C.sz_status {
	return find(h, index, func(l *loader.Loader) (int, error) {
		switch {
		case name == nil && length > 0:
			return 0, fmt.Errorf("%w: NULL name of %d bytes", loader.ErrInvalid, length)
		case uint64(length) > safetensors.MaxHeaderSize:
			// Longer than any header, so than any name.
			return 0, fmt.Errorf("%w: a name of %d bytes", loader.ErrInvalid, length)
		}
		return l.FindName(C.GoStringN(name, C.int(length)))
	})
}

//export sz_find_key
func sz_find_key(h C.uintptr_t, key *C.char, index *C.uint64_t) C.sz_status {
	return find(h, index, func(l *loader.Loader) (int, error) {
		s, err := goString(key)
		if err != nil {
			return 0, err
		}
		return l.FindKey(s)
	})
}

//export sz_find_slice
func sz_find_slice(h C.uintptr_t, shard *C.char, offset, size C.uint64_t, index *C.uint64_t) C.sz_status {
	return find(h, index, func(l *loader.Loader) (int, error) {
		s, err := goString(shard)
		if err != nil {
			return 0, err
		}
		return l.FindSlice(s, uint64(offset), uint64(size))
	})
}

//export sz_read_host
func sz_read_host(h C.uintptr_t, index C.uint64_t, dst unsafe.Pointer, capacity C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if dst == nil && capacity > 0 {
			return fmt.Errorf("%w: NULL destination", loader.ErrInvalid)
		}
		var b []byte
		if capacity > 0 {
			b = unsafe.Slice((*byte)(dst), uint64(capacity))
		}
		return l.ReadHost(int(index), b)
	})
}

// hostBytes is the caller's buffer [p, p+n) (nil for n 0), or an error
// for a NULL pointer with room.
func hostBytes(p unsafe.Pointer, n C.uint64_t, what string) ([]byte, error) {
	if p == nil && n > 0 {
		return nil, fmt.Errorf("%w: NULL %s", loader.ErrInvalid, what)
	}
	if n == 0 {
		return nil, nil
	}
	return unsafe.Slice((*byte)(p), uint64(n)), nil
}

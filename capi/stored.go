package main

// Stored bytes, their parts and the load plan: what a load spread over
// several ranks moves between them (loader/stored.go, loader/part.go).

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define SZ_NO_PROTOTYPES
#include "splitzip.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/splitzip/splitzip/loader"
)

//export sz_stored_size
func sz_stored_size(h C.uintptr_t, index C.uint64_t, size *C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		if size == nil {
			return fmt.Errorf("%w: NULL size", loader.ErrInvalid)
		}
		n, err := l.StoredSize(int(index))
		*size = C.uint64_t(n)
		return err
	})
}

//export sz_read_stored
func sz_read_stored(h C.uintptr_t, index C.uint64_t, dst unsafe.Pointer, capacity C.uint64_t, size *C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		b, err := hostBytes(dst, capacity, "destination")
		if err != nil {
			return err
		}
		n, err := l.ReadStored(int(index), b)
		if size != nil {
			*size = C.uint64_t(n)
		}
		return err
	})
}

//export sz_decode_host
func sz_decode_host(h C.uintptr_t, index C.uint64_t, src unsafe.Pointer, srclen C.uint64_t, dst unsafe.Pointer, capacity C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		in, err := hostBytes(src, srclen, "source")
		if err != nil {
			return err
		}
		out, err := hostBytes(dst, capacity, "destination")
		if err != nil {
			return err
		}
		return l.DecodeHost(int(index), in, out)
	})
}

//export sz_part
func sz_part(h C.uintptr_t, index C.uint64_t, src unsafe.Pointer, srclen, lo, hi C.uint64_t, dst unsafe.Pointer, capacity C.uint64_t, size *C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		in, err := hostBytes(src, srclen, "source")
		if err != nil {
			return err
		}
		part, err := l.PartOf(int(index), in, uint64(lo), uint64(hi))
		if err != nil {
			return err
		}
		if size != nil {
			*size = C.uint64_t(len(part))
		}
		out, err := hostBytes(dst, capacity, "destination")
		if err != nil {
			return err
		}
		if len(out) < len(part) {
			return fmt.Errorf("%w: the part takes %d bytes, %d given", loader.ErrTooSmall, len(part), len(out))
		}
		copy(out, part)
		return nil
	})
}

//export sz_decode_part
func sz_decode_part(h C.uintptr_t, index C.uint64_t, part unsafe.Pointer, partlen, lo, hi C.uint64_t, dst unsafe.Pointer, capacity C.uint64_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		in, err := hostBytes(part, partlen, "part")
		if err != nil {
			return err
		}
		out, err := hostBytes(dst, capacity, "destination")
		if err != nil {
			return err
		}
		return l.DecodePart(int(index), in, uint64(lo), uint64(hi), out)
	})
}

//export sz_plan
func sz_plan(h C.uintptr_t, ranks C.int, rules *C.char, buf *C.char, capacity C.size_t, size *C.size_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		r := ""
		if rules != nil {
			r = C.GoString(rules)
		}
		js, err := l.Plan(int(ranks), r)
		if err != nil {
			return err
		}
		return putJSON(js, "plan", buf, capacity, size)
	})
}

//export sz_metadata
func sz_metadata(h C.uintptr_t, buf *C.char, capacity C.size_t, size *C.size_t) C.sz_status {
	return call(h, func(l *loader.Loader) error {
		m, err := l.Metadata()
		if err != nil {
			return err
		}
		js, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return putJSON(js, "metadata", buf, capacity, size)
	})
}

// putJSON writes js, NUL-terminated, into buf (capacity bytes) and its
// size with the NUL into *size (when not NULL), also when buf is too
// small (ErrTooSmall naming what, "the plan"): a caller asks once with
// no buffer, then again with one of that size.
func putJSON(js []byte, what string, buf *C.char, capacity C.size_t, size *C.size_t) error {
	if size != nil {
		*size = C.size_t(len(js) + 1)
	}
	if buf == nil || uint64(capacity) < uint64(len(js))+1 {
		return fmt.Errorf("%w: the %s takes %d bytes", loader.ErrTooSmall, what, len(js)+1)
	}
	copyString(string(js), buf, capacity)
	return nil
}

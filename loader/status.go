package loader

import (
	"errors"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/shardcache"
)

// Status is the class of an error, as the C ABI's sz_status reports it;
// the values are those of capi/splitzip.h (a test checks).
type Status int

// Statuses, in the order of sz_status.
const (
	StatusOK Status = iota
	StatusInvalid
	StatusNotFound
	StatusCorrupt
	StatusSourceChanged
	StatusTooSmall
	StatusNoGPU
	StatusCUDA
	StatusIO
	StatusInternal
)

// StatusOf classifies an error of the loader, so that the C ABI needs no
// package but this one to map errors to codes.
func StatusOf(err error) Status {
	var ce *cuda.Error
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, ErrInvalid):
		return StatusInvalid
	case errors.Is(err, ErrNotFound):
		return StatusNotFound
	case errors.Is(err, ErrTooSmall):
		return StatusTooSmall
	case errors.Is(err, shardcache.ErrSourceChanged), errors.Is(err, shardcache.ErrSourceMissing):
		return StatusSourceChanged
	case errors.Is(err, codec.ErrCorrupt), errors.Is(err, codec.ErrChecksum), errors.Is(err, codec.ErrSize), errors.Is(err, codec.ErrVersion),
		errors.Is(err, gpu.ErrKernel), errors.Is(err, shardcache.ErrIndexCorrupt), errors.Is(err, shardcache.ErrObjectCorrupt),
		errors.Is(err, shardcache.ErrNotCache), errors.Is(err, shardcache.ErrVersion):
		return StatusCorrupt
	case errors.Is(err, cuda.ErrNoDriver):
		return StatusNoGPU
	case errors.As(err, &ce):
		return StatusCUDA
	}
	return StatusIO
}

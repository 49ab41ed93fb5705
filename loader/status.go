package loader

import (
	"errors"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/internal/failure"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
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
// package but this one to map errors to codes. The loader's own sentinels
// and the sources that changed decide first; every other error takes the
// status of its kind in the CLI's error model (package failure): usage is
// StatusInvalid, integrity StatusCorrupt, device StatusCUDA, and the rest
// (input, resource, interrupted, and errors of no known kind) StatusIO.
// A cache this build cannot read (not a cache, an unknown version) stays
// StatusCorrupt, as the C ABI has always reported it.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, ErrInvalid):
		return StatusInvalid
	case errors.Is(err, ErrNotFound):
		return StatusNotFound
	case errors.Is(err, ErrTooSmall):
		return StatusTooSmall
	case errors.Is(err, shardcache.ErrSourceChanged), errors.Is(err, shardcache.ErrSourceMissing), errors.Is(err, transport.ErrShortRead):
		return StatusSourceChanged
	case errors.Is(err, shardcache.ErrNotCache), errors.Is(err, shardcache.ErrVersion), errors.Is(err, codec.ErrVersion):
		return StatusCorrupt
	case errors.Is(err, cuda.ErrNoDriver):
		return StatusNoGPU
	}
	switch failure.KindOf(err) {
	case failure.Usage:
		return StatusInvalid
	case failure.Integrity:
		return StatusCorrupt
	case failure.Device:
		return StatusCUDA
	}
	return StatusIO
}

// FileOf returns the file err is about, where its chain names one
// (failure.Locate): a cache object that fails its checksum or is missing,
// a source shard that changed or vanished, a file that could not be read;
// "" for errors about no file. The C ABI reports it by sz_last_error_file.
func FileOf(err error) string {
	if te := (*shardcache.TensorError)(nil); errors.As(err, &te) {
		return te.File
	}
	file, _ := failure.Locate(err)
	return file
}

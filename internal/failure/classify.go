package failure

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"

	"github.com/splitzip/splitzip/checkpoint"
	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/distplan"
	"github.com/splitzip/splitzip/gpu"
	"github.com/splitzip/splitzip/gpu/cuda"
	"github.com/splitzip/splitzip/oci"
	"github.com/splitzip/splitzip/pipeline"
	"github.com/splitzip/splitzip/s3store"
	"github.com/splitzip/splitzip/safetensors"
	"github.com/splitzip/splitzip/shardcache"
	"github.com/splitzip/splitzip/transport"
	"github.com/splitzip/splitzip/vmm"
)

// rule is one row of the classification: errors matching any of the
// sentinels (errors.Is) are of the kind.
type rule struct {
	kind      Kind
	sentinels []error
}

// rules are tried in order; the first row with a match decides. The order
// settles errors that match several rows: a stop by the user before
// anything, a missing driver before what the driver call was for, a
// source that changed before the mismatch it causes, a broken cache before
// the file errors its reads may carry.
var rules = []rule{
	{Interrupted, []error{context.Canceled, context.DeadlineExceeded}},
	{Device, []error{cuda.ErrNoDriver, cuda.ErrNoBatchCopy}},
	{Usage, []error{
		pipeline.ErrOutputInSource, pipeline.ErrOption, pipeline.ErrOutputExists, transport.ErrOption, distplan.ErrPlan,
		shardcache.ErrAmbiguousSource, shardcache.ErrInsideCache, shardcache.ErrSourceRecorded, shardcache.ErrOccupied,
		s3store.ErrURL, s3store.ErrOptions, oci.ErrReference, oci.ErrLayoutRef, checkpoint.ErrSeveralIndexes, gpu.ErrOption,
	}},
	{Input, []error{
		shardcache.ErrSourceChanged, shardcache.ErrSourceMissing, shardcache.ErrHostDecode, transport.ErrShortRead,
		vmm.ErrDuplicateName, distplan.ErrDuplicateName, shardcache.ErrNotSelfContained,
	}},
	{Integrity, []error{
		codec.ErrCorrupt, codec.ErrChecksum, codec.ErrSize,
		entropy.ErrStream, entropy.ErrCode, entropy.ErrPayload,
		shardcache.ErrIndexCorrupt, shardcache.ErrIndexLost, shardcache.ErrObjectCorrupt, shardcache.ErrPinCorrupt,
		pipeline.ErrMismatch, transport.ErrMismatch, gpu.ErrKernel, oci.ErrBlob,
	}},
	{Input, []error{
		shardcache.ErrNotCache, shardcache.ErrVersion, shardcache.ErrNotFound, shardcache.ErrNoCheckpoint,
		codec.ErrVersion, codec.ErrTooLarge,
		safetensors.ErrFormat, checkpoint.ErrNoShards, oci.ErrNotArtifact, shardcache.ErrOtherForm, oci.ErrNoTag, oci.ErrNotFound, s3store.ErrNotFound, s3store.ErrDenied, s3store.ErrNoCredentials,
		fs.ErrNotExist, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EIO,
	}},
	{Resource, []error{
		shardcache.ErrLocked, shardcache.ErrInUse, transport.ErrTooLarge, s3store.ErrChanged,
		syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EFBIG, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE,
	}},
}

// classify is KindOf for an error that states no kind of its own.
func classify(err error) Kind {
	for _, r := range rules {
		for _, s := range r.sentinels {
			if errors.Is(err, s) {
				return r.kind
			}
		}
	}
	var ce *cuda.Error
	if errors.As(err, &ce) {
		return Device
	}
	if errors.Is(err, fs.ErrPermission) {
		// Permission denied reading an input is an input that cannot be
		// used; denied creating, writing or removing is an output the
		// machine refuses.
		if writing(err) {
			return Resource
		}
		return Input
	}
	return Internal
}

// writing reports whether err is about a file being created, written,
// renamed or removed, by the operation its *fs.PathError or
// *os.LinkError names (a link or a rename is always a write).
func writing(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		switch pe.Op {
		case "write", "mkdir", "mkdirat", "remove", "unlinkat", "truncate", "chmod", "chown", "chtimes", "sync", "fsync", "symlink", "link", "rename", "create", "mkdirall":
			return true
		}
		return false
	}
	var le *os.LinkError
	return errors.As(err, &le)
}

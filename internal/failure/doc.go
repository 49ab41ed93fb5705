// Package failure is splitzip's one error model: every error a command can
// end with is of one Kind, and each Kind has one exit code for every
// command of the CLI.
//
//	Kind         exit  what it means
//	usage           2  the command line is wrong: an unknown flag, a bad value, a missing argument, an output that already exists
//	input           3  an input cannot be used: a file missing or unreadable, not a safetensors
//	                   file, not a cache (or one of a version this build does not read), a
//	                   source that changed or vanished since it was compressed
//	integrity       1  stored data is wrong: a corrupt cache or payload, a checksum mismatch,
//	                   a tensor that does not round-trip (verify's failure)
//	resource        4  the machine refused: disk full, quota, a read-only or unwritable
//	                   output, memory, a cache locked by another command, a network or
//	                   registry that fails or throttles after retries
//	device          5  no GPU or driver, or a CUDA call failed
//	internal       70  a bug: an error no other kind describes
//	interrupted   130  Ctrl-C or SIGTERM ended the run
//
// KindOf classifies an error by errors.Is and errors.As over the sentinel
// errors the packages below the CLI already return (codec.ErrChecksum,
// shardcache.ErrObjectCorrupt, safetensors.ErrFormat, fs.ErrNotExist,
// syscall.ENOSPC, ...), so those packages need not know this one. An error
// can also state its kind: Mark wraps one with a Kind, and any error in a
// chain with a FailureKind() Kind method decides for itself.
//
// Message rewrites an error's text for people (no Go operation names such
// as "open" or "lstat" before a path), and Locate finds the file and the
// tensor an error is about, for the CLI's JSON error document.
package failure

// Package shardcache stores compressed checkpoints: content-addressed
// objects (fixed-codec payloads and raw bytes) and an index that finds a
// payload by content key and by the source slice it came from (shard file,
// byte offset, byte size).
//
// Layout of a cache directory:
//
//	SPLITZIP-CACHE         marks the directory as a cache from its creation
//	splitzip.json          the index, written last and atomically
//	objects/ab/<hex>       objects, named by the BLAKE3-256 of the raw bytes
//	tmp/                   objects being written
//	lock                   held while a writer is open
//
// Every file is written under tmp/ and renamed into place, and the index is
// renamed last, so a crash, a kill or a full disk never leaves an index that
// points at a missing or partial object; the index itself is checked by
// a checksum of its body (SHA-256 in the JSON versions, BLAKE3 since
// version 4). Since version 5 the statistics that only inspect and verify
// read (values, bits, escapes) follow the body in a section of their own,
// with its own length and BLAKE3, read on first use (Index.LoadStats), so
// that opening a cache to load it reads less. docs/FORMAT.md specifies the
// index format.
package shardcache

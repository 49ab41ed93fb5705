// Package nodeshare keeps one host copy of a checkpoint's payloads per
// machine: processes that load the same payloads share one read-only
// segment of memory instead of each reading and pinning its own.
//
// A segment is an anonymous memory file (memfd_create) that its maker
// fills, then seals against writes and any change of size, and maps
// read-only. The segment has no name in any file system: its memory
// belongs to the processes that hold it open or mapped, and the kernel
// frees it when the last of them exits or crashes, so a crash leaves
// nothing behind to clean up. Others find it through a small holders file
// in Options.Dir (by default /dev/shm/splitzip-UID) that lists the
// process and descriptor of each holder; they open the segment through
// /proc/PID/fd/FD of a holder still alive, check its header (magic, id,
// size, complete) and its seals, and map it read-only. A file lock on
// ID.lock serializes making, attaching and leaving, so two processes
// never make two copies of one id; stale lines of holders that died are
// dropped by the next process to take the lock.
//
// Within one process, opens of one id share one mapping (reference
// counted), so that Options.Pin, which registers the mapping with the GPU
// driver, runs once per process and Options.Unpin once at the last
// Close.
//
// Segments are trusted as far as the processes of one user are: only
// processes of the same user can open another's descriptor through /proc,
// the same processes could change the cache files themselves, and a
// sealed segment cannot change after its maker checked what it wrote.
package nodeshare

/*
 * splitzip.h - C ABI of libsplitzip.so, version 12.
 *
 * Build: make capi  (go build -buildmode=c-shared -o libsplitzip.so ./capi)
 *
 * A loader opens a splitzip cache, finds tensors by name, by content key
 * or by the source slice they came from (shard file, byte offset, byte
 * size), and gets each tensor's original bytes, bit for bit, either into
 * host memory (sz_read_host) or into device ranges it owns on a CUDA
 * stream it owns (sz_upload_batch, sz_upload), in the primary context of
 * the device (the one the CUDA runtime and PyTorch use). Tensors with a SplitZip payload
 * are copied compressed and decoded in place on the GPU; the others are
 * copied raw from their source shard. Small tensors (stored in up to 2 MiB
 * for a local cache, 256 KiB when resident or remote) are packed several
 * to a copy and written to their ranges by one kernel.
 *
 * Errors: every function returns an sz_status; SZ_OK is 0. The message of
 * the calling thread's last failed call on a handle is returned by
 * sz_last_error, and the file it is about (a damaged cache object, a
 * source shard that changed or is missing), if any, by
 * sz_last_error_file (threads do not see each other's; the error of a
 * thread that has ended is let go, and not shown to a later thread given
 * its id, unless that one started within the same 10 ms, the resolution
 * of the threads' start times in /proc). sz_open writes
 * its message into the caller's buffer. A Go panic never crosses this
 * boundary: it is reported as SZ_ERR_INTERNAL.
 *
 * Threads: every function may be called from several threads at once.
 *
 * Ownership and lifetimes: a handle from sz_open is owned by the caller
 * and freed by sz_close (after which it is invalid; using it returns
 * SZ_ERR_INVALID). Strings and arrays passed in are copied during the
 * call. Device memory and streams passed in stay the caller's; the library
 * touches a stream only during calls that name it, so the caller may
 * destroy it once its uploads are done (sz_close waits for the library's
 * own events, never for the stream). An event from an
 * upload is owned by the library until sz_event_release. Uploads stage
 * data in pinned host memory owned by the library: up to 344 MiB for each
 * (device, stream) pair a handle uses (less on machines with fewer than 8
 * cores), taken on its first upload there. sz_close returns it to a pool
 * (up to 1 GiB per device and stream) shared by the open handles, so that
 * a handle opened while another is open pins nothing and loads the decode
 * kernel no more; the last handle to close frees the pool, the kernel and
 * the context. A staging buffer is reused only after the work on the
 * stream that reads it has completed, so the caller need not wait before
 * the next call.
 */
#ifndef SPLITZIP_H
#define SPLITZIP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPLITZIP_ABI_VERSION 13

typedef enum {
    SZ_OK = 0,
    SZ_ERR_INVALID = 1,        /* bad argument or handle */
    SZ_ERR_NOT_FOUND = 2,      /* no such tensor */
    SZ_ERR_CORRUPT = 3,        /* a payload or the cache is corrupt */
    SZ_ERR_SOURCE_CHANGED = 4, /* a source shard changed since compression, or is missing for a tensor only in it */
    SZ_ERR_TOO_SMALL = 5,      /* a destination or buffer is smaller than what it must hold */
    SZ_ERR_NO_GPU = 6,         /* no CUDA driver or device */
    SZ_ERR_CUDA = 7,           /* a CUDA call failed */
    SZ_ERR_IO = 8,             /* reading a file failed */
    SZ_ERR_INTERNAL = 9        /* a bug: please report it */
} sz_status;

/* sz_tensor describes one tensor. */
typedef struct {
    uint64_t index;      /* 0 .. sz_count()-1 */
    uint64_t nbytes;     /* size of the original tensor */
    uint64_t offset;     /* byte offset in its source shard */
    uint64_t stored;     /* a fixed-rate payload's size, else nbytes (sz_stored_size: any payload's) */
    uint32_t ndim;       /* the tensor's rank; shape[] holds the first 8 dims, sz_shape all */
    uint32_t compressed; /* 1 when a fixed-rate payload exists, which an upload decodes in place on the GPU
                          * (an entropy payload is 0 here: sz_stored_size tells it apart) */
    uint64_t shape[8];
    char dtype[16];      /* safetensors dtype string, NUL-terminated */
} sz_tensor;

/* sz_pack_info describes a pack sz_pack wrote (ABI 10): what sz_scatter
 * needs, as sz_pack filled it in. */
typedef struct {
    uint64_t staged;         /* bytes of the pack */
    uint64_t count;          /* tensors */
    uint64_t units;          /* the scatter kernel's units of work */
    uint64_t entropy_at;     /* SZ_PACK_ENTROPY: where the entropy payloads' descriptors start */
    uint64_t entropy_count;  /* the entropy payloads kept (0: none, and the fields below unused) */
    uint64_t entropy_units;  /* the batch decode's units of work */
    uint64_t entropy_buf;    /* its shared buffer a warp */
    uint64_t entropy_chunks; /* the most chunks one of the payloads has */
} sz_pack_info;

/* Flags of sz_pack_size and sz_pack. SZ_PACK_ENTROPY keeps entropy
 * payloads in a pack as they are stored, decoded on the device by
 * sz_scatter (one batch launch after the scatter): fewer bytes a copy, a
 * slower decode than the fixed rate's; not for sz_scatter_routed. Without
 * it they are decoded when the pack is made. */
#define SZ_PACK_ENTROPY 1

/* The library's own build defines SZ_NO_PROTOTYPES: cgo declares the
 * functions itself, without const. */
#ifndef SZ_NO_PROTOTYPES

/* sz_abi_version returns SPLITZIP_ABI_VERSION of the library. */
int sz_abi_version(void);

/* sz_open opens the cache in cache_dir. source may be NULL when the cache
 * holds one checkpoint, else the root directory of the checkpoint to
 * serve. On failure the message is written into errbuf (errcap bytes).
 * A cache_dir that is no splitzip cache, and a cache of several
 * checkpoints opened with a NULL source, are SZ_ERR_INVALID. The handle
 * holds the cache open for reading until sz_close, so that `splitzip gc`
 * removes nothing meanwhile (it refuses the cache); while a gc runs,
 * sz_open waits for it to finish, up to two minutes. */
sz_status sz_open(const char *cache_dir, const char *source, uintptr_t *handle, char *errbuf, size_t errcap);

/* sz_close frees the handle, waiting for its uploads. */
sz_status sz_close(uintptr_t handle);

/* sz_last_error copies the message of the calling thread's last failed
 * call on the handle ("" if none), NUL-terminated; a message longer than
 * cap - 1 bytes is cut short there (it is for people to read: the status
 * and sz_last_error_file are what code acts on). */
sz_status sz_last_error(uintptr_t handle, char *buf, size_t cap);

/* sz_last_error_file (ABI 11) copies, NUL-terminated, the path of the
 * file the calling thread's last failed call on the handle is about, so
 * that a caller can act on it (delete or fetch again a damaged object):
 * for SZ_ERR_CORRUPT the cache object that failed its checksum or is
 * missing (a pack's file for a member of one), for
 * SZ_ERR_SOURCE_CHANGED the source shard, for SZ_ERR_IO the file that
 * could not be read; "" when the failure is about no file (or there was
 * none). The path is as the library opened it (relative when the cache
 * was opened by a relative path). *size, when not NULL, receives the
 * bytes it takes with its NUL; a buffer smaller than that (or NULL) is
 * SZ_ERR_TOO_SMALL and receives "" (cap > 0), never a path cut short.
 * Neither this call nor sz_last_error changes what the other reports. */
sz_status sz_last_error_file(uintptr_t handle, char *buf, size_t cap, size_t *size);

/* sz_count returns the number of tensors of the checkpoint. */
sz_status sz_count(uintptr_t handle, uint64_t *count);

/* sz_info describes tensor index in *info, when not NULL; name (cap
 * bytes) receives its name, NUL-terminated, when not NULL. A name that does not fit in cap bytes,
 * or a dtype of more than 15 bytes, is SZ_ERR_TOO_SMALL, never a silent
 * truncation. A tensor of more than 8 dimensions has its true rank in
 * ndim and its first 8 dims in shape: read them all with sz_shape.
 * safetensors allows NUL characters in names: such a name reads shorter
 * as a C string; sz_name gives its length. */
sz_status sz_info(uintptr_t handle, uint64_t index, sz_tensor *info, char *name, size_t cap);

/* sz_name (ABI 12) copies tensor index's name, every byte of it (NUL
 * characters included) and a terminating NUL, into buf, and its length
 * in bytes (without the terminating NUL) into *size when not NULL. With
 * buf NULL and cap 0 it gives the length alone (size must then not be
 * NULL; a NULL buf with cap > 0 is SZ_ERR_INVALID); a buffer of cap <=
 * the length is SZ_ERR_TOO_SMALL and receives "" (cap > 0). */
sz_status sz_name(uintptr_t handle, uint64_t index, char *buf, size_t cap, size_t *size);

/* sz_shape writes tensor index's rank into *ndim and its dims into
 * shape[0 .. ndim-1]; when cap < ndim it writes none and returns
 * SZ_ERR_TOO_SMALL with *ndim set, so the caller can retry. (ABI 3) */
sz_status sz_shape(uintptr_t handle, uint64_t index, uint64_t *shape, size_t cap, uint32_t *ndim);

/* Lookups return the tensor's index. sz_find_name_len (ABI 12) takes a
 * name of len bytes, which may hold NUL characters. */
sz_status sz_find_name(uintptr_t handle, const char *name, uint64_t *index);
sz_status sz_find_name_len(uintptr_t handle, const char *name, size_t len, uint64_t *index);
sz_status sz_find_slice(uintptr_t handle, const char *shard, uint64_t offset, uint64_t size, uint64_t *index);
sz_status sz_find_key(uintptr_t handle, const char *key, uint64_t *index);

/* sz_read_host writes tensor index's original bytes into dst (at least
 * nbytes), decoding on the CPU. A payload (fixed-rate or entropy) is
 * decoded from the cache and checked, even when its source shard is
 * there: a corrupt one is SZ_ERR_CORRUPT. Tensors stored raw are read
 * from their source shard (or the cache's copy of it); the shard is
 * checked unchanged by its size and modification time, not hashed, so a
 * shard edited in place that keeps both serves the edited bytes:
 * `splitzip verify` (or `splitzip load --check`) finds such an edit. */
sz_status sz_read_host(uintptr_t handle, uint64_t index, void *dst, uint64_t cap);

/* sz_upload_batch enqueues on stream (a CUstream/cudaStream_t of device
 * ordinal device; 0 is the legacy default stream) the transfer of n
 * tensors, indices[k] into the device range [dsts[k], dsts[k] + caps[k]),
 * and returns in *event one event recorded after all of them. Every
 * argument is checked before anything is enqueued: indices, capacities
 * (caps[k] >= nbytes), non-NULL destinations, 16-byte aligned
 * destinations for compressed tensors, and that no source shard changed.
 * Files are read by several threads. If a read fails (a payload failing
 * its checksum, a short read), the call returns that error naming the
 * tensor and no event, after enqueuing the rest; the failed tensor's
 * range then holds garbage. Errors of enqueued work (a corrupt payload
 * found by the decode kernel, a failed copy) are reported by
 * sz_event_wait. */
sz_status sz_upload_batch(uintptr_t handle, uint64_t n, const uint64_t *indices, int device, const uint64_t *dsts,
                          const uint64_t *caps, uintptr_t stream, uintptr_t *event);

/* sz_upload enqueues on stream (a CUstream/cudaStream_t of device
 * ordinal device; 0 is the legacy default stream) the transfer of tensor
 * index into the device range [dst, dst + cap), cap >= nbytes, and
 * returns an event recorded after it: sz_upload_batch of one tensor. The
 * caller may make its streams wait on it (cuStreamWaitEvent or
 * cudaStreamWaitEvent) or call sz_event_wait. */
sz_status sz_upload(uintptr_t handle, uint64_t index, int device, uint64_t dst, uint64_t cap, uintptr_t stream, uintptr_t *event);

/* Spreading one read per node over several ranks (ABI 4): a tensor's
 * stored bytes (a payload, checked whole, or the raw bytes) are read by
 * one rank, sent to the others, and decoded by each.
 * sz_stored_size gives their size; sz_read_stored writes them into dst
 * (cap bytes; *size, when not NULL, receives their size, also with
 * SZ_ERR_TOO_SMALL); sz_decode_host decodes srclen stored bytes of
 * tensor index from src into dst (cap >= nbytes), checking them.
 * sz_plan writes, NUL-terminated, the JSON plan of a load onto ranks
 * ranks under rules ("PATTERN=replicate|shard:DIM,...", NULL for all
 * replicated): each tensor's reader rank and parts (docs/DESIGN.md,
 * section 6); *size receives the bytes it takes, also with
 * SZ_ERR_TOO_SMALL. */
sz_status sz_stored_size(uintptr_t handle, uint64_t index, uint64_t *size);
sz_status sz_read_stored(uintptr_t handle, uint64_t index, void *dst, uint64_t cap, uint64_t *size);
sz_status sz_decode_host(uintptr_t handle, uint64_t index, const void *src, uint64_t srclen, void *dst, uint64_t cap);
sz_status sz_plan(uintptr_t handle, int ranks, const char *rules, char *buf, size_t cap, size_t *size);

/* sz_metadata (ABI 13) writes, NUL-terminated, a JSON array of the
 * checkpoint's shards in its order, each {"shard": its file name,
 * "metadata": its header's __metadata__ object of strings, or null}, read
 * from the headers the cache holds (no source file is needed); *size
 * receives the bytes it takes, also with SZ_ERR_TOO_SMALL. */
sz_status sz_metadata(uintptr_t handle, char *buf, size_t cap, size_t *size);

/* Row parts (ABI 5): a rank whose share of a tensor is its bytes [lo,
 * hi) (a shard along the first dimension) needs only the payload chunks
 * covering them. sz_part cuts that part from srclen stored bytes of
 * tensor index (as sz_read_stored gives them) into dst (cap bytes; *size,
 * when not NULL, receives its size, also with SZ_ERR_TOO_SMALL; cap =
 * srclen + 128 + 16 * (nbytes / 32768 + 2) always suffices): the chunks
 * with a checksum of their own for a payload (the whole payload for an
 * entropy payload of version 1), the bytes for a raw tensor.
 * sz_decode_part writes the tensor's bytes [lo, hi) into dst (cap >= hi -
 * lo) from such a part, checking it. For payloads lo and hi fall on
 * value boundaries (SZ_ERR_INVALID otherwise). */
sz_status sz_part(uintptr_t handle, uint64_t index, const void *src, uint64_t srclen, uint64_t lo, uint64_t hi,
                  void *dst, uint64_t cap, uint64_t *size);
sz_status sz_decode_part(uintptr_t handle, uint64_t index, const void *part, uint64_t partlen, uint64_t lo,
                         uint64_t hi, void *dst, uint64_t cap);

/* sz_set_resident (ABI 4), with on nonzero, makes the handle's uploads
 * keep what they read (payloads and raw tensor bytes) in pinned host
 * memory, once per upload stream, so that a later upload of the same
 * tensor on that stream reads no file and checks nothing again: the
 * pinned-host tier of an offload runtime. Pinned memory grows to the
 * bytes uploaded. Call it before the first upload (after it:
 * SZ_ERR_INVALID). */
sz_status sz_set_resident(uintptr_t handle, int on);

/* sz_set_shared (ABI 8), with on nonzero, makes the handle's uploads
 * resident (sz_set_resident) with the payloads' copies in one host copy
 * that the processes of this machine loading the same payloads share:
 * the first process's first upload stream reads and checks every payload
 * into it, other streams and processes attach and read none. The memory
 * is freed when the last process holding it closes its handle, exits or
 * crashes. The holders' folder is $SPLITZIP_SHARE_DIR as the environment
 * holds it at this call; unset or empty there, it is the variable's value
 * when the library was loaded, else /dev/shm/splitzip-UID. Call it
 * before the first upload (after it: SZ_ERR_INVALID). */
sz_status sz_set_shared(uintptr_t handle, int on);

/* Layer packs (ABI 5; flags ABI 10): the stored bytes of n tensors
 * (fixed-rate payloads, checked whole, and raw tensors; an entropy
 * payload decoded, as a fixed-rate payload for BF16 when that is
 * smaller, else raw, or with SZ_PACK_ENTROPY kept and checked whole)
 * behind a table that sends each, decoded, to its device
 * range [dsts[k], dsts[k] + caps[k]), in one buffer the caller keeps
 * where it likes: pinned host memory, copied to the device before each
 * use, or device memory. sz_scatter then writes every tensor of a pack
 * in device memory at base to its range with one kernel launch on the
 * caller's stream (two for a pack that keeps entropy payloads: the
 * scatter, then their batch decode), and only enqueues: with
 * sz_gpu_prepare called once before, it can be captured in a CUDA graph
 * and replayed. The kernels read the table and the descriptors from
 * device memory and check every entry there: an invalid one writes
 * nothing and is reported by sz_scatter_check, which waits for the
 * stream and clears what it reports. Pass sz_scatter the sz_pack_info
 * sz_pack filled in, unchanged (info it cannot have written is
 * SZ_ERR_INVALID); a pack that keeps entropy payloads is not for
 * sz_scatter_routed.
 * sz_pack_size gives the buffer's size (a bound when entropy payloads
 * are packed); sz_pack fills it (cap bytes) and *info (info->staged: the
 * bytes the pack took). Payload destinations must be 16-byte aligned. */
sz_status sz_pack_size(uintptr_t handle, uint64_t n, const uint64_t *indices, uint64_t flags, uint64_t *size);
sz_status sz_pack(uintptr_t handle, uint64_t n, const uint64_t *indices, const uint64_t *dsts, const uint64_t *caps,
                  void *buf, uint64_t cap, uint64_t flags, sz_pack_info *info);
sz_status sz_gpu_prepare(uintptr_t handle, int device);
sz_status sz_scatter(uintptr_t handle, int device, uint64_t base, const sz_pack_info *info, uintptr_t stream);
sz_status sz_scatter_check(uintptr_t handle, int device, uintptr_t stream);

/* sz_event_wait blocks until the upload behind event has completed and
 * returns the errors of its work (a failed copy, a payload the decode
 * kernel found corrupt). It waits for the event, not for the stream. */
sz_status sz_event_wait(uintptr_t handle, uintptr_t event);

/* sz_event_release frees an event from sz_upload or sz_upload_batch; the
 * upload itself goes on. */
sz_status sz_event_release(uintptr_t handle, uintptr_t event);

/* sz_release_idle (ABI 6) frees what the uploads of closed handles left
 * for later ones: a device's context reference, its decode kernel and up
 * to 1 GiB of pinned staging per device and stream, kept after the last
 * handle using them closes so that the next handle's first upload starts
 * at once. *closed (when not NULL) is how many such sets it freed. */
sz_status sz_release_idle(int *closed);

/* sz_scatter_routed (ABI 7) enqueues one scatter launch over n candidate
 * packs, each written as sz_scatter would write it, of which it writes
 * those whose byte of want (device memory, n bytes) is nonzero. packs
 * (device memory, 8-byte aligned) holds n entries of four uint64s: the
 * pack's base (device memory, or pinned host memory the device can
 * address), then its sz_pack_info's staged, count and units. Both tables
 * are read by the kernel when it runs, so a CUDA graph that captured the
 * launch writes what they say at each replay: device-side tables decide
 * what is written. active is how many candidates are wanted at once, for
 * the launch's shape. Errors as sz_scatter's, through sz_scatter_check. */
sz_status sz_scatter_routed(uintptr_t handle, int device, uint64_t packs, uint64_t want, uint64_t n, uint64_t active,
                            uintptr_t stream);

/* Products straight from fixed payloads (ABI 9): sz_gemv enqueues on
 * stream (a CUstream of device, 0 for the default stream) y = W x for
 * batch (1 to 16) vectors, where W is the rows x cols BF16 matrix (a
 * Linear's weight, row-major; cols a multiple of 16) whose fixed payload
 * (sz_read_stored of a tensor stored fixed) lies in the w_len bytes at w
 * in device memory, head is a host copy of that payload's first 64 bytes
 * (its header; the payload size it gives must fit in w_len), x
 * is batch x cols BF16 and y batch x rows BF16, row-major; w and x
 * 16-byte aligned. The weights are decoded in registers on the way to the
 * multiply, never written out; the result equals, bit for bit, a fixed
 * reduction order (docs/DESIGN.md 3.4), within 2 BF16 ulps (plus the
 * fp32 accumulation) of W x. It only
 * enqueues, so it can be captured in a CUDA graph once sz_gemv_prepare
 * has loaded the kernels; operands that do not fit are SZ_ERR_INVALID; a
 * payload the kernel finds bad is reported by sz_gemv_check (which waits
 * for the stream), and its rows of y are garbage. */
sz_status sz_gemv_prepare(uintptr_t handle, int device);
sz_status sz_gemv(uintptr_t handle, int device, uint64_t w, uint64_t w_len, const uint8_t *head, uint64_t rows,
                  uint64_t cols, uint64_t x, uint64_t y, int batch, uintptr_t stream);
sz_status sz_gemv_check(uintptr_t handle, int device, uintptr_t stream);

#endif /* SZ_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif
#endif

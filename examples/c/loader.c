/*
 * A loader in C: opens a splitzip cache, looks every tensor up by name,
 * reads its original bytes into host memory and prints a line per tensor
 * (name, dtype, bytes, FNV-1a 64 of the bytes, and 1 where the cache holds
 * it compressed, else 0). With a CUDA device, a
 * loader uploads into device memory it owns instead, all tensors at once:
 *
 *   uint64_t idx[N], dst[N], cap[N];  // tensor indices, device pointers, sizes
 *   uintptr_t ev;
 *   sz_upload_batch(h, N, idx, 0, dst, cap, (uintptr_t)stream, &ev);
 *   cuStreamWaitEvent(compute_stream, (CUevent)ev, 0);  // or sz_event_wait
 *   ...
 *   sz_event_wait(h, ev);  // reports decode errors too
 *   sz_event_release(h, ev);
 *
 *   make capi    # in the repository root: python/splitzip/libsplitzip.so
 *   cc -o loader loader.c -I../../capi -L../../python/splitzip -lsplitzip
 *   LD_LIBRARY_PATH=../../python/splitzip ./loader CACHE
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "splitzip.h"

static uint64_t fnv1a(const unsigned char *p, uint64_t n) {
    uint64_t h = 14695981039346656037ull;
    for (uint64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CACHE\n", argv[0]);
        return 2;
    }
    if (sz_abi_version() != SPLITZIP_ABI_VERSION) {
        fprintf(stderr, "libsplitzip ABI %d, header %d\n", sz_abi_version(), SPLITZIP_ABI_VERSION);
        return 1;
    }
    char err[512];
    uintptr_t h;
    if (sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_OK) {
        fprintf(stderr, "sz_open: %s\n", err);
        return 1;
    }
    uint64_t n;
    sz_count(h, &n);
    for (uint64_t i = 0; i < n; i++) {
        sz_tensor t;
        char name[256];
        uint64_t j;
        if (sz_info(h, i, &t, name, sizeof name) != SZ_OK || sz_find_name(h, name, &j) != SZ_OK || j != i) {
            sz_last_error(h, err, sizeof err);
            fprintf(stderr, "tensor %" PRIu64 ": %s\n", i, err);
            return 1;
        }
        unsigned char *buf = malloc(t.nbytes ? t.nbytes : 1);
        sz_status st = sz_read_host(h, i, buf, t.nbytes);
        if (st != SZ_OK) {
            sz_last_error(h, err, sizeof err);
            fprintf(stderr, "%s: status %d: %s\n", name, (int)st, err);
            return 1;
        }
        printf("%s %s %" PRIu64 " %016" PRIx64 " %u\n", name, t.dtype, t.nbytes, fnv1a(buf, t.nbytes), t.compressed);
        free(buf);
    }
    /* Bad input is an error code, never a crash. */
    if (sz_read_host(h, n, NULL, 0) != SZ_ERR_INVALID || sz_count((uintptr_t)12345, &n) != SZ_ERR_INVALID) {
        fprintf(stderr, "bad input was not rejected\n");
        return 1;
    }
    sz_close(h);
    if (sz_count(h, &n) != SZ_ERR_INVALID) {
        fprintf(stderr, "closed handle was not rejected\n");
        return 1;
    }
    return 0;
}

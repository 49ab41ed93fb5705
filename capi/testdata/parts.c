/* Row parts and layer packs through the C ABI, without a GPU: every
 * tensor's halves cut from its stored bytes (sz_part) rebuild exactly
 * the bytes sz_read_host gives (sz_decode_part); a damaged part is
 * SZ_ERR_CORRUPT; a pack of every tensor has the size sz_pack_size says;
 * the scatter calls need a GPU. Prints "ok" and the counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "splitzip.h"

static int fail(uintptr_t h, const char *what, sz_status st) {
    char err[512] = {0};
    sz_last_error(h, err, sizeof err);
    printf("%s: status %d: %s\n", what, (int)st, err);
    return 1;
}

int main(int argc, char **argv) {
    char err[256] = {0};
    uintptr_t h = 0;
    if (argc < 2 || sz_open(argv[1], NULL, &h, err, sizeof err) != SZ_OK) {
        printf("open: %s\n", err);
        return 1;
    }
    uint64_t n = 0, parts = 0;
    sz_count(h, &n);
    uint64_t *idx = calloc(n, 8), *dst = calloc(n, 8), *cap = calloc(n, 8);
    for (uint64_t i = 0; i < n; i++) {
        sz_tensor t;
        sz_status st = sz_info(h, i, &t, NULL, 0);
        if (st != SZ_OK) return fail(h, "info", st);
        idx[i] = i, dst[i] = (uint64_t)1 << 40 | i << 24, cap[i] = t.nbytes;
        unsigned char *want = malloc(t.nbytes + 1), *stored = malloc(t.stored + 1);
        uint64_t size = 0;
        if ((st = sz_read_host(h, i, want, t.nbytes)) != SZ_OK) return fail(h, "read_host", st);
        if ((st = sz_read_stored(h, i, stored, t.stored, &size)) != SZ_OK) return fail(h, "read_stored", st);
        uint64_t half = t.nbytes / 4 * 2; /* on a value boundary for 2- and 4-byte values */
        uint64_t ranges[2][2] = {{0, half}, {half, t.nbytes}};
        for (int r = 0; r < 2; r++) {
            uint64_t lo = ranges[r][0], hi = ranges[r][1], psize = 0;
            uint64_t pcap = size + 128 + 16 * (t.nbytes / 32768 + 2);
            unsigned char *part = malloc(pcap), *got = malloc(hi - lo + 1);
            if ((st = sz_part(h, i, stored, size, lo, hi, part, 1, &psize)) != SZ_ERR_TOO_SMALL && psize > 1)
                return fail(h, "part into 1 byte", st);
            if ((st = sz_part(h, i, stored, size, lo, hi, part, pcap, &psize)) != SZ_OK) return fail(h, "part", st);
            if ((st = sz_decode_part(h, i, part, psize, lo, hi, got, hi - lo)) != SZ_OK) return fail(h, "decode_part", st);
            if (memcmp(got, want + lo, hi - lo) != 0) {
                printf("tensor %llu [%llu, %llu): the part rebuilds other bytes\n", (unsigned long long)i,
                       (unsigned long long)lo, (unsigned long long)hi);
                return 1;
            }
            if (t.compressed && psize > 0) {
                part[psize - 1] ^= 1;
                if ((st = sz_decode_part(h, i, part, psize, lo, hi, got, hi - lo)) != SZ_ERR_CORRUPT)
                    return fail(h, "damaged part", st);
            }
            parts++;
            free(part);
            free(got);
        }
        free(want);
        free(stored);
    }
    uint64_t psz = 0;
    sz_status st = sz_pack_size(h, n, idx, 0, &psz);
    if (st != SZ_OK) return fail(h, "pack_size", st);
    unsigned char *pack = malloc(psz);
    sz_pack_info info;
    if ((st = sz_pack(h, n, idx, dst, cap, pack, psz, 0, &info)) != SZ_OK) return fail(h, "pack", st);
    if (info.staged != psz || info.count != n || info.units == 0 || info.entropy_count != 0) {
        printf("pack info %llu %llu %llu for %llu bytes\n", (unsigned long long)info.staged,
               (unsigned long long)info.count, (unsigned long long)info.units, (unsigned long long)psz);
        return 1;
    }
    if (sz_pack(h, n, idx, dst, cap, pack, psz - 1, 0, &info) != SZ_ERR_TOO_SMALL) return 2;
    if (sz_pack(h, n, idx, NULL, cap, pack, psz, 0, &info) != SZ_ERR_INVALID) return 3;
    if (sz_pack(h, n, idx, dst, cap, pack, psz, 2, &info) != SZ_ERR_INVALID) return 5; /* an unknown flag */
    /* SZ_PACK_ENTROPY: with no entropy payload in this cache, the same pack. */
    uint64_t esz = 0;
    if ((st = sz_pack_size(h, n, idx, SZ_PACK_ENTROPY, &esz)) != SZ_OK || esz != psz) return fail(h, "pack_size entropy", st);
    if ((st = sz_pack(h, n, idx, dst, cap, pack, psz, SZ_PACK_ENTROPY, &info)) != SZ_OK || info.staged != psz || info.entropy_count != 0)
        return fail(h, "pack entropy", st);
    /* Pack info that no pack has: refused before any device work. */
    sz_pack_info bad = info;
    bad.entropy_count = 1ULL << 63;
    if (sz_scatter(h, 0, 4096, &bad, 0) != SZ_ERR_INVALID) return 6;
    bad.entropy_count = 2;
    bad.entropy_at = info.staged - 832; /* room for one descriptor, not two */
    if (sz_scatter(h, 0, 4096, &bad, 0) != SZ_ERR_INVALID) return 7;
    st = sz_scatter(h, 0, 4096, &info, 0);
    if (st != SZ_ERR_NO_GPU && st != SZ_OK && st != SZ_ERR_CUDA) return fail(h, "scatter", st);
    printf("ok: %llu parts, a pack of %llu tensors in %llu bytes\n", (unsigned long long)parts, (unsigned long long)n,
           (unsigned long long)psz);
    free(pack);
    free(idx);
    free(dst);
    free(cap);
    return sz_close(h) == SZ_OK ? 0 : 4;
}

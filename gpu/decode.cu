// SplitZip BF16 decoder, payload format version 1 (docs/splitzip.md).
//
// One kernel, two modes:
//   in place:     the payload sits at the start of [dst, dst + 2n) and the
//                 decoded tensor overwrites it;
//   out of place: payload and destination are separate buffers.
//
// Blocks take chunks in descending order from an atomic ticket counter (a
// persistent grid). A block reads everything its chunk needs (its table
// entry, its data and escapes) into registers and shared memory, publishes
// "read done" for the chunk, waits until the chunks named by the chunk's
// reader range (all chunks, for chunk 0) have published theirs, and only
// then writes its output. The format's in-place invariant makes every chunk
// waited for a higher one, claimed earlier, so no wait can form a cycle
// whatever the hardware's block scheduling, with any number of resident
// blocks.
//
// Safety: output addresses depend only on the chunk index and the value
// count, never on payload contents, so a corrupt payload cannot make the
// kernel write outside [dst, dst + 2n); every offset read from the payload
// is checked against its size before use, and problems are reported as bits
// in *err. Rebuild with `make kernels` after any change: the committed fatbin
// is stamped with this file's SHA-256 and a test fails when they differ.

#include <stdint.h>

#define SZ_CHUNK 16384
#define SZ_THREADS 256
#define SZ_ITERS (SZ_CHUNK / (SZ_THREADS * 16))
#define SZ_MAX_ESC 2725
#define SZ_RAW 0xFFFFu
#define SZ_HEADER 64

// Error bits reported in *err.
#define SZ_ERR_TABLE 1u   // a group table or entry is out of range or inconsistent
#define SZ_ERR_ESCAPE 2u  // an escape position is out of range or out of order
#define SZ_ERR_READERS 4u // a reader range is invalid

// Params is passed by value; its layout matches gpu.params in params.go.
struct Params {
    uint64_t dst;         // output, 2n bytes
    uint64_t src;         // payload; equal to dst in place
    uint64_t size;        // payload bytes
    uint64_t n;           // values
    uint64_t chunks;      // ceil(n / SZ_CHUNK)
    uint64_t groups;      // ceil(chunks / group_chunks)
    uint64_t data_start;  // first byte after the group table
    uint32_t group_chunks;
    uint32_t in_place;
    uint32_t epoch;       // nonzero, new for every in-place launch
    uint32_t reserved;
    uint32_t codebook[4]; // 16 exponents, code 0 in the low byte of [0]
    uint64_t flags;       // uint32 per chunk: epoch once read (in place only)
    uint64_t ctrl;        // uint32[2]: ticket counter, exited blocks
    uint64_t err;         // uint32 error bits
};

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(uint32_t *p, uint32_t v) {
    asm volatile("st.release.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t align16(uint64_t x) { return (x + 15) & ~(uint64_t)15; }

__device__ __forceinline__ uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

__device__ __forceinline__ uint32_t pack4(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

// Two decoded values from two sign-and-mantissa bytes (in the low bytes of
// the 16-bit lanes of w) and their exponent bits from the pair table.
__device__ __forceinline__ uint32_t pair(uint32_t w, uint32_t exps) {
    return (w & 0x007F007Fu) | ((w & 0x00800080u) << 8) | exps;
}

extern "C" __global__ void __launch_bounds__(SZ_THREADS) splitzip_decode(const Params p) {
    __shared__ uint32_t lut[256]; // code pair byte -> exponent bits of both values
    __shared__ uint16_t esc_pos[SZ_MAX_ESC];
    __shared__ uint8_t esc_exp[SZ_MAX_ESC];
    __shared__ long long s_chunk;
    __shared__ uint64_t s_off;
    __shared__ uint32_t s_esc, s_lo, s_span, s_bad;

    const uint32_t tid = threadIdx.x;
    {
        uint32_t lo = (p.codebook[(tid & 15) >> 2] >> (8 * (tid & 3))) & 0xFF;
        uint32_t hi = (p.codebook[(tid >> 4) >> 2] >> (8 * ((tid >> 4) & 3))) & 0xFF;
        lut[tid] = (lo << 7) | (hi << 23);
    }
    uint32_t *ctrl = (uint32_t *)p.ctrl;
    uint32_t *flags = (uint32_t *)p.flags;
    uint32_t *err = (uint32_t *)p.err;
    const uint8_t *src = (const uint8_t *)p.src;
    uint8_t *dst = (uint8_t *)p.dst;

    for (;;) {
        if (tid == 0) {
            uint32_t t = atomicAdd(&ctrl[0], 1u);
            long long c = t < p.chunks ? (long long)(p.chunks - 1 - t) : -1;
            uint32_t bad = 0;
            uint64_t off = 0;
            uint32_t esc = 0, lo = 0, span = 0;
            if (c >= 0) {
                uint64_t g = (uint64_t)c / p.group_chunks;
                uint64_t gof = *(const uint64_t *)(src + SZ_HEADER + 8 * g);
                uint64_t epos = gof + 16 * ((uint64_t)c % p.group_chunks);
                if (gof < p.data_start || (gof & 15) || gof > p.size || epos + 16 > p.size) {
                    bad = SZ_ERR_TABLE;
                } else {
                    uint4 e = *(const uint4 *)(src + epos);
                    off = (uint64_t)e.x | ((uint64_t)e.y << 32);
                    lo = e.z;
                    esc = e.w & 0xFFFF;
                    span = e.w >> 16;
                    uint64_t cnt = min64((uint64_t)SZ_CHUNK, p.n - (uint64_t)c * SZ_CHUNK);
                    uint64_t esc_off = align16(cnt) + align16((cnt + 1) / 2);
                    uint64_t raw_len = align16(2 * cnt);
                    uint64_t len = esc == SZ_RAW ? raw_len : esc_off + align16(3 * (uint64_t)esc);
                    if ((off & 15) || off < p.data_start || off > p.size || len > p.size - off ||
                        (esc != SZ_RAW && (esc > SZ_MAX_ESC || len >= raw_len))) {
                        bad = SZ_ERR_TABLE;
                    } else if (p.in_place && (c == 0 ? (lo != 0 || span != 0)
                                                      : (span != 0 && (lo <= (uint64_t)c || lo + (uint64_t)span > p.chunks)))) {
                        bad = SZ_ERR_READERS;
                    }
                }
            }
            s_chunk = c;
            s_off = off;
            s_esc = esc;
            s_lo = lo;
            s_span = span;
            s_bad = bad;
        }
        __syncthreads();
        const long long c = s_chunk;
        if (c < 0) {
            break;
        }
        const uint32_t bad = s_bad;
        const uint32_t cnt = (uint32_t)min64((uint64_t)SZ_CHUNK, p.n - (uint64_t)c * SZ_CHUNK);
        const uint32_t esc = s_esc;
        const bool raw = esc == SZ_RAW;
        const uint8_t *base = src + s_off;

        // Read phase: everything into registers and shared memory.
        uint4 r[8]; // coded: r[0..3] sign-mantissa, r[4..5] codes; raw: 8 x 16 bytes
        if (!bad) {
            if (!raw) {
                const uint8_t *nib = base + align16(cnt);
#pragma unroll
                for (int k = 0; k < SZ_ITERS; k++) {
                    uint32_t v0 = k * (SZ_THREADS * 16) + tid * 16;
                    uint2 nb = make_uint2(0, 0);
                    if (v0 + 16 <= cnt) {
                        r[k] = *(const uint4 *)(base + v0);
                        nb = *(const uint2 *)(nib + v0 / 2);
                    } else {
                        uint8_t b[16] = {0}, q[8] = {0};
                        for (uint32_t j = 0; v0 + j < cnt; j++) {
                            b[j] = base[v0 + j];
                        }
                        for (uint32_t j = 0; v0 + 2 * j < cnt; j++) {
                            q[j] = nib[v0 / 2 + j];
                        }
                        r[k] = make_uint4(pack4(b), pack4(b + 4), pack4(b + 8), pack4(b + 12));
                        nb = make_uint2(pack4(q), pack4(q + 4));
                    }
                    if (k & 1) {
                        r[4 + k / 2].z = nb.x;
                        r[4 + k / 2].w = nb.y;
                    } else {
                        r[4 + k / 2].x = nb.x;
                        r[4 + k / 2].y = nb.y;
                    }
                }
                const uint64_t esc_off = align16(cnt) + align16((cnt + 1) / 2);
                const uint16_t *pos = (const uint16_t *)(base + esc_off);
                const uint8_t *exps = base + esc_off + 2 * (uint64_t)esc;
                for (uint32_t i = tid; i < esc; i += SZ_THREADS) {
                    esc_pos[i] = pos[i];
                    esc_exp[i] = exps[i];
                }
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    uint32_t b0 = k * (SZ_THREADS * 16) + tid * 16;
                    if (b0 + 16 <= 2 * cnt) {
                        r[k] = *(const uint4 *)(base + b0);
                    } else {
                        uint8_t b[16] = {0};
                        for (uint32_t j = 0; b0 + j < 2 * cnt; j++) {
                            b[j] = base[b0 + j];
                        }
                        r[k] = make_uint4(pack4(b), pack4(b + 4), pack4(b + 8), pack4(b + 12));
                    }
                }
            }
        }
        __syncthreads(); // every read of this chunk has completed

        if (p.in_place) {
            if (tid == 0) {
                __threadfence();
                st_release(&flags[c], p.epoch);
            }
            if (!bad) {
                uint64_t lo = c == 0 ? 1 : s_lo;
                uint64_t hi = c == 0 ? p.chunks : (uint64_t)s_lo + s_span;
                for (uint64_t d = lo + tid; d < hi; d += SZ_THREADS) {
                    while (ld_acquire(&flags[d]) != p.epoch) {
                        __nanosleep(100);
                    }
                }
            }
            __syncthreads();
        }

        // Write phase.
        if (!bad) {
            uint8_t *out = dst + 2 * (uint64_t)c * SZ_CHUNK;
            if (!raw) {
#pragma unroll
                for (int k = 0; k < SZ_ITERS; k++) {
                    uint32_t v0 = k * (SZ_THREADS * 16) + tid * 16;
                    if (v0 >= cnt) {
                        continue;
                    }
                    uint4 s = r[k];
                    uint32_t n0 = (k & 1) ? r[4 + k / 2].z : r[4 + k / 2].x;
                    uint32_t n1 = (k & 1) ? r[4 + k / 2].w : r[4 + k / 2].y;
                    uint32_t sw[4] = {s.x, s.y, s.z, s.w};
                    uint32_t nw[2] = {n0, n1};
                    uint32_t o[8];
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        uint32_t w = sw[j / 2];
                        uint32_t spread = __byte_perm(w, 0, (j & 1) ? 0x4342 : 0x4140);
                        uint32_t code = (nw[j / 4] >> (8 * (j & 3))) & 0xFF;
                        o[j] = pair(spread, lut[code]);
                    }
                    if (v0 + 16 <= cnt) {
                        *(uint4 *)(out + 2 * v0) = make_uint4(o[0], o[1], o[2], o[3]);
                        *(uint4 *)(out + 2 * v0 + 16) = make_uint4(o[4], o[5], o[6], o[7]);
                    } else {
                        uint16_t *o16 = (uint16_t *)(out + 2 * v0);
                        for (uint32_t j = 0; v0 + j < cnt; j++) {
                            o16[j] = (uint16_t)(o[j / 2] >> (16 * (j & 1)));
                        }
                    }
                }
                if (esc) {
                    __syncthreads(); // the block's main output is visible to all its threads
                    uint16_t *o16 = (uint16_t *)out;
                    for (uint32_t i = tid; i < esc; i += SZ_THREADS) {
                        uint32_t pos = esc_pos[i];
                        if (pos >= cnt || (i > 0 && esc_pos[i - 1] >= pos)) {
                            atomicOr(err, SZ_ERR_ESCAPE);
                            continue;
                        }
                        o16[pos] = (uint16_t)((o16[pos] & 0x807Fu) | ((uint32_t)esc_exp[i] << 7));
                    }
                }
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    uint32_t b0 = k * (SZ_THREADS * 16) + tid * 16;
                    if (b0 + 16 <= 2 * cnt) {
                        *(uint4 *)(out + b0) = r[k];
                    } else if (b0 < 2 * cnt) {
                        uint32_t w[4] = {r[k].x, r[k].y, r[k].z, r[k].w};
                        for (uint32_t j = 0; b0 + j < 2 * cnt; j++) {
                            out[b0 + j] = (uint8_t)(w[j / 4] >> (8 * (j & 3)));
                        }
                    }
                }
            }
        } else if (tid == 0) {
            atomicOr(err, bad);
        }
        __syncthreads(); // before the next claim overwrites the shared state
    }

    // The last block to leave resets the counters for the next launch.
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(&ctrl[1], 1u) == gridDim.x - 1) {
            ctrl[0] = 0;
            ctrl[1] = 0;
            __threadfence();
        }
    }
}

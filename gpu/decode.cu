// Decoder of the fixed codec's BF16 payloads, payload format version 1
// (the format: docs/FORMAT.md section 3; this kernel: docs/DESIGN.md 3.1).
//
// One kernel, two modes:
//   in place:     the payload sits at the start of [dst, dst + 2n) and the
//                 decoded tensor overwrites it;
//   out of place: payload and destination are separate buffers.
//
// Blocks take chunks in descending order from an atomic ticket counter (a
// persistent grid). A block's producer warp claims a chunk and copies
// everything it needs (its data and escapes) into a stage of a ring in
// shared memory; its consumer warps, each on its own, wait for the stage,
// publish "read done" for the chunk (the first warp there), wait until the
// chunks named by the chunk's reader range (all chunks, for chunk 0) have
// published theirs, and only then write their share of the output. The
// format's in-place invariant makes every chunk waited for a higher one,
// claimed earlier, so no wait can form a cycle whatever the hardware's
// block scheduling, with any number of resident blocks and stages.
//
// The ticket and read counters are never reset (a reset needs the last
// block to know it is last: a fence and an atomic round trip at the end
// of every launch). Every block takes exactly one ticket past the last,
// so a launch moves the ticket counter by chunks + blocks and, in place,
// the read counter by chunks; the host passes each launch the counters'
// values before it (Params.tickets, Params.reads), which is why launches
// of one decoder must run in the order they were made and cannot be
// replayed from a captured graph.
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
#define SZ_GROUPS (SZ_CHUNK / (SZ_THREADS * 8)) // groups of 8 values a thread decodes per chunk
#define SZ_MAX_ESC 2725
#define SZ_RAW 0xFFFFu
#define SZ_HEADER 64
#define SZ_MAX_GROUPS 512 // the group table is at most 4096 bytes
#define SZ_FIRST_GROUP 64 // chunks in group 0

// Error bits reported in *err.
#define SZ_ERR_TABLE 1u   // a group table or entry is out of range or inconsistent
#define SZ_ERR_ESCAPE 2u  // an escape position is out of range or out of order
#define SZ_ERR_READERS 4u // a reader range is invalid
#define SZ_ERR_ORDER 64u  // a ticket past every block's last: launches ran out of order

// Params is passed by value; its layout matches gpu.params in decoder.go.
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
    uint32_t tickets;     // ctrl[SZ_CTRL_TICKETS] before this launch (each launch adds chunks + blocks)
    uint32_t codebook[4]; // 16 exponents, code 0 in the low byte of [0]
    uint64_t flags;       // uint32 per chunk: epoch once read (in place only)
    uint64_t ctrl;        // uint32[6]: (entropy decoder's two), (error flag), -, ticket counter, chunks read
    uint64_t err;         // uint32 error bits
    uint32_t reads;       // ctrl[SZ_CTRL_READS] before this launch (each in-place launch adds chunks)
    uint32_t reserved;
};

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Publishing a chunk as read is a relaxed store (and a relaxed add to the
// read counter), issued by one consumer thread once its wait on the
// chunk's stage barrier has seen every byte of the chunk land in shared
// memory: the loads have returned their data before the store is issued, so no
// write made after another block sees the flag can change what was read.
// A release here would be a GPU-scope fence that also waits for the
// block's earlier output stores to complete; it cost 11% of the in-place
// rate (1925 against 2158 GB/s at 512 MiB on the H200, docs/PERF.md).
// Waiters read the flags with acquire loads and write only after them.
__device__ __forceinline__ void st_publish(uint32_t *p, uint32_t v) {
    asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void red_publish_add(uint32_t *p, uint32_t v) {
    asm volatile("red.relaxed.gpu.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// SZ_TRACE (kernel experiments only; the committed fatbin is built
// without it): each block of splitzip_decode writes SZ_TRACE_WORDS words
// of %globaltimer stamps and counts after the launch's control words
// (ctrl + SZ_CTRL_BYTES; gpu.Decoder allocates that room when SPLITZIP_DECODE_TRACE
// is set): entry, set-up done, first stage seen full, no ticket left,
// consumers done, exit, chunks decoded (word 7 is not written).
#define SZ_TRACE_WORDS 8
#define SZ_CTRL_TICKETS 4 // ctrl words of the ticket and read counters; a trace
#define SZ_CTRL_READS 5   // starts at ctrl + SZ_CTRL_BYTES
#define SZ_CTRL_BYTES 32
#ifdef SZ_TRACE
__device__ __forceinline__ uint64_t gtime() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define TRACE(p, i, v) (((uint64_t *)((p).ctrl + SZ_CTRL_BYTES))[blockIdx.x * SZ_TRACE_WORDS + (i)] = (v))
#else
__device__ __forceinline__ uint64_t gtime() { return 0; }
#define TRACE(p, i, v) ((void)0)
#endif

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

// Chunk is what thread 0 learns when it claims a chunk.
struct Chunk {
    long long c; // chunk index, or -1 when none is left
    uint64_t off;
    uint32_t esc, lo, span, bad;
};

// entry_pos returns where chunk c's entry lies, or 0 when the group table
// entry is invalid; l1 is the group table.
__device__ __forceinline__ uint64_t entry_pos(const Params p, const uint64_t *l1, long long c) {
    // Group 0 holds the first SZ_FIRST_GROUP chunks, later groups group_chunks each.
    uint64_t g = 0, j = (uint64_t)c;
    if (j >= SZ_FIRST_GROUP) {
        g = 1 + (j - SZ_FIRST_GROUP) / p.group_chunks;
        j = (j - SZ_FIRST_GROUP) % p.group_chunks;
    }
    uint64_t gof = l1[g];
    uint64_t epos = gof + 16 * j;
    if (gof < p.data_start || (gof & 15) || gof > p.size || epos + 16 > p.size) {
        return 0;
    }
    return epos;
}

// check decodes and checks chunk c's entry e (read from entry_pos).
__device__ __forceinline__ Chunk check(const Params p, long long c, bool ok, uint4 e) {
    Chunk k = {c, 0, 0, 0, 0, 0};
    if (c < 0) {
        return k;
    }
    if (!ok) {
        k.bad = SZ_ERR_TABLE;
        return k;
    }
    k.off = (uint64_t)e.x | ((uint64_t)e.y << 32);
    k.lo = e.z;
    k.esc = e.w & 0xFFFF;
    k.span = e.w >> 16;
    uint64_t cnt = min64((uint64_t)SZ_CHUNK, p.n - (uint64_t)c * SZ_CHUNK);
    uint64_t esc_off = align16(cnt) + align16((cnt + 1) / 2);
    uint64_t raw_len = align16(2 * cnt);
    uint64_t len = k.esc == SZ_RAW ? raw_len : esc_off + align16(3 * (uint64_t)k.esc);
    if ((k.off & 15) || k.off < p.data_start || k.off > p.size || len > p.size - k.off ||
        (k.esc != SZ_RAW && (k.esc > SZ_MAX_ESC || len >= raw_len))) {
        k.bad = SZ_ERR_TABLE;
    } else if (p.in_place && (c == 0 ? (k.lo != 0 || k.span != 0)
                                     : (k.span != 0 && (k.lo <= (uint64_t)c || (uint64_t)k.lo + k.span > p.chunks)))) {
        k.bad = SZ_ERR_READERS;
    }
    return k;
}

// store16 writes the bytes [i, i + 16) of a buffer of len bytes, none past len.
__device__ __forceinline__ void store16(uint8_t *b, uint32_t i, uint32_t len, uint4 v) {
    if (i + 16 <= len) {
        *(uint4 *)(b + i) = v;
        return;
    }
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 16; j++) {
        if (i + j < len) {
            b[i + j] = (uint8_t)(w[j / 4] >> (8 * (j & 3)));
        }
    }
}

// Asynchronous 16-byte copies from global to shared memory (sm_80+):
// a block's loads for the next chunk stay in flight, holding no registers,
// while it waits for and writes the current one.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_prev() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// SZ_BUF is one chunk's largest stored size: 2 x 16 KiB of raw values.
#define SZ_BUF (2 * SZ_CHUNK)
// Dynamic shared memory per block: two chunk buffers.
#define SZ_DYN_SMEM (2 * SZ_BUF)

// claim_ticket reads and checks the entry of ticket t's chunk. A launch
// takes tickets 0 to chunks + blocks - 1; a later one (the counter short
// of the base the host gave, wrapped: a later launch of the decoder ran
// first) is reported, and the output is not to be used.
__device__ __forceinline__ Chunk claim_ticket(const Params p, uint32_t t, const uint64_t *l1, const uint8_t *src) {
    if (t >= p.chunks + gridDim.x) {
        atomicOr((uint32_t *)p.err, SZ_ERR_ORDER);
    }
    long long c = t < p.chunks ? (long long)(p.chunks - 1 - t) : -1;
    uint64_t pos = c >= 0 ? entry_pos(p, l1, c) : 0;
    return check(p, c, pos != 0, pos ? *(const uint4 *)(src + pos) : make_uint4(0, 0, 0, 0));
}

// claim takes the next ticket and reads the chunk's entry (one thread).
__device__ __forceinline__ Chunk claim(const Params p, uint32_t *ctrl, const uint64_t *l1, const uint8_t *src) {
    return claim_ticket(p, atomicAdd(&ctrl[SZ_CTRL_TICKETS], 1u) - p.tickets, l1, src);
}

// stored_len is the number of bytes a checked chunk k stores, a multiple
// of 16 and at most SZ_BUF.
__device__ __forceinline__ uint32_t stored_len(const Params p, const Chunk &k) {
    const uint32_t cnt = (uint32_t)min64((uint64_t)SZ_CHUNK, p.n - (uint64_t)k.c * SZ_CHUNK);
    return k.esc == SZ_RAW ? (uint32_t)align16(2 * cnt)
                           : (uint32_t)(align16(cnt) + align16((cnt + 1) / 2) + align16(3 * k.esc));
}

// SZ_BULK: from sm_90 a chunk is copied by one bulk copy (the copy
// engine of the SM tracks its bytes on the stage's barrier); before it,
// or with -DSZ_NO_BULK (to test that path on sm_90), by the producer
// warp's cp.async copies of 16 bytes.
#if __CUDA_ARCH__ >= 900 && !defined(SZ_NO_BULK)
#define SZ_BULK 1
#else
#define SZ_BULK 0
#endif

// Shared-memory barriers (mbarrier, sm_80+): a 64-bit word counting the
// arrivals (and, from sm_90, the bytes of bulk copies) of its current
// phase; waiting names the parity of the phase to see complete.
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared.b64 st, [%0];\n\t}" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
#if SZ_BULK
    asm volatile("{\n\t.reg .pred p;\n\tWAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT;\n\t}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
#else
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

// SZ_FULL_ARRIVALS is how many arrivals complete a stage's "full"
// barrier: from sm_90 the producer's lane 0 (with the bulk copy's bytes
// expected), before it every producer lane once its copies have landed
// plus lane 0 once the stage's chunk is written.
#if SZ_BULK
#define SZ_FULL_ARRIVALS 1
#else
#define SZ_FULL_ARRIVALS 33
#endif

// fetch_stage starts the copy of chunk k's stored bytes (len, none when 0)
// into buf; the stage's full barrier completes when they have landed and
// the producer's lane 0 has arrived. Called by every lane of the producer
// warp after lane 0 has written the stage's chunk.
__device__ __forceinline__ void fetch_stage(const uint8_t *from, uint32_t len, uint8_t *buf, uint64_t *full,
                                            uint32_t lane) {
#if SZ_BULK
    if (lane == 0) {
        asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(
                         smem_addr(full)),
                     "r"(len)
                     : "memory");
        if (len) {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             smem_addr(buf)),
                         "l"(from), "r"(len), "r"(smem_addr(full))
                         : "memory");
        }
    }
#else
    for (uint32_t i = lane * 16; i < len; i += 32 * 16) {
        cp_async16(buf + i, from + i);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_addr(full)) : "memory");
    if (lane == 0) {
        mbar_arrive(full);
    }
#endif
}

// decode_values writes the cnt values of one chunk, whose stored bytes
// (esc escapes, or SZ_RAW) are at buf, to out, escapes not yet applied:
// thread tid (of SZ_THREADS) its share, none past out + 2 * cnt. buf may
// be in shared or global memory.
__device__ __forceinline__ void decode_values(const uint8_t *buf, uint8_t *out, uint32_t cnt, uint32_t esc,
                                              const uint32_t *lut, uint32_t tid) {
    if (esc == SZ_RAW) {
        for (uint32_t i = tid * 16; i < 2 * cnt; i += SZ_THREADS * 16) {
            store16(out, i, 2 * cnt, *(const uint4 *)(buf + i));
        }
        return;
    }
    // Thread tid decodes the groups of 8 values that start at g * 2048 +
    // 8 * tid: a warp's stores of a group are 512 contiguous bytes, whole
    // 32-byte sectors, and warp w owns the values whose index has w in
    // bits 8-10 (SZ_OWNER). Every load of the chunk is issued before the
    // first store, so a chunk read from global memory (the scatter kernel)
    // has all its loads in flight at once.
    const uint8_t *nib = buf + align16(cnt);
    uint2 sv[SZ_GROUPS];
    uint32_t nv[SZ_GROUPS];
#pragma unroll
    for (int g = 0; g < SZ_GROUPS; g++) {
        const uint32_t v = g * (SZ_THREADS * 8) + tid * 8;
        if (v < cnt) { // bytes past the chunk's end are stale; store16 drops them
            sv[g] = *(const uint2 *)(buf + v);
            nv[g] = *(const uint32_t *)(nib + v / 2);
        }
    }
#pragma unroll
    for (int g = 0; g < SZ_GROUPS; g++) {
        const uint32_t v = g * (SZ_THREADS * 8) + tid * 8;
        if (v >= cnt) {
            continue;
        }
        uint32_t o[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t spread = __byte_perm(j < 2 ? sv[g].x : sv[g].y, 0, (j & 1) ? 0x4342 : 0x4140);
            o[j] = pair(spread, lut[(nv[g] >> (8 * j)) & 0xFF]);
        }
        store16(out, 2 * v, 2 * cnt, make_uint4(o[0], o[1], o[2], o[3]));
    }
}

// SZ_OWNER is the warp of a block of SZ_THREADS that decode_values has
// write value pos of a chunk.
#define SZ_OWNER(pos) (((pos) >> 8) & (SZ_THREADS / 32 - 1))

// patch_escapes applies a decoded chunk's escapes at out: entries i0,
// i0 + step, ..., those of warp owner only when owner >= 0 (every one
// when it is -1). The values patched must have been written and be
// visible to the caller. Bad positions are reported when report is set.
__device__ __forceinline__ void patch_escapes(const uint8_t *buf, uint8_t *out, uint32_t cnt, uint32_t esc,
                                              uint32_t *err, uint32_t i0, uint32_t step, int owner, bool report) {
    const uint64_t esc_off = align16(cnt) + align16((cnt + 1) / 2);
    const uint16_t *esc_pos = (const uint16_t *)(buf + esc_off);
    const uint8_t *esc_exp = buf + esc_off + 2 * (uint64_t)esc;
    uint16_t *o16 = (uint16_t *)out;
    for (uint32_t i = i0; i < esc; i += step) {
        uint32_t pos = esc_pos[i];
        if (pos >= cnt || (i > 0 && esc_pos[i - 1] >= pos)) {
            if (report) {
                atomicOr(err, SZ_ERR_ESCAPE);
            }
            continue;
        }
        if (owner < 0 || SZ_OWNER(pos) == (uint32_t)owner) {
            o16[pos] = (uint16_t)((o16[pos] & 0x807Fu) | ((uint32_t)esc_exp[i] << 7));
        }
    }
}

// decode_chunk is decode_values and patch_escapes by the block's threads
// together (the scatter kernel).
__device__ __forceinline__ void decode_chunk(const uint8_t *buf, uint8_t *out, uint32_t cnt, uint32_t esc,
                                             const uint32_t *lut, uint32_t *err, uint32_t tid) {
    decode_values(buf, out, cnt, esc, lut, tid);
    if (esc && esc != SZ_RAW) {
        __syncthreads(); // the block's main output is visible to all its threads
        patch_escapes(buf, out, cnt, esc, err, tid, SZ_THREADS, -1, true);
    }
}

// build_lut fills the code pair table from a codebook (256 threads).
__device__ __forceinline__ void build_lut(uint32_t *lut, uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t tid) {
    // Select codebook words without indexing an array at run time (which
    // would put the parameters in local memory).
    uint32_t a = tid & 15, b = tid >> 4;
    uint32_t wa = a < 8 ? (a < 4 ? c0 : c1) : (a < 12 ? c2 : c3);
    uint32_t wb = b < 8 ? (b < 4 ? c0 : c1) : (b < 12 ? c2 : c3);
    uint32_t lo = (wa >> (8 * (a & 3))) & 0xFF;
    uint32_t hi = (wb >> (8 * (b & 3))) & 0xFF;
    lut[tid] = (lo << 7) | (hi << 23);
}

#ifndef SZ_MIN_BLOCKS
#define SZ_MIN_BLOCKS 3 // scatter blocks per SM: shared memory allows three
#endif

// The decode kernel's blocks: SZ_THREADS consumer threads (warps 0-7)
// and one producer warp (warp 8).
#define SZ_DECODE_THREADS (SZ_THREADS + 32)
#define SZ_MAX_STAGES 6 // 6 x 32 KiB and the static arrays fit the 227 KiB a block may have
#ifndef SZ_DECODE_MIN_BLOCKS
#define SZ_DECODE_MIN_BLOCKS 2
#endif
// SZ_LATE: once a block's last chunk claimed is among the launch's last
// SZ_LATE x blocks (chunks are claimed from the top down), its producer
// claims the next only when the block holds at most SZ_LATE_DEPTH - 1
// chunks not yet decoded, not a ring's worth, so that the launch's last
// chunks go to blocks with nothing left rather than queue behind a busy
// block's stages (0: never). 1 and depth 2 took about 0.6 us off a 241 us
// in-place launch of 512 MiB on the H200; 2, or depth 1, did not
// (docs/PERF.md, tenth session).
#ifndef SZ_LATE
#define SZ_LATE 1
#endif
#ifndef SZ_LATE_DEPTH
#define SZ_LATE_DEPTH 2
#endif

// splitzip_decode: the producer warp claims chunks and copies each one's
// stored bytes into a stage of a ring in shared memory (as many stages as
// the launch's dynamic shared memory holds chunk buffers, at most
// SZ_MAX_STAGES); the consumer warps take the stages in order, each warp
// waiting on the stage's barrier by itself and decoding its own share of
// the chunk. No barrier of the whole block is passed per chunk, so a warp
// waits only for the bytes it decodes (and, in place, for the chunk's
// readers), not for the slowest warp.
extern "C" __global__ void __launch_bounds__(SZ_DECODE_THREADS, SZ_DECODE_MIN_BLOCKS) splitzip_decode(const Params p) {
    extern __shared__ __align__(128) uint8_t bufs[]; // stages x SZ_BUF
    __shared__ uint32_t lut[256];                     // code pair byte -> exponent bits of both values
    __shared__ Chunk slot[SZ_MAX_STAGES];             // each stage's chunk, written by the producer
    __shared__ uint32_t pub[SZ_MAX_STAGES];           // consumer warps that reached the stage's chunk
    __shared__ __align__(8) uint64_t full[SZ_MAX_STAGES], empty[SZ_MAX_STAGES];
    __shared__ uint64_t l1[SZ_MAX_GROUPS];

    const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    if (tid == 0) {
        TRACE(p, 0, gtime());
    }
    uint32_t dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const uint32_t stages = min(dyn / SZ_BUF, (uint32_t)SZ_MAX_STAGES);
    if (stages == 0) {
        return; // the host always gives at least one stage
    }
    if (tid < 256) {
        build_lut(lut, p.codebook[0], p.codebook[1], p.codebook[2], p.codebook[3], tid);
    }
    uint32_t *ctrl = (uint32_t *)p.ctrl;
    uint32_t *flags = (uint32_t *)p.flags;
    uint32_t *err = (uint32_t *)p.err;
    const uint8_t *src = (const uint8_t *)p.src;
    uint8_t *dst = (uint8_t *)p.dst;

    // The group table, read once. A block that reads it after chunk 0 has
    // overwritten it finds no ticket left (chunk 0 writes only after every
    // chunk has been claimed and read), so it never uses what it read.
    // The producer takes its first ticket while the table loads.
    uint32_t first = 0;
    if (tid == SZ_THREADS) {
        first = atomicAdd(&ctrl[SZ_CTRL_TICKETS], 1u) - p.tickets;
    }
    for (uint32_t g = tid; g < p.groups; g += SZ_DECODE_THREADS) {
        l1[g] = *(const uint64_t *)(src + SZ_HEADER + 8 * g);
    }
    if (tid < stages) {
        mbar_init(&full[tid], SZ_FULL_ARRIVALS);
        mbar_init(&empty[tid], SZ_THREADS);
    }
#if SZ_BULK
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
    __syncthreads(); // the table, lut and barriers are ready
    if (tid == 0) {
        TRACE(p, 1, gtime());
    }

    if (warp == SZ_THREADS / 32) {
        // Producer. A stage is refilled once every consumer thread has left
        // it (its empty barrier), so a block holds at most `stages` chunks
        // claimed and not yet written. Every chunk it holds was claimed
        // after the ones before it, so is lower: the highest chunk not yet
        // written anywhere has all its earlier stages written and all its
        // readers (higher chunks) read, and can finish; no wait forms a
        // cycle whatever the scheduling of blocks.
        long long last = (long long)p.chunks; // the chunk claimed last
        for (uint32_t s = 0, ph = 0, it = 0;; it++) {
            mbar_wait(&empty[s], ph ^ 1);
            if (SZ_LATE > 0 && stages > SZ_LATE_DEPTH && it >= SZ_LATE_DEPTH &&
                last < (long long)SZ_LATE * gridDim.x) {
                // The consumers are done with the chunk of iteration
                // it - SZ_LATE_DEPTH and any before it.
                const uint32_t j = it - SZ_LATE_DEPTH;
                mbar_wait(&empty[j % stages], (j / stages) & 1);
            }
            if (lane == 0) {
                slot[s] = it == 0 ? claim_ticket(p, first, l1, src) : claim(p, ctrl, l1, src);
                pub[s] = 0;
            }
            __syncwarp();
            const Chunk k = slot[s];
            const bool data = k.c >= 0 && !k.bad;
            fetch_stage(src + k.off, data ? stored_len(p, k) : 0, bufs + s * SZ_BUF, &full[s], lane);
            last = k.c;
            if (k.c < 0) {
                if (lane == 0) {
                    TRACE(p, 3, gtime());
                }
                break;
            }
            if (++s == stages) {
                s = 0;
                ph ^= 1;
            }
        }
    } else {
        for (uint32_t s = 0, ph = 0, it = 0;; it++) {
            mbar_wait(&full[s], ph); // the chunk and its bytes are in stage s
            if (tid == 0 && it == 0) {
                TRACE(p, 2, gtime());
            }
            // Lane 0 reads the chunk and hands it to the warp.
            Chunk k;
            if (lane == 0) {
                k = slot[s];
            }
            k.c = __shfl_sync(0xFFFFFFFFu, k.c, 0);
            k.off = __shfl_sync(0xFFFFFFFFu, k.off, 0);
            k.esc = __shfl_sync(0xFFFFFFFFu, k.esc, 0);
            k.lo = __shfl_sync(0xFFFFFFFFu, k.lo, 0);
            k.span = __shfl_sync(0xFFFFFFFFu, k.span, 0);
            k.bad = __shfl_sync(0xFFFFFFFFu, k.bad, 0);
            if (k.c < 0) {
                if (tid == 0) {
                    TRACE(p, 4, gtime());
                    TRACE(p, 6, it);
                }
                break;
            }
            const long long c = k.c;
            if (p.in_place) {
                // Publish once a block: the barrier wait above follows
                // the landing of every byte of the chunk.
                if (lane == 0 && atomicAdd(&pub[s], 1u) == 0) {
                    st_publish(&flags[c], p.epoch);
                    red_publish_add(&ctrl[SZ_CTRL_READS], 1u);
                }
                if (!k.bad) {
                    if (c == 0) {
                        if (lane == 0) { // chunk 0 waits for every chunk: count them
                            while (ld_acquire(&ctrl[SZ_CTRL_READS]) - p.reads < p.chunks) {
                                __nanosleep(32);
                            }
                        }
                    } else {
                        for (uint64_t d = (uint64_t)k.lo + lane; d < (uint64_t)k.lo + k.span; d += 32) {
                            while (ld_acquire(&flags[d]) != p.epoch) {
                                __nanosleep(32);
                            }
                        }
                    }
                    __syncwarp(); // the whole warp writes after the readers are seen
                }
            }
            const uint8_t *buf = bufs + s * SZ_BUF;
            if (k.bad) {
                if (tid == 0) {
                    atomicOr(err, k.bad);
                }
            } else {
                const uint32_t cnt = (uint32_t)min64((uint64_t)SZ_CHUNK, p.n - (uint64_t)c * SZ_CHUNK);
                uint8_t *out = dst + 2 * (uint64_t)c * SZ_CHUNK;
                decode_values(buf, out, cnt, k.esc, lut, tid);
                if (k.esc && k.esc != SZ_RAW) {
                    __syncwarp(); // the warp's own values are written and visible to it
                    patch_escapes(buf, out, cnt, k.esc, err, lane, 32, (int)warp, warp == 0);
                }
            }
            // Every consumer thread leaves the stage itself, so each read
            // of its bytes is ordered before the producer's next copy into
            // it by that thread's own arrival (one arrival a warp after
            // __syncwarp is as fast, measured, but racecheck cannot see
            // that order).
            mbar_arrive(&empty[s]);
            if (++s == stages) {
                s = 0;
                ph ^= 1;
            }
        }
    }

    // Nothing is reset: every block takes exactly one ticket past the
    // last, so a launch moves the ticket counter by chunks + blocks (and,
    // in place, the read counter by chunks), and the host passes the next
    // launch its bases.
    if (tid == 0) {
        TRACE(p, 5, gtime());
    }
}

// Packed small tensors: one staging buffer in device memory holds a table
// of ScatterItems and, at 16-byte aligned offsets after it, each item's
// stored bytes (raw tensor bytes, or a SplitZip payload). One launch
// writes every item to its own destination range: raw bytes are copied,
// payloads decoded out of place. The work is cut into units, a payload's
// chunk or SZ_RAW_UNIT bytes of a raw item, numbered across the items
// (the table gives each item its first unit and unit count); blocks take
// units in turn, so one large item is spread over many blocks and a pack
// of many small ones keeps every SM busy.
//
// Safety as above: a unit writes only inside [dst, dst + size) of its
// item; it reads only [src, src + stored) of the staging buffer, and that
// range is checked against the staged bytes first. Units and first units
// come from the table and are checked against the item's own sizes.

// ScatterItem is one 64-byte entry of the table gpu.PutScatterTable writes
// (scatter.go) at the start of a staging buffer.
struct ScatterItem {
    uint64_t dst;          // destination, size bytes
    uint64_t src;          // offset of the stored bytes in the staging buffer
    uint64_t stored;       // stored bytes
    uint64_t size;         // bytes written at dst (2 x values for payloads)
    uint32_t group_chunks; // payloads: chunks per later group; 0 for raw bytes
    uint32_t data_start;   // payloads: first byte after the group table
    uint32_t codebook[4];  // payloads: the codebook
    uint32_t first;        // the item's first unit
    uint32_t units;        // its units: chunks, or raw bytes / SZ_RAW_UNIT rounded up
};

// ScatterParams matches gpu.scatterParams in scatter.go.
struct ScatterParams {
    uint64_t base;   // staging buffer; the table is at its start
    uint64_t staged; // bytes in the staging buffer
    uint64_t count;  // items
    uint64_t err;    // uint32 error bits
    uint64_t units;  // units of all items
};

#define SZ_ERR_ITEM 8u      // a scatter item is out of range
#define SZ_RAW_UNIT 32768u  // bytes of a raw item one unit copies

// scatter_params returns the decode parameters of a payload item, or
// flags it bad.
__device__ __forceinline__ Params scatter_params(const ScatterItem &it, const uint8_t *src, bool *bad) {
    Params p = {};
    p.dst = it.dst;
    p.src = (uint64_t)src;
    p.size = it.stored;
    p.n = it.size / 2;
    p.chunks = (p.n + SZ_CHUNK - 1) / SZ_CHUNK;
    p.group_chunks = it.group_chunks;
    p.data_start = it.data_start;
    p.groups = p.chunks <= SZ_FIRST_GROUP ? (p.chunks > 0)
                                          : 1 + (p.chunks - SZ_FIRST_GROUP + it.group_chunks - 1) / it.group_chunks;
    *bad = (it.dst & 15) || (it.size & 1) || p.data_start < SZ_HEADER + 8 * p.groups || p.data_start > p.size ||
           it.units != p.chunks;
    return p;
}

// Task is a unit of scatter work, resolved by thread 0 and read by the
// block from shared memory: what to fetch and where to write it.
struct Task {
    uint64_t dst;   // first byte written
    uint64_t src;   // first byte fetched (16-byte aligned)
    uint32_t len;   // bytes fetched, a multiple of 16, at most SZ_BUF
    uint32_t cnt;   // values of a chunk, bytes of a raw unit
    uint32_t esc;   // a chunk's escapes or SZ_RAW; a bad task's error bits
    uint32_t kind;  // SZ_TASK_*
    int32_t item;   // the item, for its codebook
    uint32_t codebook[4];
};

#define SZ_TASK_NONE 0u // no unit left
#define SZ_TASK_CHUNK 1u
#define SZ_TASK_RAW 2u
#define SZ_TASK_BAD 3u
#define SZ_SMEM_ITEMS 1024 // items whose first units are searched in shared memory

// resolve returns the task of unit u (thread 0). first holds the items'
// first units when there are at most SZ_SMEM_ITEMS of them.
__device__ Task resolve(const ScatterParams &sp, const ScatterItem *items, const uint32_t *first, uint64_t u) {
    Task t = {};
    if (u >= sp.units) {
        return t; // SZ_TASK_NONE
    }
    t.kind = SZ_TASK_BAD;
    t.esc = SZ_ERR_ITEM;
    // The item of unit u: the last whose first unit is at or before it.
    uint64_t lo = 0, hi = sp.count;
    const bool shared = sp.count <= SZ_SMEM_ITEMS;
    while (hi - lo > 1) {
        const uint64_t mid = (lo + hi) / 2;
        if ((shared ? first[mid] : items[mid].first) <= u) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    const ScatterItem it = items[lo];
    const uint64_t c = u - it.first; // may wrap when first > u: then >= units
    if (it.first > u || c >= it.units || it.src < sp.count * sizeof(ScatterItem) || (it.src & 15) ||
        it.src > sp.staged || it.stored > sp.staged - it.src || align16(it.stored) > sp.staged - it.src ||
        it.size > it.stored * (it.group_chunks ? 4 : 1)) {
        return t;
    }
    const uint8_t *src = (const uint8_t *)sp.base + it.src;
    if (it.group_chunks == 0) {
        const uint64_t n = min64(it.size, it.stored);
        if (c * SZ_RAW_UNIT >= n || it.units != (n + SZ_RAW_UNIT - 1) / SZ_RAW_UNIT) {
            return t;
        }
        const uint64_t off = c * SZ_RAW_UNIT;
        t.kind = SZ_TASK_RAW;
        t.dst = it.dst + off;
        t.src = (uint64_t)(src + off);
        t.cnt = (uint32_t)min64(SZ_RAW_UNIT, n - off);
        t.len = (uint32_t)align16(t.cnt); // the staged bytes are padded to 16
        return t;
    }
    bool bad;
    const Params p = scatter_params(it, src, &bad);
    if (bad) {
        return t;
    }
    const uint64_t pos = entry_pos(p, (const uint64_t *)(src + SZ_HEADER), (long long)c);
    const Chunk k = check(p, (long long)c, pos != 0, pos ? *(const uint4 *)(src + pos) : make_uint4(0, 0, 0, 0));
    if (k.bad) {
        t.esc = k.bad;
        return t;
    }
    t.kind = SZ_TASK_CHUNK;
    t.cnt = (uint32_t)min64((uint64_t)SZ_CHUNK, p.n - c * SZ_CHUNK);
    t.esc = k.esc;
    t.len = k.esc == SZ_RAW ? (uint32_t)align16(2 * t.cnt)
                            : (uint32_t)(align16(t.cnt) + align16((t.cnt + 1) / 2) + align16(3 * k.esc));
    t.dst = p.dst + 2 * c * SZ_CHUNK;
    t.src = (uint64_t)(src + k.off);
    t.item = (int32_t)lo;
    for (int j = 0; j < 4; j++) {
        t.codebook[j] = it.codebook[j];
    }
    return t;
}

// fetch_task starts the asynchronous copy of a task's bytes into buf.
__device__ __forceinline__ void fetch_task(const Task &t, uint8_t *buf, uint32_t tid) {
    if (t.kind == SZ_TASK_CHUNK || t.kind == SZ_TASK_RAW) {
        for (uint32_t i = tid * 16; i < t.len; i += SZ_THREADS * 16) {
            cp_async16(buf + i, (const uint8_t *)t.src + i);
        }
    }
    cp_async_commit(); // an empty group keeps the group count in step
}

// scatter_units is the scatter kernels' body, persistent like
// splitzip_decode: block b of grid takes units b, b + grid, b + 2 grid,
// ... (no counter, so launches on several streams, or replayed from a
// CUDA graph, need nothing reset), and while it writes one unit from
// shared memory the next one's bytes are in flight into its other buffer.
// The staging buffer may be device memory or mapped pinned host memory.
__device__ __forceinline__ void scatter_units(const ScatterParams &sp, const uint32_t block, const uint32_t grid) {
    extern __shared__ __align__(16) uint8_t bufs[]; // SZ_DYN_SMEM: two unit buffers
    __shared__ uint32_t lut[256];
    __shared__ uint32_t first[SZ_SMEM_ITEMS];
    __shared__ Task slot[2];
    const uint32_t tid = threadIdx.x;
    uint32_t *err = (uint32_t *)sp.err;
    const ScatterItem *items = (const ScatterItem *)sp.base;
    if (sp.count == 0) {
        return;
    }
    if (sp.count <= SZ_SMEM_ITEMS) {
        for (uint32_t i = tid; i < sp.count; i += SZ_THREADS) {
            first[i] = items[i].first;
        }
    }
    __syncthreads();
    if (tid == 0) {
        slot[0] = resolve(sp, items, first, block);
    }
    __syncthreads();
    fetch_task(slot[0], bufs, tid);
    int32_t cur = -1; // the item whose codebook lut holds
    for (uint32_t it = 0;; it++) {
        const Task t = slot[it & 1];
        if (t.kind == SZ_TASK_NONE) {
            break;
        }
        if (tid == 0) {
            slot[(it + 1) & 1] = resolve(sp, items, first, block + (uint64_t)(it + 1) * grid);
        }
        __syncthreads(); // the next task is visible; every thread is done with the other buffer
        uint8_t *buf = bufs + (it & 1) * SZ_BUF;
        fetch_task(slot[(it + 1) & 1], bufs + ((it + 1) & 1) * SZ_BUF, tid);
        cp_async_wait_prev(); // this thread's copies of task t have landed
        __syncthreads();      // all of them have
        if (t.kind == SZ_TASK_BAD) {
            if (tid == 0) {
                atomicOr(err, t.esc);
            }
            continue;
        }
        uint8_t *out = (uint8_t *)t.dst;
        if (t.kind == SZ_TASK_RAW) {
            if ((t.dst & 15) == 0) {
                for (uint32_t j = tid * 16; j < t.cnt; j += SZ_THREADS * 16) {
                    store16(out, j, t.cnt, *(const uint4 *)(buf + j));
                }
            } else {
                for (uint32_t j = tid; j < t.cnt; j += SZ_THREADS) {
                    out[j] = buf[j];
                }
            }
            continue;
        }
        if (cur != t.item) {
            build_lut(lut, t.codebook[0], t.codebook[1], t.codebook[2], t.codebook[3], tid);
            __syncthreads();
            cur = t.item;
        }
        decode_chunk(buf, out, t.cnt, t.esc, lut, err, tid);
    }
    cp_async_wait_all();
}

extern "C" __global__ void __launch_bounds__(SZ_THREADS, SZ_MIN_BLOCKS) splitzip_scatter(const ScatterParams sp) {
    scatter_units(sp, blockIdx.x, gridDim.x);
}

// RoutedPack is one candidate of splitzip_scatter_routed: a staging
// buffer as ScatterParams describes it (base, staged bytes, items, units).
struct RoutedPack {
    uint64_t base;
    uint64_t staged;
    uint64_t count;
    uint64_t units;
};

// RoutedParams matches gpu.routedParams in scatter.go.
struct RoutedParams {
    uint64_t packs; // n RoutedPacks
    uint64_t want;  // n bytes: nonzero where that candidate is scattered
    uint64_t err;   // uint32 error bits
    uint64_t n;     // candidates
};

// splitzip_scatter_routed scatters, of n candidate staging buffers, those
// whose want byte is set: blocks (x, y) run candidate y's units over the
// grid's x dimension, and a candidate not wanted costs its blocks one
// read. Which candidates run, and where their bytes are, is read from
// device memory when the kernel runs, so a CUDA graph that captured the
// launch scatters whatever the device-side tables say at replay.
extern "C" __global__ void __launch_bounds__(SZ_THREADS, SZ_MIN_BLOCKS) splitzip_scatter_routed(const RoutedParams rp) {
    const uint32_t y = blockIdx.y;
    if (y >= rp.n || ((const uint8_t *)rp.want)[y] == 0) {
        return;
    }
    const RoutedPack pk = ((const RoutedPack *)rp.packs)[y];
    if (pk.base == 0 || (pk.base & 15) || pk.count > pk.staged / sizeof(ScatterItem)) {
        if (threadIdx.x == 0 && blockIdx.x == 0) {
            atomicOr((uint32_t *)rp.err, SZ_ERR_ITEM);
        }
        return;
    }
    const ScatterParams sp = {pk.base, pk.staged, pk.count, rp.err, pk.units};
    scatter_units(sp, blockIdx.x, gridDim.x);
}

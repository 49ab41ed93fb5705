// Matrix-vector products straight from fixed-codec payloads (issue 36):
// y = W x for a BF16 matrix W of rows x cols (row-major, as a PyTorch
// Linear's weight) held as a version 1 fixed payload (docs/FORMAT.md
// section 3), and a batch of 1 to 16 BF16 vectors x (batch x cols,
// row-major); y is batch x rows, BF16. The weights are decoded in
// registers on the way to the multiply, never written anywhere: the
// kernel reads 12 bits a weight (and the rare escapes) where a BF16
// product reads 16. The multiplies run on the tensor cores
// (mma.sync m16n8k16, BF16 in, fp32 accumulation), so decoding is the
// only per-weight work left on the ALUs.
//
// The reduction order is fixed, and a reference kernel here computes the
// same order from the decoded BF16 matrix, so the two agree bit for bit:
//   - block b computes rows 16b .. 16b + 15 (a tile); its W warps (8, or
//     4 in the _w4 kernels) split the columns: the tile's
//     64-column steps are dealt out in W contiguous runs, warp w taking
//     run w;
//   - in a step, lane l = 4g + t holds the 16 columns 64s + 16t .. + 15
//     of rows g and g + 8 of the tile, and the warp issues 4 mma
//     (k = 16 each) per 8 vectors of the batch: mma j takes the lane's
//     columns 4j .. 4j + 3, as k pairs t and t + 4; the vectors go in as
//     the mma's n (vector g, and g + 8 for a batch over 8), with the
//     matching columns of x;
//   - each warp's fp32 sums go through shared memory and are added warp
//     0 to W - 1 in order, then rounded to BF16 (to nearest, ties to
//     even).
// The fused kernel takes a warp's steps in spans: runs of steps in which
// both rows of every lane stay in one coded chunk, so that a step there
// is loads, decoding and mma with pointers advanced, and no index or
// table work (gemv_fused). Columns past the matrix and rows past it take
// zeros. cols must be a
// multiple of 16 (a lane's 16 values then never straddle a row or a
// chunk: chunks hold 16384 values).
//
// Safety: every payload offset is checked against the payload's size
// before use (group table, entry tables, a chunk's data and escapes), so
// a corrupt payload cannot make the kernel read outside [w, w + size);
// outputs are y's only, at addresses that depend on the shape alone.
// Problems set bits in *err (the decode kernel's bits, decode.cu); the
// rows they touch hold garbage. Rebuild with `make kernels` after any
// change: the committed fatbin is stamped with this file's SHA-256.

#include <stdint.h>

#define GZ_CHUNK 16384
#define GZ_RAW 0xFFFFu
#define GZ_HEADER 64
#define GZ_FIRST_GROUP 64
#define GZ_WARPS 8  // warps a block, splitting the tile's columns (the most; see GZ_KERNELS_W)
#define GZ_TILE 16  // rows a block
#define GZ_GROUP 16 // columns a lane holds in a step
#ifndef GZ_ROUND
#define GZ_ROUND 2 // steps whose loads a lane keeps in flight
#endif
#ifndef GZ_MINB
#define GZ_MINB 2 // blocks an SM must fit (registers a thread: 65536 / (256 GZ_MINB))
#endif

#define GZ_NONE 0xFFFFFFFFu    // no escape left in a chunk
#define GZ_UNKNOWN 0xFFFFFFFEu // the chunk's escapes not looked up yet

#define GZ_ERR_TABLE 1u
#define GZ_ERR_ESCAPE 2u

// GemvParams is passed by value; its layout matches gpu.gemvParams.
struct GemvParams {
    uint64_t w;     // the payload (fused) or the BF16 matrix (reference)
    uint64_t size;  // payload bytes (fused)
    uint64_t x;     // batch x cols BF16
    uint64_t y;     // batch x rows BF16
    uint64_t err;   // uint32 error bits
    uint64_t rows;  // rows of W
    uint64_t cols;  // cols of W, a multiple of 16
    uint64_t chunks;
    uint32_t group_chunks;
    uint32_t batch; // vectors, at most the kernel's B
    uint32_t codebook[4];
};

__device__ __forceinline__ uint64_t gz_align16(uint64_t v) { return (v + 15) & ~(uint64_t)15; }

// gz_bf16 rounds f to BF16, to nearest with ties to even (NaNs stay NaN).
__device__ __forceinline__ uint16_t gz_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        return (uint16_t)((u >> 16) | 0x40);
    }
    u += 0x7FFFu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

// gz_lut fills the code-pair table (the decode kernel's build_lut): entry
// c holds the exponent bits of code c & 15 at bits 7-14 and of code c >> 4
// at bits 23-30, so a byte of two codes gives two BF16 exponents at once.
__device__ __forceinline__ void gz_lut(uint32_t *lut, const GemvParams &p, uint32_t tid) {
    const uint32_t a = tid & 15, b = tid >> 4;
    const uint32_t wa = a < 8 ? (a < 4 ? p.codebook[0] : p.codebook[1]) : (a < 12 ? p.codebook[2] : p.codebook[3]);
    const uint32_t wb = b < 8 ? (b < 4 ? p.codebook[0] : p.codebook[1]) : (b < 12 ? p.codebook[2] : p.codebook[3]);
    lut[tid] = (((wa >> (8 * (a & 3))) & 0xFF) << 7) | (((wb >> (8 * (b & 3))) & 0xFF) << 23);
}

// gz_mma adds A B to d: A is 16 x 16 BF16 (rows g and g + 8, k pairs t
// and t + 4 from this lane), B 16 x 8 (k pairs t and t + 4 of column g).
__device__ __forceinline__ void gz_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Chunk is what a lane knows of the chunk one of its rows is in.
struct Chunk {
    const uint8_t *data;  // its data; null for a chunk whose table is bad
    const uint16_t *epos; // escape positions (coded chunks)
    uint64_t index;       // the chunk's number; ~0 for none yet
    uint32_t esc;         // escapes, or GZ_RAW
    uint32_t next;        // the first escape not yet passed, or GZ_UNKNOWN
    uint32_t at;          // its position (GZ_NONE: none left)
    uint32_t last;        // the position of the escape before next (GZ_NONE: none)
    uint32_t codes;       // the codes' offset in data
};

// gz_chunk looks chunk c of the payload up, checking every offset against
// the payload's size; on a bad table it reports and leaves data null.
__device__ __forceinline__ void gz_chunk(Chunk &ch, uint64_t c, const GemvParams &p, uint32_t *err) {
    const uint8_t *w = (const uint8_t *)p.w;
    const uint64_t g = c < GZ_FIRST_GROUP ? 0 : 1 + (c - GZ_FIRST_GROUP) / p.group_chunks;
    const uint64_t i = c < GZ_FIRST_GROUP ? c : (c - GZ_FIRST_GROUP) % p.group_chunks;
    ch.index = c;
    ch.data = nullptr;
    ch.at = GZ_NONE;
    const uint64_t n = p.rows * p.cols;
    if (c >= p.chunks || GZ_HEADER + 8 * (g + 1) > p.size) {
        atomicOr(err, GZ_ERR_TABLE);
        return;
    }
    const uint64_t table = *(const uint64_t *)(w + GZ_HEADER + 8 * g);
    if (table > p.size || (table & 15) || 16 * (i + 1) > p.size - table) {
        atomicOr(err, GZ_ERR_TABLE);
        return;
    }
    const uint4 e = *(const uint4 *)(w + table + 16 * i);
    const uint64_t off = (uint64_t)e.x | ((uint64_t)e.y << 32);
    const uint64_t k = min((uint64_t)GZ_CHUNK, n - c * GZ_CHUNK);
    ch.esc = e.w & 0xFFFF;
    const uint64_t esc_off = gz_align16(k) + gz_align16((k + 1) / 2);
    const uint64_t bytes = ch.esc == GZ_RAW ? gz_align16(2 * k) : esc_off + gz_align16(3 * (uint64_t)ch.esc);
    if ((off & 15) || off > p.size || bytes > p.size - off) {
        atomicOr(err, GZ_ERR_TABLE);
        return;
    }
    ch.data = w + off;
    ch.codes = (uint32_t)gz_align16(k);
    ch.epos = (const uint16_t *)(ch.data + esc_off);
    ch.next = ch.esc == GZ_RAW || ch.esc == 0 ? 0 : GZ_UNKNOWN;
    ch.last = GZ_NONE;
}

// gz_escapes applies the escapes at positions pos .. pos + 15 of the
// chunk to the lane's 8 words. A lane's positions only grow within a
// chunk, so its cursor only moves forward; it starts where a binary
// search puts it (the first escape at pos or after), and the next
// escape's position stays in a register (most groups have none).
// Positions out of order along the way are reported.
__device__ __forceinline__ void gz_escapes(uint32_t (&wd)[8], Chunk &ch, uint32_t pos, uint32_t *err) {
    if (ch.next == GZ_UNKNOWN) {
        uint32_t lo = 0, hi = ch.esc;
        while (lo < hi) {
            const uint32_t mid = (lo + hi) / 2;
            if (ch.epos[mid] < pos) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        ch.next = lo;
        ch.at = lo < ch.esc ? ch.epos[lo] : GZ_NONE;
    }
    while (ch.at < pos + GZ_GROUP) {
        if (ch.last != GZ_NONE && ch.at <= ch.last) {
            atomicOr(err, GZ_ERR_ESCAPE);
            ch.at = GZ_NONE; // ignore the rest of a bad stream
            break;
        }
        if (ch.at >= pos) {
            const uint32_t j = ch.at - pos, sh = 16 * (j & 1);
            const uint8_t *eexp = (const uint8_t *)(ch.epos + ch.esc);
            const uint32_t e = (uint32_t)eexp[ch.next] << (7 + sh), field = 0x7F80u << sh;
            // Masks, not a branch per word: the compiler turns `if (k ==
            // j / 2) wd[k] = ...` back into an indexed store, and wd into
            // local memory.
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const uint32_t m = 0u - (uint32_t)((j >> 1) == (uint32_t)k);
                wd[k] = (wd[k] & ~(m & field)) | (m & e);
            }
        }
        ch.last = ch.at;
        ch.next++;
        ch.at = ch.next < ch.esc ? ch.epos[ch.next] : GZ_NONE;
    }
}

// Held is what a lane loaded for one row of one step: a coded group's 16
// sign-and-mantissa bytes in a and its 16 codes in b.
struct Held {
    uint4 a;
    uint2 b;
};

// gz_decode turns a coded group (16 sign-and-mantissa bytes, 16 codes)
// into its 8 words of BF16 pairs (value 2k in the low half of word k) and
// patches its escapes.
__device__ __forceinline__ void gz_decode(uint32_t (&wd)[8], const Held &h, Chunk &ch, uint32_t pos,
                                          const uint32_t *lut, uint32_t *err) {
    const uint32_t sm[4] = {h.a.x, h.a.y, h.a.z, h.a.w};
    const uint32_t codes[2] = {h.b.x, h.b.y};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        // Sign and mantissa of values 2k, 2k + 1: byte b at bits 0-7 and
        // 8-15 of a half, masked to sign (bit 15) and mantissa (0-6).
        const uint32_t spread = __byte_perm(sm[k >> 1], 0, (k & 1) ? 0x3322 : 0x1100);
        wd[k] = (spread & 0x807F807Fu) | lut[__byte_perm(codes[k >> 2], 0, 0x4440 + (k & 3))];
    }
    if (ch.at < pos + GZ_GROUP || ch.next == GZ_UNKNOWN) {
        gz_escapes(wd, ch, pos, err);
    }
}

// gz_x loads the 16 values of x at col for the lane's vector (zeros past
// the matrix's columns).
__device__ __forceinline__ void gz_x(uint4 (&xv)[2], const uint16_t *x, uint64_t xrow, uint64_t col, bool in) {
    if (in) {
        const uint4 *xp = (const uint4 *)(x + xrow + col);
        xv[0] = __ldg(xp);
        xv[1] = __ldg(xp + 1);
    } else {
        xv[0] = xv[1] = make_uint4(0, 0, 0, 0);
    }
}

// gz_step multiplies one step's words of rows g (wa) and g + 8 (wb) with
// x's columns (xv) into acc: 4 mma a column of 8 vectors.
template <int NT>
__device__ __forceinline__ void gz_step(float (&acc)[NT][4], const uint32_t (&wa)[8], const uint32_t (&wb)[8],
                                        const uint4 (&xv)[NT][2]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const uint32_t xw[8] = {xv[nt][0].x, xv[nt][0].y, xv[nt][0].z, xv[nt][0].w,
                                xv[nt][1].x, xv[nt][1].y, xv[nt][1].z, xv[nt][1].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            gz_mma(acc[nt], wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], xw[2 * j], xw[2 * j + 1]);
        }
    }
}

// gz_store adds the warps' sums in warp order through red and stores the
// tile's rows of y, rounded to BF16: sum i (row i / 16, vector i % 16) is
// added by thread i mod 32 W.
template <int NT, int W>
__device__ __forceinline__ void gz_store(const float (&acc)[NT][4], float (&red)[W][GZ_TILE][16], const GemvParams &p,
                                         uint64_t row0) {
    const uint32_t tid = threadIdx.x, warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        red[warp][g][8 * nt + 2 * t] = acc[nt][0];
        red[warp][g][8 * nt + 2 * t + 1] = acc[nt][1];
        red[warp][g + 8][8 * nt + 2 * t] = acc[nt][2];
        red[warp][g + 8][8 * nt + 2 * t + 1] = acc[nt][3];
    }
    __syncthreads();
    for (uint32_t i = tid; i < GZ_TILE * 16; i += 32 * W) {
        const uint32_t r = i >> 4, v = i & 15;
        if (v < p.batch && row0 + r < p.rows) {
            float sum = red[0][r][v];
#pragma unroll
            for (int w = 1; w < W; w++) {
                sum += red[w][r][v];
            }
            ((uint16_t *)p.y)[(uint64_t)v * p.rows + row0 + r] = gz_bf16(sum);
        }
    }
}

// gz_one takes one step of one row the general way (gz_span's 0): the
// chunk looked up, zeros for a group past the matrix or in a chunk whose
// table is bad, a raw chunk's values loaded as they are, a coded group
// decoded.
__device__ __forceinline__ void gz_one(uint32_t (&wd)[8], Chunk &ch, uint64_t row, uint64_t col, bool in,
                                       const GemvParams &p, const uint32_t *lut, uint32_t *err) {
#pragma unroll
    for (int k = 0; k < 8; k++) {
        wd[k] = 0;
    }
    if (!in || row >= p.rows) {
        return;
    }
    const uint64_t flat = row * p.cols + col, c = flat / GZ_CHUNK;
    if (c != ch.index) {
        gz_chunk(ch, c, p, err);
    }
    if (ch.data == nullptr) {
        return;
    }
    const uint32_t pos = (uint32_t)(flat - c * GZ_CHUNK);
    if (ch.esc == GZ_RAW) {
        const uint4 *v = (const uint4 *)(ch.data + 2 * (uint64_t)pos);
        const uint4 q0 = __ldcs(v), q1 = __ldcs(v + 1);
        wd[0] = q0.x, wd[1] = q0.y, wd[2] = q0.z, wd[3] = q0.w;
        wd[4] = q1.x, wd[5] = q1.y, wd[6] = q1.z, wd[7] = q1.w;
        return;
    }
    Held h;
    h.a = __ldcs((const uint4 *)(ch.data + pos));
    h.b = __ldcs((const uint2 *)(ch.data + ch.codes + pos / 2));
    gz_decode(wd, h, ch, pos, lut, err);
}

// gz_span puts row's chunk (ch) at the group at col and returns how many
// steps from there stay in it with the group coded: 0 where the chunk is
// raw or its table bad (the step then goes through gz_one). pos gets the
// group's position in the chunk. The row and col must be in the matrix.
__device__ __forceinline__ uint32_t gz_span(Chunk &ch, uint32_t &pos, uint64_t row, uint64_t col, const GemvParams &p,
                                            uint32_t *err) {
    const uint64_t flat = row * p.cols + col, c = flat / GZ_CHUNK;
    if (c != ch.index) {
        gz_chunk(ch, c, p, err);
    }
    pos = (uint32_t)(flat - c * GZ_CHUNK);
    if (ch.data == nullptr || ch.esc == GZ_RAW) {
        return 0;
    }
    const uint32_t end = (uint32_t)min((uint64_t)GZ_CHUNK, p.rows * p.cols - c * GZ_CHUNK);
    return (end - pos + 4 * GZ_GROUP - 1) / (4 * GZ_GROUP);
}

// gemv_fused: y = W x from W's fixed payload, in spans. A span is the
// steps from s on in which every lane's two rows stay in their chunks,
// every group is coded and within the matrix: its loop only loads,
// decodes and multiplies, pointers advanced a step at a time, GZ_ROUND
// steps' loads in flight. Any other step (a raw chunk, a bad table, the
// matrix's last columns or rows) is taken alone through gz_one. B is the
// batch the kernel is built for: vectors past the launch's batch repeat
// its last (their sums are never stored), so no load branches on the
// batch.
template <int B, int W>
__device__ __forceinline__ void gemv_fused(const GemvParams &p) {
    static_assert(W >= 1 && W <= GZ_WARPS && GZ_WARPS % W == 0, "a split of GZ_WARPS warps");
    constexpr int NT = B > 8 ? 2 : 1; // mma columns of 8 vectors
    __shared__ uint32_t lut[256];
    __shared__ float red[W][GZ_TILE][16];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    for (uint32_t i = tid; i < 256; i += 32 * W) {
        gz_lut(lut, p, i);
    }
    __syncthreads();
    uint32_t *err = (uint32_t *)p.err;
    const uint64_t row0 = (uint64_t)blockIdx.x * GZ_TILE, ra = row0 + g, rb = row0 + g + 8;
    const uint64_t groups = p.cols / GZ_GROUP, steps = (groups + 3) / 4;
    const uint64_t lo = warp * steps / W, hi = (warp + 1) * steps / W;
    // Steps before whole have every lane's group within the columns; only
    // a tile of rows all in the matrix takes spans.
    const uint64_t whole = p.cols / (4 * GZ_GROUP);
    const bool rows_in = row0 + GZ_TILE <= p.rows;
    const uint16_t *x = (const uint16_t *)p.x;
    uint64_t xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xrow[nt] = (uint64_t)min(g + 8 * nt, p.batch - 1) * p.cols;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    }
    Chunk ca, cb; // rows ra and rb
    ca.index = cb.index = ~(uint64_t)0;
    ca.data = cb.data = nullptr;
    ca.esc = cb.esc = GZ_RAW;
    for (uint64_t s = lo; s < hi;) {
        const uint64_t col = GZ_GROUP * (4 * s + t);
        uint32_t span = 0, pa = 0, pb = 0;
        if (rows_in && s < whole) {
            const uint32_t na = gz_span(ca, pa, ra, col, p, err), nb = gz_span(cb, pb, rb, col, p, err);
            span = __reduce_min_sync(0xFFFFFFFFu, (uint32_t)min((uint64_t)min(na, nb), min(hi, whole) - s));
        }
        if (span == 0) {
            const bool in = 4 * s + t < groups;
            uint32_t wa[8], wb[8];
            gz_one(wa, ca, ra, col, in, p, lut, err);
            gz_one(wb, cb, rb, col, in, p, lut, err);
            uint4 xv[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                gz_x(xv[nt], x, xrow[nt], col, in);
            }
            __syncwarp();
            gz_step<NT>(acc, wa, wb, xv);
            s++;
            continue;
        }
        const uint8_t *sa = ca.data + pa, *sb = cb.data + pb;
        const uint8_t *da = ca.data + ca.codes + pa / 2, *db = cb.data + cb.codes + pb / 2;
        const uint16_t *xs[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            xs[nt] = x + xrow[nt] + col;
        }
        for (uint32_t i = 0; i < span; i += GZ_ROUND) {
            Held h[GZ_ROUND][2];
            uint4 xv[GZ_ROUND][NT][2];
#pragma unroll
            for (int u = 0; u < GZ_ROUND; u++) {
                if (i + u < span) {
                    const uint32_t o = u * 4 * GZ_GROUP;
                    h[u][0].a = __ldcs((const uint4 *)(sa + o));
                    h[u][0].b = __ldcs((const uint2 *)(da + o / 2));
                    h[u][1].a = __ldcs((const uint4 *)(sb + o));
                    h[u][1].b = __ldcs((const uint2 *)(db + o / 2));
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        xv[u][nt][0] = __ldg((const uint4 *)(xs[nt] + o));
                        xv[u][nt][1] = __ldg((const uint4 *)(xs[nt] + o) + 1);
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < GZ_ROUND; u++) {
                if (i + u < span) {
                    const uint32_t o = u * 4 * GZ_GROUP;
                    uint32_t wa[8], wb[8];
                    gz_decode(wa, h[u][0], ca, pa + o, lut, err);
                    gz_decode(wb, h[u][1], cb, pb + o, lut, err);
                    __syncwarp();
                    gz_step<NT>(acc, wa, wb, xv[u]);
                }
            }
            const uint32_t adv = GZ_ROUND * 4 * GZ_GROUP;
            sa += adv, sb += adv, da += adv / 2, db += adv / 2, pa += adv, pb += adv;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                xs[nt] += adv;
            }
        }
        s += span;
    }
    gz_store<NT, W>(acc, red, p, row0);
}

// gemv_ref: the same products in the same order from W in BF16, GZ_ROUND
// steps' loads in flight.
template <int B, int W>
__device__ __forceinline__ void gemv_ref(const GemvParams &p) {
    static_assert(W >= 1 && W <= GZ_WARPS && GZ_WARPS % W == 0, "a split of GZ_WARPS warps");
    constexpr int NT = B > 8 ? 2 : 1;
    __shared__ float red[W][GZ_TILE][16];
    const uint32_t tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const uint64_t row0 = (uint64_t)blockIdx.x * GZ_TILE, ra = row0 + g, rb = row0 + g + 8;
    const uint64_t groups = p.cols / GZ_GROUP, steps = (groups + 3) / 4;
    const uint64_t lo = warp * steps / W, hi = (warp + 1) * steps / W;
    const uint16_t *x = (const uint16_t *)p.x, *w = (const uint16_t *)p.w;
    uint64_t xrow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        xrow[nt] = (uint64_t)min(g + 8 * nt, p.batch - 1) * p.cols;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    }
    for (uint64_t s = lo; s < hi; s += GZ_ROUND) {
        uint32_t wv[GZ_ROUND][2][8];
        uint4 xv[GZ_ROUND][NT][2];
#pragma unroll
        for (int u = 0; u < GZ_ROUND; u++) {
            const uint64_t col = GZ_GROUP * (4 * (s + u) + t);
            const bool in = s + u < hi && 4 * (s + u) + t < groups;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const uint64_t row = r ? rb : ra;
                uint4 q0 = make_uint4(0, 0, 0, 0), q1 = q0;
                if (in && row < p.rows) {
                    const uint4 *v = (const uint4 *)(w + row * p.cols + col);
                    q0 = __ldcs(v);
                    q1 = __ldcs(v + 1);
                }
                wv[u][r][0] = q0.x, wv[u][r][1] = q0.y, wv[u][r][2] = q0.z, wv[u][r][3] = q0.w;
                wv[u][r][4] = q1.x, wv[u][r][5] = q1.y, wv[u][r][6] = q1.z, wv[u][r][7] = q1.w;
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                gz_x(xv[u][nt], x, xrow[nt], col, in);
            }
        }
#pragma unroll
        for (int u = 0; u < GZ_ROUND; u++) {
            if (s + u < hi) {
                gz_step<NT>(acc, wv[u][0], wv[u][1], xv[u]);
            }
        }
    }
    gz_store<NT, W>(acc, red, p, row0);
}

// The kernels of each batch size B: splitzip_gemv_fixed_bB and
// splitzip_gemv_ref_bB split a tile's columns among GZ_WARPS warps;
// splitzip_gemv_fixed_bB_w4 and splitzip_gemv_ref_bB_w4 among 4 (a block
// of 128 threads), for matrices with tiles enough to fill the GPU so: a
// warp then takes twice the steps for the same start-up work (finding its
// chunks, the sums through shared memory). Both keep 128 registers a
// thread, as many warps an SM. The reduction order is the one above with
// W in place of 8 warps, so a fixed kernel and the reference of the same
// W give the same bits. (Splits among 2 and 1 warps were measured too:
// 2 was 2% faster than 4 on 14336 x 4096 and slower on the other shapes,
// 1 slower on all; docs/perf/LOG.md.) gpu.gemvSplits lists these kernels
// and GZ_MINB * GZ_WARPS is its gemvSMWarps (TestKernelConstants).
// __launch_bounds__ keeps 128 registers a thread for every split.
#define GZ_KERNELS_W(B, W, NAME)                                                                                        \
    extern "C" __global__ void __launch_bounds__(32 * (W), GZ_MINB *GZ_WARPS / (W)) splitzip_gemv_fixed_b##B##NAME(    \
        const GemvParams p) {                                                                                           \
        gemv_fused<B, W>(p);                                                                                            \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * (W), GZ_MINB *GZ_WARPS / (W)) splitzip_gemv_ref_b##B##NAME(      \
        const GemvParams p) {                                                                                           \
        gemv_ref<B, W>(p);                                                                                              \
    }

#define GZ_KERNELS(B)                                                                                                   \
    GZ_KERNELS_W(B, GZ_WARPS, )                                                                                         \
    GZ_KERNELS_W(B, 4, _w4)

GZ_KERNELS(1)
GZ_KERNELS(2)
GZ_KERNELS(4)
GZ_KERNELS(8)
GZ_KERNELS(16)

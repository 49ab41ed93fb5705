// Entropy payload decoder, payload versions 2 and 3 (the format:
// docs/FORMAT.md section 4; this kernel: docs/DESIGN.md 4.4). In version 3
// each symbol stands for the fields of two adjacent values, named by the
// pair table the host passes with the code lengths: a lane writes both
// fields of a symbol into the ring, which is then twice as many bytes, and
// a rebuild writes twice as many values a row of symbols.
//
// Two kernels for one payload a launch, splitzip_entropy_decode for
// payloads of single fields and splitzip_entropy_decode_pairs for those of
// pairs (the same code, a template each), and two modes, as decode.cu: in
// place (the payload at the start of [dst, dst + n * vsize), overwritten
// by the values) and out of place. The host parses the head (header and
// code lengths) and passes the code lengths as a kernel argument; the
// chunk index is read from `index`, a copy the host made before the launch
// (in place the index lies at the payload's end, inside the values of the
// last chunks). A third kernel, splitzip_entropy_batch (at the end),
// decodes the many payloads of a packed staging buffer out of place with
// one launch, from descriptors in that buffer, reading each chunk index
// where it lies.
//
// Each warp decodes one chunk at a time: lane 0 claims chunks in descending
// order from an atomic ticket counter; the warp copies the chunk's symbol
// chunk into the warp's shared buffer. Its other bits pass through a small
// per-warp ring in shared memory, filled with cp.async one batch of rows
// ahead of the rebuild that uses them: out of place from the payload
// itself, in place from the warp's slot of a scratch buffer the warp
// copies them into first (in place the record may be overwritten by a
// lower chunk's values as soon as the chunk is published). Only the
// symbols and the ring in shared memory keep many warps resident: the
// other bits are most of a record (a byte a value of BF16's 1.3). In
// place the warp then publishes "read"
// for the chunk, waits until the chunks whose records lie in the chunk's
// values have published theirs, and writes the values: lane t decodes
// symbol lane t (symbols t, t + L, ...), so each step the warp writes L
// consecutive values. The in-place invariant (every chunk's record starts
// no later than its values) makes every chunk waited for a higher one,
// claimed earlier, so waits never form a cycle, with any number of
// resident warps.
//
// Safety: output addresses depend only on the chunk index and the value
// count; every record span read from the index is checked against the
// records' size before it is read, bit reads stay inside the warp's
// buffer, its scratch slot or the record, and problems are reported as
// bits in *err. Rebuild with `make kernels` after any change: the
// committed fatbin is stamped with this file's SHA-256 and a test fails
// when they differ.

#include <stdint.h>

#define EZ_CHUNK 16384
#define EZ_LANES 32
#define EZ_MAXLEN 12
#define EZ_OVERHEAD 64 // a record is at most its values' bytes plus this
#ifndef EZ_MAX_THREADS
#define EZ_MAX_THREADS 512 // 16 warps a block (the host reads it from the image): faster than 24 or 32 (docs/PERF.md)
#endif
#define EZ_RING 2048        // a warp's ring of decoded symbols
#define EZ_RING_MASK (EZ_RING - 1)
#ifndef EZ_LOOKUPS
#define EZ_LOOKUPS 5 // table lookups from each 64 bits a lane loads: at most 64 / EZ_MAXLEN
#endif
#ifndef EZ_STEPS
#define EZ_STEPS 20 // table lookups between rebuilds, a multiple of EZ_LOOKUPS
#endif
#ifndef EZ_PAIR_STEPS
#define EZ_PAIR_STEPS 10 // the same for pair symbols, which hold two values each
#endif
#ifndef EZ_SLOT_PIECES
#define EZ_SLOT_PIECES 8 // 16-byte pieces a lane has in flight copying other bits into the scratch slot
#endif
#define EZ_AHEAD 48 // rows a lane runs ahead: 32 x (48 + 2) < EZ_RING
// Rows one rebuild writes at most: the slowest lane gains at most two
// symbols a lookup, and when it runs out of symbols the others are at
// most one row past it. The other bits of this many rows are fetched,
// into the warp's other-bits ring, before each rebuild.
#define EZ_BATCH_ROWS (2 * EZ_STEPS + 2)
// The same in rows of values for pair symbols: two values a symbol.
#define EZ_PAIR_BATCH_ROWS (4 * EZ_PAIR_STEPS + 4)

// Error bits reported in *err (decode.cu uses 1, 2, 4 and 8).
#define EZ_ERR_INDEX 16u  // a record span is out of range, or breaks the in-place invariant
#define EZ_ERR_STREAM 32u // a chunk does not decode to its values

// EParams is passed by value; its layout matches gpu.entropyParams.
struct EParams {
    uint64_t dst;       // output, n * vsize bytes
    uint64_t src;       // payload; equal to dst in place
    uint64_t index;     // chunks + 1 u64 record offsets (a copy in place)
    uint64_t n;         // values
    uint64_t chunks;    // ceil(n / EZ_CHUNK)
    uint64_t records;   // where the records start in the payload
    uint64_t rec_bytes; // their size: the index starts at records + rec_bytes
    uint64_t flags;     // uint32 per chunk: epoch once read (in place only)
    uint64_t ctrl;      // uint32[2]: ticket counter, exited blocks
    uint64_t err;       // uint32 error bits
    uint64_t scratch;   // in place: slot_bytes a warp of the grid, for its chunk's other bits
    uint32_t field;     // the kernel's field variant (see the switch below)
    uint32_t in_place;
    uint32_t epoch;     // nonzero, new for every in-place launch
    uint32_t buf_bytes; // shared buffer per warp, a multiple of 16: a symbol chunk, then the ring
    uint32_t max_sym;   // the longest symbol chunk the buffer holds
    uint32_t slot_bytes; // a multiple of 16, at least a full chunk's other bits and 32
    uint32_t pair;       // version 3: symbols are pairs of fields (splitzip_entropy_decode_pairs)
    uint8_t lengths[256]; // code length of each symbol, 0 for none
    uint16_t pairs[256];  // version 3: symbol s's fields, the first in the low byte
};

// EzMode is what differs between payloads of single fields and of pairs:
// lookups between rebuilds, the value rows a rebuild writes at most, and
// the bytes of the ring of decoded fields.
template <bool PAIR> struct EzMode {
    static constexpr int steps = PAIR ? EZ_PAIR_STEPS : EZ_STEPS;
    static constexpr uint32_t per = PAIR ? 2 : 1; // values a symbol
    static constexpr uint32_t rows = PAIR ? EZ_PAIR_BATCH_ROWS : EZ_BATCH_ROWS;
    static constexpr uint32_t ring = per * EZ_RING;
};

__device__ __forceinline__ uint32_t ez_ld_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Publishing a chunk as read is a relaxed store by lane 0 after the
// warp's copies of the record have landed (cp.async.wait_all, then
// __syncwarp): the loads have returned their data before the store is
// issued, so no write made after a waiter sees the flag can change what
// was read. A release would also wait for the warp's earlier output
// stores (the same fence cost 11% of the fixed-rate decoder's in-place
// rate; decode.cu).
__device__ __forceinline__ void ez_st_publish(uint32_t *p, uint32_t v) {
    asm volatile("st.relaxed.gpu.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ez_cp16 copies the first n (at most 16) of 16 bytes from global to
// shared memory and zero-fills the rest; nothing is read when n is 0.
__device__ __forceinline__ void ez_cp16(void *smem, const void *gmem, uint32_t n) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}

__device__ __forceinline__ uint64_t ez_min(uint64_t a, uint64_t b) { return a < b ? a : b; }

__device__ __forceinline__ uint32_t ez_bswap(uint32_t x) { return __byte_perm(x, 0, 0x0123); }

// ez_bits returns the n bits (1..32) at bit pos of the big-endian bit
// string in w (words of the warp's buffer, nw of them); bits past the
// buffer read as zero.
__device__ __forceinline__ uint32_t ez_bits(const uint32_t *w, uint32_t nw, uint64_t pos, uint32_t n) {
    uint64_t i = pos >> 5;
    uint64_t a = i < nw ? ez_bswap(w[i]) : 0, b = i + 1 < nw ? ez_bswap(w[i + 1]) : 0;
    uint64_t x = (a << 32 | b) << (pos & 31);
    return (uint32_t)(x >> (64 - n));
}

// Field variants: bytes a value, where the symbol lies, other bits.
template <int VS, int SHIFT, int BITS, bool WHOLE> struct EzField {
    static constexpr int other = WHOLE ? 0 : 8 * VS - BITS;
};

// ez_oring is the bytes of a warp's other-bits ring for OB other bits a
// value: a power of two holding ROWS full rows of values and the 16-byte
// pieces either side (0 without other bits). The host computes the same
// (gpu.entropyORing).
__host__ __device__ constexpr uint32_t ez_oring(int OB, uint32_t ROWS) {
    uint32_t need = ROWS * EZ_LANES * (uint32_t)OB / 8 + 32, r = 16;
    while (r < need) {
        r <<= 1;
    }
    return OB == 0 ? 0 : r;
}

// EzOther is a chunk's other bits as a warp reads them: from its
// other-bits ring in shared memory (w, its words; bytes at offset x of
// the other bits' 16-byte aligned source lie at x mod ez_oring), starting
// at byte skew; src is that source in global memory (the record, or in
// place the warp's scratch slot from the second fill on), end the byte
// offset the other bits end at.
struct EzOther {
    uint32_t *w;
    const uint8_t *src;
    uint32_t skew, end;
};

// ez_fill starts the copy of the other bits of values [v0, v1) into the
// ring, in 16-byte pieces (whole pieces of the source: at most 15 bytes
// before and after, inside the record or the slot).
template <int OB, uint32_t ROWS>
__device__ __forceinline__ void ez_fill(const EzOther &o, uint32_t v0, uint32_t v1, uint32_t lane) {
    if (OB == 0 || v0 >= v1) {
        return;
    }
    constexpr uint32_t M = ez_oring(OB, ROWS) - 1;
    const uint32_t b0 = (o.skew + v0 * OB / 8) & ~15u;
    const uint32_t b1 = (min(o.skew + (v1 * OB + 7) / 8, o.end) + 15) & ~15u;
    for (uint32_t off = b0 + 16 * lane; off < b1; off += 16 * EZ_LANES) {
        ez_cp16((uint8_t *)o.w + (off & M), o.src + off, 16);
    }
}

// ez_obits returns the n bits (1..32) at bit pos of the other bits (big
// endian within each byte, as ez_bits), from the ring.
template <int OB, uint32_t ROWS>
__device__ __forceinline__ uint32_t ez_obits(const uint32_t *w, uint32_t pos, uint32_t n) {
    constexpr uint32_t WM = ez_oring(OB, ROWS) / 4 - 1;
    const uint32_t i = pos >> 5;
    const uint64_t x = ((uint64_t)ez_bswap(w[i & WM]) << 32 | ez_bswap(w[(i + 1) & WM])) << (pos & 31);
    return (uint32_t)(x >> (64 - n));
}

// ez_value rebuilds value i of a chunk from its field s and its other
// bits, from the ring.
template <int VS, int SHIFT, int BITS, bool WHOLE, uint32_t ROWS>
__device__ __forceinline__ uint32_t ez_value(const EzOther &o, uint32_t i, uint32_t s) {
    if (WHOLE) {
        return s;
    }
    constexpr int OB = EzField<VS, SHIFT, BITS, WHOLE>::other;
    uint32_t v;
    if (OB == 8) {
        v = ((const uint8_t *)o.w)[(o.skew + i) & (ez_oring(OB, ROWS) - 1)];
    } else {
        v = ez_obits<OB, ROWS>(o.w, 8 * o.skew + i * OB, OB);
    }
    return (v >> SHIFT) << (SHIFT + BITS) | s << SHIFT | (v & ((1u << SHIFT) - 1));
}

template <int VS> __device__ __forceinline__ void ez_store(uint8_t *out, uint32_t i, uint32_t v) {
    if (VS == 1) {
        out[i] = (uint8_t)v;
    } else if (VS == 2) {
        ((uint16_t *)out)[i] = (uint16_t)v;
    } else {
        ((uint32_t *)out)[i] = v;
    }
}

// ez_rebuild writes values [i0, i1) of a chunk from their fields in the
// ring (a field a byte, value i at i mod the ring's bytes) and their
// other bits in the other-bits ring, the warp's lanes together. With vec
// (i0 a multiple of 32, i1 too or the chunk's end), BF16 and FP8 whole
// bytes take four values a lane at a time.
template <int VS, int SHIFT, int BITS, bool WHOLE, bool PAIR>
__device__ __forceinline__ void ez_rebuild(const EzOther &o, const uint8_t *ring, uint8_t *out, uint32_t i0,
                                           uint32_t i1, bool vec, uint32_t lane) {
    constexpr bool BF16 = VS == 2 && SHIFT == 7 && BITS == 8 && !WHOLE;
    constexpr uint32_t ROWS = EzMode<PAIR>::rows, RM = EzMode<PAIR>::ring - 1;
    if ((BF16 || WHOLE) && vec) {
        constexpr uint32_t WM = BF16 ? ez_oring(8, ROWS) / 4 - 1 : 0;
        uint32_t i = i0 + 4 * lane;
        for (; i + 4 <= i1; i += 4 * EZ_LANES) {
            const uint32_t s4 = *(const uint32_t *)(ring + (i & RM));
            if (WHOLE) {
                *(uint32_t *)(out + i) = s4;
                continue;
            }
            const uint32_t ob = o.skew + i; // four other-bits bytes, unaligned
            const uint32_t o4 = __funnelshift_r(o.w[(ob >> 2) & WM], o.w[((ob >> 2) + 1) & WM], 8 * (ob & 3));
            const uint32_t hb = (o4 & 0x80808080u) | ((s4 >> 1) & 0x7F7F7F7Fu); // high bytes
            const uint32_t lb = ((s4 << 7) & 0x80808080u) | (o4 & 0x7F7F7F7Fu); // low bytes
            *(uint2 *)(out + 2 * i) = make_uint2(__byte_perm(lb, hb, 0x5140), __byte_perm(lb, hb, 0x7362));
        }
        for (; i < i1; i++) { // the chunk's last values
            ez_store<VS>(out, i, ez_value<VS, SHIFT, BITS, WHOLE, ROWS>(o, i, ring[i & RM]));
        }
        return;
    }
#pragma unroll 4
    for (uint32_t i = i0 + lane; i < i1; i += EZ_LANES) {
        ez_store<VS>(out, i, ez_value<VS, SHIFT, BITS, WHOLE, ROWS>(o, i, ring[i & RM]));
    }
}

// ez_landed waits for the warp's copies in flight (a fill of the
// other-bits ring holds the other bits of the values the warp writes next).
__device__ __forceinline__ void ez_landed() {
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncwarp();
}

// ez_chunk decodes one chunk into the cnt values at out, from its symbol
// chunk (cs bytes from byte sskew of the warp's buffer sw, snw words) and
// its other bits o, whose first L * EzMode<PAIR>::rows values' fill is in
// flight, and returns its error bits. L is the lanes of its symbols (cnt,
// or in pairs (cnt + 1) / 2); ptab is the pair table. All lanes of the
// warp call it.
template <int VS, int SHIFT, int BITS, bool WHOLE, bool PAIR>
__device__ __forceinline__ uint32_t ez_chunk(const uint32_t *sw, uint32_t snw, uint32_t sskew, uint32_t cs,
                                              const EzOther o, uint32_t cnt, uint32_t L, const uint32_t *tab2,
                                              const uint16_t *ptab, uint8_t *ring, uint8_t *out, uint32_t lane) {
    constexpr int OB = EzField<VS, SHIFT, BITS, WHOLE>::other;
    using M = EzMode<PAIR>;
    constexpr int SB = PAIR ? 8 : BITS; // bits of a raw symbol
    const uint8_t *b = (const uint8_t *)sw;
    const uint32_t *w = sw, nw = snw;
    const uint32_t cbase = 8 * sskew; // the symbol chunk's first bit in the buffer
    const uint32_t bv = L * M::rows;  // values a fill covers
    const uint32_t ns = PAIR ? (cnt + 1) / 2 : cnt; // symbols
    if (cs == 0) {
        return EZ_ERR_STREAM;
    }
    const uint32_t mode = b[cbase >> 3];
    if (mode == 0 || mode == 1) { // raw or constant: a batch of values a fill
        const uint32_t s1 = b[(cbase >> 3) + 1];
        if (mode == 1 ? cs != 2 || (SB < 8 && (s1 >> SB) != 0) : (uint64_t)cs != (8 + (uint64_t)ns * SB + 7) / 8) {
            return EZ_ERR_STREAM;
        }
        for (uint32_t v0 = 0; v0 < cnt; v0 += bv) {
            const uint32_t v1 = min(cnt, v0 + bv);
            ez_landed();
            for (uint32_t i = v0 + lane; i < v1; i += EZ_LANES) {
                const uint32_t j = PAIR ? i / 2 : i; // the value's symbol
                uint32_t s = mode == 1 ? s1 : ez_bits(w, nw, cbase + 8 + (uint64_t)j * SB, SB);
                if (PAIR) {
                    s = (ptab[s] >> (8 * (i & 1))) & 0xFF;
                }
                ez_store<VS>(out, i, ez_value<VS, SHIFT, BITS, WHOLE, M::rows>(o, i, s));
            }
            __syncwarp(); // the ring's bytes are read
            ez_fill<OB, M::rows>(o, v1, min(cnt, v1 + bv), lane);
        }
        return 0;
    }
    if (mode != 2) {
        return EZ_ERR_STREAM;
    }
    // Coded: 32 bits total, 5 bits width, L lane deviations, the lanes.
    const uint64_t limit = 8 * (uint64_t)cs; // bits of the symbol chunk
    if (limit < 8 + 37) {
        return EZ_ERR_STREAM;
    }
    const uint32_t total = ez_bits(w, nw, cbase + 8, 32);
    const uint32_t wd = ez_bits(w, nw, cbase + 40, 5);
    const uint64_t lanes0 = 45 + (uint64_t)L * wd; // first lane bit, from the chunk's start
    if (wd == 0 || lanes0 > limit) {
        return EZ_ERR_STREAM;
    }
    const uint64_t mean = total / L;
    uint64_t len = 0; // lane `lane`'s bits
    uint32_t bad = 0;
    if (lane < L) {
        const uint32_t d = ez_bits(w, nw, cbase + 45 + (uint64_t)lane * wd, wd); // wd <= 31
        const uint64_t mag = d & ((1u << (wd - 1)) - 1);
        const bool neg = (d >> (wd - 1)) & 1;
        if (neg && mag > mean) {
            bad = 1;
        }
        len = neg ? mean - mag : mean + mag;
    }
    // The lanes' starts: an exclusive scan of their lengths (64-bit sums,
    // so no wrap hides a length that does not add up).
    uint64_t start = len;
#pragma unroll
    for (int o = 1; o < EZ_LANES; o <<= 1) {
        const uint64_t v = __shfl_up_sync(0xFFFFFFFFu, start, o);
        if ((int)lane >= o) {
            start += v;
        }
    }
    const uint64_t sum = __shfl_sync(0xFFFFFFFFu, start, EZ_LANES - 1);
    start -= len;
    if (__any_sync(0xFFFFFFFFu, bad) || sum != total || (lanes0 + total + 7) / 8 != cs) {
        return EZ_ERR_STREAM;
    }
    // Lane t decodes coded lane t into the warp's ring, up to two symbols
    // a table lookup, EZ_LOOKUPS lookups from each 64 bits it loads; every
    // EZ_STEPS lookups the warp rebuilds the values of the positions that
    // every lane has passed, together: rows of L positions, consecutive in
    // memory. A lane runs at most EZ_AHEAD rows ahead of the slowest,
    // which bounds the ring.
    // In pairs, a symbol's two fields go to the ring as one 16-bit entry:
    // value i's field at byte i of the ring, as for single fields.
    const bool dec = lane < L;
    const uint32_t nt = dec ? (ns - lane + L - 1) / L : 0; // the lane's symbols
    const uint32_t endp = lane + L * nt;                   // past the lane's last position
    uint32_t q = dec ? (uint32_t)(cbase + lanes0 + start) : 0; // the lane's next bit in the buffer
    uint32_t k = 0, pos = lane, used = 0, zero = 0;
    const uint32_t rows = (ns + L - 1) / L;
    uint16_t *ring2 = (uint16_t *)ring;
    uint32_t done = 0, kmin = 0; // rows rebuilt; the slowest lane's symbols
    while (done < rows) {
        const uint32_t lim = min(endp, lane + L * (kmin + EZ_AHEAD));
        for (int st = 0; st < M::steps / EZ_LOOKUPS; st++) {
            const uint32_t wa = q >> 5, sh = q & 31;
            const uint32_t x = ez_bswap(w[min(wa, nw - 1)]), y = ez_bswap(w[min(wa + 1, nw - 1)]),
                           z = ez_bswap(w[min(wa + 2, nw - 1)]);
            uint32_t hi = __funnelshift_l(y, x, sh), lo = __funnelshift_l(z, y, sh), got = 0;
#pragma unroll
            for (int u = 0; u < EZ_LOOKUPS; u++) {
                const bool act = pos < lim;
                const uint32_t e = tab2[hi >> (32 - EZ_MAXLEN)];
                const bool two = (e >> 24) && pos + L < endp;
                if (act) {
                    if (PAIR) {
                        ring2[pos & EZ_RING_MASK] = ptab[e & 0xFF];
                        if (two) {
                            ring2[(pos + L) & EZ_RING_MASK] = ptab[(e >> 8) & 0xFF];
                        }
                    } else {
                        ring[pos & EZ_RING_MASK] = (uint8_t)e;
                        if (two) {
                            ring[(pos + L) & EZ_RING_MASK] = (uint8_t)(e >> 8);
                        }
                    }
                    zero |= e == 0;
                    k += 1 + two;
                    pos += two ? 2 * L : L;
                }
                const uint32_t l = act ? (e >> (two ? 20 : 16)) & 15 : 0;
                hi = __funnelshift_l(lo, hi, l);
                lo <<= l;
                got += l;
            }
            q += got;
            used += got;
        }
        // Rows below kmin are decoded (a lane done with its symbols holds
        // none back): positions [done * L, upto * L).
        kmin = __reduce_min_sync(0xFFFFFFFFu, pos < endp ? k : 0xFFFFFFFFu);
        const uint32_t upto = min(rows, kmin); // at most done + M::rows / M::per
        ez_landed(); // the other bits of the values of rows [done, done + M::rows / M::per); the symbols
        ez_rebuild<VS, SHIFT, BITS, WHOLE, PAIR>(o, ring, out, M::per * done * L, min(cnt, M::per * upto * L),
                                                 L == EZ_LANES, lane);
        __syncwarp(); // the ring positions are free again
        ez_fill<OB, M::rows>(o, M::per * upto * L, min(cnt, M::per * upto * L + bv), lane);
        done = upto;
    }
    bad = dec && (zero || used != len);
    return __any_sync(0xFFFFFFFFu, bad) ? EZ_ERR_STREAM : 0;
}

// ez_table fills the decode table tab2 (1 << EZ_MAXLEN entries, for the
// next EZ_MAXLEN bits of a lane: the first symbol in bits 0-7, a second
// in bits 8-15 when its code fits in the same bits too, the first code's
// length in bits 16-19, both codes' in bits 20-23, bit 24 set for two
// symbols; 0 where no code starts) from the code lengths: canonical codes
// in (length, symbol) order, as package entropy assigns them, through
// tab (one symbol a lookup) in scratch shared memory. The symbols of each
// length are found by a ballot a group of 32 symbols and length (bits),
// which gives both the counts and each symbol's rank among its length;
// an entry's length is the first whose left-justified end of codes lies
// past it. Lengths that break the Kraft sum give a table whose every
// entry still names a symbol of that length, so the kernel stays in
// bounds; the host refuses such payloads before launching.
__device__ __forceinline__ void ez_table(const EParams &p, uint32_t *tab2, uint16_t *tab, uint8_t *len, uint8_t *sorted,
                                         uint32_t (*bits)[EZ_MAXLEN + 1], uint32_t *cnt, uint32_t *first,
                                         uint32_t *offs) {
    const uint32_t tid = threadIdx.x, nt = blockDim.x, lane = tid & 31;
    for (uint32_t s = tid; s < 256; s += nt) {
        len[s] = p.lengths[s] <= EZ_MAXLEN ? p.lengths[s] : 0;
    }
    __syncthreads();
    // bits[g][l]: which of symbols 32g..32g+31 have length l.
    for (uint32_t g = tid >> 5; g < 8; g += nt >> 5) {
        const uint32_t l = len[32 * g + lane];
#pragma unroll
        for (uint32_t k = 1; k <= EZ_MAXLEN; k++) {
            const uint32_t m = __ballot_sync(0xFFFFFFFFu, l == k);
            if (lane == 0) {
                bits[g][k] = m;
            }
        }
    }
    __syncthreads();
    if (tid == 0) {
        uint32_t code = 0, off = 0;
        cnt[0] = first[0] = offs[0] = 0;
        for (int l = 1; l <= EZ_MAXLEN; l++) {
            uint32_t c = 0;
            for (int g = 0; g < 8; g++) {
                c += __popc(bits[g][l]);
            }
            code = (code + cnt[l - 1]) << 1;
            cnt[l] = c;
            first[l] = code;
            offs[l] = off;
            off += c;
        }
    }
    __syncthreads();
    for (uint32_t s = tid; s < 256; s += nt) {
        const uint32_t l = len[s];
        if (l) {
            const uint32_t g = s >> 5;
            uint32_t r = __popc(bits[g][l] & ((1u << (s & 31)) - 1));
            for (uint32_t h = 0; h < g; h++) {
                r += __popc(bits[h][l]);
            }
            sorted[offs[l] + r] = (uint8_t)s;
        }
    }
    __syncthreads();
    for (uint32_t v = tid; v < (1u << EZ_MAXLEN); v += nt) {
        uint32_t e = 0;
        for (int l = 1; l <= EZ_MAXLEN; l++) {
            const uint32_t c = v >> (EZ_MAXLEN - l);
            // The first length whose codes, left-justified, end past v:
            // v is at or past the previous length's end, so c >= first[l],
            // and a length of no codes ends where the previous one does.
            if (c < first[l] + cnt[l]) {
                e = sorted[offs[l] + c - first[l]] | (uint32_t)l << 8;
                break;
            }
        }
        tab[v] = (uint16_t)e;
    }
    __syncthreads();
    for (uint32_t v = tid; v < (1u << EZ_MAXLEN); v += nt) {
        const uint32_t e0 = tab[v], l0 = e0 >> 8;
        const uint32_t e1 = tab[(v << l0) & ((1u << EZ_MAXLEN) - 1)], l1 = e1 >> 8;
        const bool two = l0 && l1 && l0 + l1 <= EZ_MAXLEN;
        tab2[v] = l0 == 0 ? 0u
                          : (e0 & 0xFF) | (two ? (e1 & 0xFF) << 8 : 0) | l0 << 16 | (two ? l0 + l1 : l0) << 20 |
                                (uint32_t)two << 24;
    }
    __syncthreads();
}

// ez_search returns the smallest d in [lo, hi) for which pred(d) holds,
// or hi: pred must be false then true along the range (with a corrupt
// index it need not be; the answer then still lies in [lo, hi]). The
// warp's lanes probe 32 points a round.
template <typename P> __device__ __forceinline__ uint64_t ez_search(uint64_t lo, uint64_t hi, uint32_t lane, P pred) {
    while (lo < hi) {
        const uint64_t n = hi - lo;
        if (n <= EZ_LANES) {
            const uint32_t m = __ballot_sync(0xFFFFFFFFu, lane < n && pred(lo + lane));
            return m ? lo + __ffs(m) - 1 : hi;
        }
        const uint32_t m = __ballot_sync(0xFFFFFFFFu, pred(lo + n * lane / EZ_LANES)); // lane 0 probes lo
        if (m & 1u) {
            return lo;
        }
        // The first lane that said yes bounds the answer from above; the
        // one before it, which said no, from below.
        const uint32_t f = m ? __ffs(m) - 1 : EZ_LANES;
        const uint64_t nhi = f < EZ_LANES ? lo + n * f / EZ_LANES : hi;
        lo = lo + n * (f - 1) / EZ_LANES + 1;
        hi = nhi;
    }
    return hi;
}

// ez_guess is ez_search starting from a guess: one round probes the 32
// points from guess - 16 (inside [lo, hi)), and when the answer lies
// among them (pred false at the first, true at a later one) that is it;
// otherwise ez_search finishes on the side the round left.
template <typename P>
__device__ __forceinline__ uint64_t ez_guess(uint64_t lo, uint64_t hi, uint64_t guess, uint32_t lane, P pred) {
#ifdef EZ_NO_GUESS // a variant for measurements: the search alone
    const bool plain = true;
#else
    const bool plain = hi - lo <= EZ_LANES;
#endif
    if (plain) {
        return ez_search(lo, hi, lane, pred);
    }
    const uint64_t w0 = min(max(guess, lo + 16) - 16, hi - EZ_LANES); // lo <= w0, w0 + 32 <= hi
    const uint32_t m = __ballot_sync(0xFFFFFFFFu, pred(w0 + lane));
    if (m == 0) {
        return ez_search(w0 + EZ_LANES, hi, lane, pred);
    }
    if (m & 1u) {
        return ez_search(lo, w0 + 1, lane, pred);
    }
    return w0 + __ffs(m) - 1;
}

// ez_ld64 is the little-endian u64 at p, which need not be aligned.
__device__ __forceinline__ uint64_t ez_ld64(const uint8_t *p) {
    uint64_t v = 0;
#pragma unroll
    for (int i = 7; i >= 0; i--) {
        v = v << 8 | p[i];
    }
    return v;
}

// ez_run is a warp decoding chunks until none is left: lane 0 claims a
// chunk, the warp copies its symbol chunk into the warp's buffer, starts
// the copy of the first other bits into its other-bits ring (and in place
// copies all of them into the warp's scratch slot), publishes and waits
// (in place), and decodes it. The warp's buffer is the symbol chunk, the
// ring of decoded fields (EzMode<PAIR>::ring bytes), then the other-bits
// ring. In a batch launch (BATCH) it decodes the payload's chunks [lo,
// hi) only, its block's unit, and reads the chunk index where it lies in
// the payload (p.index, perhaps not 8-byte aligned), not from a copy.
template <int VS, int SHIFT, int BITS, bool WHOLE, bool PAIR, bool BATCH>
__device__ __forceinline__ void ez_run(const EParams &p, const uint32_t *tab2, const uint16_t *ptab, uint8_t *buf,
                                       uint64_t lo, uint64_t hi) {
    constexpr int OB = EzField<VS, SHIFT, BITS, WHOLE>::other;
    using M = EzMode<PAIR>;
    constexpr uint32_t ORING = ez_oring(OB, M::rows);
    const uint32_t lane = threadIdx.x & 31;
    const uint32_t *w = (const uint32_t *)buf;
    const uint32_t sym_bytes = p.buf_bytes - M::ring - ORING; // at least 32: checked below
    const uint32_t nw = sym_bytes / 4;
    uint8_t *ring = buf + sym_bytes;
    uint32_t *oring = (uint32_t *)(ring + M::ring);
    uint32_t *ctrl = (uint32_t *)p.ctrl;
    uint32_t *flags = (uint32_t *)p.flags;
    const uint64_t *index = (const uint64_t *)p.index;
    const uint8_t *src = (const uint8_t *)p.src;
    const uint64_t per = (uint64_t)EZ_CHUNK * VS;
    const uint64_t lim = p.records + p.rec_bytes; // no record byte lies past it; the index follows
    uint4 *slot = (uint4 *)(p.scratch + ((uint64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * p.slot_bytes);
    if (p.buf_bytes < M::ring + ORING + 32) { // no room for a symbol chunk: decode nothing
        if (lane == 0) {
            atomicOr((uint32_t *)p.err, EZ_ERR_INDEX);
        }
        return;
    }
    // A batch launch's block decodes a unit of one payload: its warps take
    // the unit's chunks in turn, with no counter.
    uint64_t claim = lo + (threadIdx.x >> 5);
    for (;;) {
        uint64_t c;
        if (BATCH) {
            if (claim >= hi) {
                break;
            }
            c = claim;
            claim += blockDim.x >> 5;
        } else {
            uint32_t t = 0;
            if (lane == 0) {
                t = atomicAdd(&ctrl[0], 1u);
            }
            t = __shfl_sync(0xFFFFFFFFu, t, 0);
            if (t >= p.chunks) {
                break;
            }
            c = p.chunks - 1 - t;
        }
        const uint32_t cnt = (uint32_t)ez_min(EZ_CHUNK, p.n - c * EZ_CHUNK);
        const uint64_t at = BATCH ? ez_ld64((const uint8_t *)p.index + 8 * c) : index[c];
        const uint64_t next = BATCH ? ez_ld64((const uint8_t *)p.index + 8 * (c + 1)) : index[c + 1];
        const uint64_t obytes = ((uint64_t)cnt * OB + 7) / 8;
        const uint64_t a = p.records + at, a0 = a & ~(uint64_t)15;
        const uint32_t skew = (uint32_t)(a - a0);
        const uint32_t nbo = (uint32_t)((skew + obytes + 15) & ~(uint64_t)15); // bytes of other bits staged in place
        uint32_t bad = 0;
        if (at > next || next > p.rec_bytes || next - at < obytes || next - at > (uint64_t)cnt * VS + EZ_OVERHEAD ||
            (c == 0 && at != 0) || (c == p.chunks - 1 && next != p.rec_bytes) || next - at - obytes > p.max_sym ||
            (p.in_place && ((c > 0 && a > c * per) || (OB > 0 && nbo > p.slot_bytes)))) {
            bad = EZ_ERR_INDEX;
        }
        // The symbol chunk [a + obytes, p.records + next), from a 16-byte
        // boundary at or before it.
        const uint64_t sa = a + obytes, s0 = sa & ~(uint64_t)15;
        const uint32_t sskew = (uint32_t)(sa - s0), cs = (uint32_t)(next - at - obytes);
        const uint32_t nb = (uint32_t)ez_min((sskew + (uint64_t)cs + 15) & ~(uint64_t)15, 0xFFFFFFFFu);
        if (!bad && nb > sym_bytes) {
            bad = EZ_ERR_INDEX; // the host sized the buffers from max_sym
        }
        const uint32_t ns = PAIR ? (cnt + 1) / 2 : cnt; // symbols
        const uint32_t L = (ns + 127) / 128 < EZ_LANES ? (ns + 127) / 128 : EZ_LANES;
        // Other bits: in place from the slot, out of place from the record
        // (the last piece may run up to 15 bytes into the symbols or the
        // index, which follows the records); the first fill from the record.
        const EzOther o = {oring, p.in_place ? (const uint8_t *)slot : src + a0, skew, skew + (uint32_t)obytes};
        if (!bad) {
            ez_fill<OB, M::rows>(EzOther{oring, src + a0, skew, o.end}, 0, min(cnt, L * M::rows), lane);
            for (uint32_t off = lane * 16; off < nb; off += EZ_LANES * 16) {
                const uint64_t g = s0 + off;
                ez_cp16(buf + off, src + g, (uint32_t)ez_min(16, lim > g ? lim - g : 0));
            }
            if (p.in_place && OB > 0) {
                // The other bits [a, a + obytes), 16-byte pieces from a0 (the
                // last may run up to 15 bytes into the index, which follows
                // the records), into the slot: EZ_SLOT_PIECES pieces a lane
                // in flight.
                const uint4 *g = (const uint4 *)(src + a0);
                for (uint32_t q0 = 0; q0 < nbo / 16; q0 += EZ_SLOT_PIECES * EZ_LANES) {
                    uint4 v[EZ_SLOT_PIECES];
#pragma unroll
                    for (int j = 0; j < EZ_SLOT_PIECES; j++) {
                        const uint32_t q = q0 + j * EZ_LANES + lane;
                        if (q < nbo / 16) {
                            v[j] = __ldcg(g + q);
                        }
                    }
#pragma unroll
                    for (int j = 0; j < EZ_SLOT_PIECES; j++) {
                        const uint32_t q = q0 + j * EZ_LANES + lane;
                        if (q < nbo / 16) {
                            slot[q] = v[j];
                        }
                    }
                }
            }
        }
        // Every load of the chunk's record has returned its data (the
        // copies have landed; the slot's stores took the loaded values).
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncwarp();
        if (p.in_place) {
            if (lane == 0) {
                ez_st_publish(&flags[c], p.epoch); // the warp has read the chunk
            }
            if (!bad) {
                // The chunks whose records lie in this chunk's values
                // [c * per, c * per + cnt * VS): those after c whose record
                // ends past the values' start and starts before their end.
                const uint64_t o0 = c * per, o1 = o0 + (uint64_t)cnt * VS;
                // Guesses from the records' mean size: one round each, mostly.
                const uint64_t mean = p.rec_bytes / p.chunks + 1;
                const uint64_t hi = ez_guess(c + 1, p.chunks, (o1 - min(o1, p.records)) / mean, lane,
                                             [&](uint64_t d) { return p.records + index[d] >= o1; });
                const uint64_t lo = ez_guess(c + 1, hi, (o0 - min(o0, p.records)) / mean, lane,
                                             [&](uint64_t d) { return p.records + index[d + 1] > o0; });
                for (uint64_t d = lo + lane; d < hi; d += EZ_LANES) {
                    while (ez_ld_acquire(&flags[d]) != p.epoch) {
                        __nanosleep(32);
                    }
                }
            }
            __syncwarp();
        }
        if (!bad) {
            bad = ez_chunk<VS, SHIFT, BITS, WHOLE, PAIR>(w, nw, sskew, cs, o, cnt, L, tab2, ptab, ring,
                                                         (uint8_t *)p.dst + c * per, lane);
        }
        if (bad && lane == 0) {
            atomicOr((uint32_t *)p.err, bad);
        }
        ez_landed(); // no fill is in flight: the buffers and the slot are free for the next chunk
    }
}

// ez_field runs the variant of the payload's field.
template <bool PAIR, bool BATCH>
__device__ __forceinline__ void ez_field(const EParams &p, const uint32_t *tab2, const uint16_t *ptab, uint8_t *buf,
                                         uint64_t lo = 0, uint64_t hi = 0) {
    switch (p.field) { // the index into entropy.Fields
    case 0:
        ez_run<2, 7, 8, false, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // BF16
        break;
    case 1:
        ez_run<2, 10, 5, false, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // F16
        break;
    case 2:
        ez_run<4, 23, 8, false, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // F32
        break;
    case 3:
        ez_run<1, 3, 4, false, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // F8_E4M3 exponent
        break;
    case 5:
        ez_run<1, 2, 5, false, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // F8_E5M2 exponent
        break;
    case 4:
    case 6:
        ez_run<1, 0, 8, true, PAIR, BATCH>(p, tab2, ptab, buf, lo, hi); // FP8 whole bytes
        break;
    default: // the host passes only the fields above
        if (threadIdx.x == 0) {
            atomicOr((uint32_t *)p.err, EZ_ERR_INDEX);
        }
    }
}

// ez_main is a block of either kernel: it builds the decode table, then
// its warps decode chunks until none is left, and the last block to leave
// resets the counters for the next launch.
template <bool PAIR> __device__ __forceinline__ void ez_main(const EParams &p) {
    extern __shared__ __align__(16) uint8_t ez_bufs[]; // buf_bytes a warp, at least 8 KiB in all
    __shared__ uint32_t tab2[1 << EZ_MAXLEN];
    __shared__ uint8_t len[256], sorted[256];
    __shared__ uint16_t ptab[PAIR ? 256 : 1];
    __shared__ uint32_t bits[8][EZ_MAXLEN + 1], cnt[EZ_MAXLEN + 1], first[EZ_MAXLEN + 1], offs[EZ_MAXLEN + 1];
    if (PAIR) {
        for (uint32_t s = threadIdx.x; s < 256; s += blockDim.x) {
            ptab[s] = p.pairs[s];
        }
    }
    ez_table(p, tab2, (uint16_t *)ez_bufs, len, sorted, bits, cnt, first, offs); // the buffers are free until then (it syncs)
    if ((p.pair != 0) == PAIR) {
        ez_field<PAIR, false>(p, tab2, ptab, ez_bufs + (threadIdx.x >> 5) * (uint64_t)p.buf_bytes);
    } else if (threadIdx.x == 0) { // the host launched the other kernel
        atomicOr((uint32_t *)p.err, EZ_ERR_INDEX);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&((uint32_t *)p.ctrl)[1], 1u) == gridDim.x - 1) {
            ((uint32_t *)p.ctrl)[0] = 0;
            ((uint32_t *)p.ctrl)[1] = 0;
            __threadfence();
        }
    }
}

// Two kernels, one a payload version, so that each is compiled for its
// symbols alone (one kernel holding both made version 2 payloads 1.4%
// slower; docs/PERF.md): splitzip_entropy_decode for single fields
// (version 2), splitzip_entropy_decode_pairs for pair symbols (version 3,
// p.pair set).
extern "C" __global__ void __launch_bounds__(EZ_MAX_THREADS, 1) splitzip_entropy_decode(const EParams p) {
    ez_main<false>(p);
}

extern "C" __global__ void __launch_bounds__(EZ_MAX_THREADS, 1) splitzip_entropy_decode_pairs(const EParams p) {
    ez_main<true>(p);
}

// A batch launch decodes the entropy payloads of one packed staging
// buffer out of place (docs/DESIGN.md 4.4). Each payload's descriptor,
// written by the host after checking its head and chunk index (package
// scatter, EZB_ENTRY bytes each, little-endian):
//
//   [0, 8)     destination address (16-byte aligned)
//   [8, 16)    offset of the payload in the staging buffer
//   [16, 24)   values
//   [24, 32)   chunks
//   [32, 40)   where the records start in the payload
//   [40, 48)   the records' bytes (the chunk index follows them)
//   [48, 52)   field (the index into entropy.Fields)
//   [52, 56)   1 for pair symbols (version 3)
//   [56, 60)   the longest symbol chunk
//   [60, 64)   the payload's first unit of work
//   [64, 320)  code lengths
//   [320, 832) pair table (version 3)
//
// A payload's units are runs of EZB_UNIT chunks, numbered across the
// payloads; blocks take units in turn. A block finds its unit's payload,
// copies its descriptor into shared memory and builds its decode table
// (unless the block's last unit was the same payload's), and its warps
// decode the unit's chunks. A chunk that breaks a check writes nothing
// more, and nothing is written outside a destination's values, whatever
// the payload's bytes: as for one payload out of place. A descriptor is
// checked again when it is read: a payload that would not end before the
// descriptors (a pack kept in memory whose bytes changed) decodes nothing
// and is reported, as does one whose units do not match its chunks.
#define EZB_ENTRY 832
#define EZB_UNIT 8 // chunks a unit: one a warp
#ifndef EZB_THREADS
#define EZB_THREADS 256 // 8 warps, and two blocks a multiprocessor
#endif

// EBParams is passed by value; its layout matches gpu.entropyBatchParams.
struct EBParams {
    uint64_t base;      // the staging buffer on the device
    uint64_t desc;      // offset of the first descriptor in it
    uint64_t err;       // uint32 error bits
    uint32_t count;     // descriptors
    uint32_t buf_bytes; // shared buffer per warp (as EParams.buf_bytes), for every payload of the batch
    uint32_t units;     // units of work of all the payloads
};

extern "C" __global__ void __launch_bounds__(EZB_THREADS, 2) splitzip_entropy_batch(const EBParams b) {
    extern __shared__ __align__(16) uint8_t ez_bufs[]; // buf_bytes a warp, at least 8 KiB in all
    __shared__ uint32_t tab2[1 << EZ_MAXLEN];
    __shared__ uint8_t len[256], sorted[256];
    __shared__ uint16_t ptab[256];
    __shared__ uint32_t bits[8][EZ_MAXLEN + 1], cnt[EZ_MAXLEN + 1], first[EZ_MAXLEN + 1], offs[EZ_MAXLEN + 1];
    __shared__ EParams p;
    __shared__ uint32_t item, unit0; // the payload of the block's unit, and its first unit
    const uint32_t tid = threadIdx.x;
    const uint8_t *descs = (const uint8_t *)(b.base + b.desc);
    uint32_t cur = 0xFFFFFFFFu; // the payload whose table the block holds
    for (uint32_t u = blockIdx.x; u < b.units; u += gridDim.x) {
        if (tid == 0) {
            // The last payload whose first unit is at most u: first units
            // rise with the descriptors (the host numbers them in order).
            uint32_t lo = 0, hi = b.count;
            while (hi - lo > 1) {
                const uint32_t mid = (lo + hi) / 2;
                if (*(const uint32_t *)(descs + (uint64_t)mid * EZB_ENTRY + 60) <= u) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            item = lo;
            unit0 = *(const uint32_t *)(descs + (uint64_t)lo * EZB_ENTRY + 60);
        }
        __syncthreads();
        const uint8_t *at = descs + (uint64_t)item * EZB_ENTRY;
        if (item != cur) {
            cur = item;
            const uint64_t *e64 = (const uint64_t *)at;
            const uint32_t *e32 = (const uint32_t *)at;
            if (tid == 0) {
                p.dst = e64[0];
                p.src = b.base + e64[1];
                p.n = e64[2];
                p.chunks = e64[3];
                p.records = e64[4];
                p.rec_bytes = e64[5];
                p.index = p.src + p.records + p.rec_bytes; // the index follows the records
                p.flags = p.ctrl = p.scratch = 0;
                p.err = b.err;
                p.field = e32[12];
                p.pair = e32[13];
                p.max_sym = e32[14];
                p.in_place = p.epoch = p.slot_bytes = 0;
                p.buf_bytes = b.buf_bytes;
                // What the host checked, checked again (a pack may be kept
                // in memory and used many times): the chunks cover the
                // values, the field and the pair flag are known, and the
                // payload, to the end of its chunk index, lies before the
                // descriptors.
                // Its units run to the next payload's first (the launch's
                // last unit for the last payload): as many as its chunks
                // make, so that none is left undecoded unreported.
                const uint64_t off = e64[1], d = b.desc;
                const uint32_t next0 =
                    item + 1 < b.count ? *(const uint32_t *)(descs + (uint64_t)(item + 1) * EZB_ENTRY + 60) : b.units;
                if (p.chunks != (p.n + EZ_CHUNK - 1) / EZ_CHUNK || p.field > 6 || p.pair > 1 || (off & 15) ||
                    off > d || p.records > d || p.rec_bytes > d || p.chunks >= d / 8 ||
                    off + p.records + p.rec_bytes + 8 * (p.chunks + 1) > d ||
                    next0 < unit0 || next0 - unit0 != (p.chunks + EZB_UNIT - 1) / EZB_UNIT) {
                    atomicOr((uint32_t *)b.err, EZ_ERR_INDEX);
                    p.chunks = 0;
                }
            }
            for (uint32_t s = tid; s < 256; s += blockDim.x) {
                p.lengths[s] = at[64 + s];
                p.pairs[s] = ((const uint16_t *)(at + 320))[s];
            }
            __syncthreads();
            for (uint32_t s = tid; s < 256; s += blockDim.x) {
                ptab[s] = p.pairs[s];
            }
            ez_table(p, tab2, (uint16_t *)ez_bufs, len, sorted, bits, cnt, first, offs); // syncs first and last
        }
        const uint64_t c0 = (uint64_t)(u - unit0) * EZB_UNIT, c1 = min(p.chunks, c0 + EZB_UNIT);
        uint8_t *buf = ez_bufs + (tid >> 5) * (uint64_t)b.buf_bytes;
        if (p.pair) {
            ez_field<true, true>(p, tab2, ptab, buf, c0, c1);
        } else {
            ez_field<false, true>(p, tab2, ptab, buf, c0, c1);
        }
        __syncthreads(); // the unit is decoded: the block's shared memory is free for the next
    }
}

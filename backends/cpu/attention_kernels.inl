// SPDX-License-Identifier: Apache-2.0
// Kernel bodies shared by every ISA translation unit. The including file
// defines, inside its own namespace, a struct `Simd` (vector type V, width W,
// register-tile sizes and the primitive operations) and then includes this
// file, so each ISA gets its own copy of every symbol: no inline function is
// shared between units compiled with different instruction sets.
// This file holds what every kernel uses (element access, block walk,
// software prefetch) and includes the kernels, one family per file:
// attention_gqa.inl (GQA-form decode), attention_absorb.inl (absorb-form
// decode), gemm_kernels.inl (projection and expansion GEMMs),
// attention_wide.inl (many query rows: prefill chunks), expansion_kernels.inl
// and attention_fp8.inl (8-bit caches). The unit's table of them is
// kernel_table_entries.inl.
//
// Conventions: scores are kept in the log2 domain (q is pre-multiplied by
// scale * log2(e)) so the softmax uses exp2. Running maxima start at a large
// finite negative value instead of -inf so that fully masked blocks give
// exp2(-inf - m) = 0 and never inf - inf.
//
// Non-finite values. A position a query row may not see (past its causal
// limit, or past the end of the sequence) contributes nothing to that row,
// not even a NaN: its score is replaced by -inf (a select, never arithmetic
// on it) and its value is never multiplied into the row's accumulator (the
// value passes skip it, or mask it lane by lane, instead of multiplying it by
// a zero probability: 0 * NaN and 0 * inf are NaN). A NaN or inf at a visible
// position follows IEEE arithmetic to the output: the maxima ignore NaN
// scores (the running maximum goes second into Simd::max) and exp2 returns
// NaN for them, so the NaN reaches the probabilities, the sum and the
// accumulator wherever it sits in a vector, tile or block; a +inf score makes
// the maximum +inf and exp2(inf - inf) = NaN; a -inf score weighs exactly 0.
// The value passes skip masked positions only on blocks that hold some
// (the causal diagonal of s_q > 1); every other block runs unmasked.

// Register tiles only stay in registers when their fixed-count loops are
// fully unrolled; -O2 alone does not guarantee it.
#define GQLA_UNROLL _Pragma("GCC unroll 32")

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kMaxFloor = -1e30f;

// ---------------------------------------------------------- element access
// Cache elements: f32 as is, f16 through F16C (or bits), bf16 by a shift.
template <int DT>
struct Elem;
// load2 reads 2W consecutive elements into two vectors. For f32 and f16
// they are the two halves in order; for bf16 (kPaired) the even-indexed and
// the odd-indexed elements, which widen without shuffles (load_bf16_pair):
// whatever meets them lane by lane (queries, accumulators) is kept in that
// "pair order" over whole 2W blocks (see pair_order below).
template <>
struct Elem<GQLA_DTYPE_F32> {
    using T = float;
    static constexpr bool kPaired = false;
    static inline Simd::V load(const T* p) { return Simd::load(p); }
    static inline void load2(const T* p, Simd::V& a, Simd::V& b) {
        a = load(p);
        b = load(p + Simd::W);
    }
    static inline float scalar(const T* p) { return *p; }
};
template <>
struct Elem<GQLA_DTYPE_F16> {
    using T = uint16_t;
    static constexpr bool kPaired = false;
    static inline Simd::V load(const T* p) { return Simd::load_f16(p); }
    static inline void load2(const T* p, Simd::V& a, Simd::V& b) {
        a = load(p);
        b = load(p + Simd::W);
    }
    static inline float scalar(const T* p) { return Simd::f16_scalar(*p); }
};
template <>
struct Elem<GQLA_DTYPE_BF16> {
    using T = uint16_t;
    static constexpr bool kPaired = true;
    static inline Simd::V load(const T* p) { return Simd::load_bf16(p); }
    static inline void load2(const T* p, Simd::V& a, Simd::V& b) { Simd::load_bf16_pair(p, a, b); }
    static inline float scalar(const T* p) {
        uint32_t u = static_cast<uint32_t>(*p) << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
};

// Pair order of a vector of n floats: every whole 2W block [x0 x1 ... x2W-1]
// becomes [x0 x2 ... x2W-2 | x1 x3 ... x2W-1]; the tail past the last whole
// block stays as is. to_pair_order copies src into dst in that order;
// from_pair_order restores x in place.
static inline void to_pair_order(const float* src, float* dst, int n) {
    constexpr int W = Simd::W;
    int b = 0;
    for (; b + 2 * W <= n; b += 2 * W)
        for (int i = 0; i < W; ++i) {
            dst[b + i] = src[b + 2 * i];
            dst[b + W + i] = src[b + 2 * i + 1];
        }
    for (; b < n; ++b) dst[b] = src[b];
}
static inline void from_pair_order(float* x, int n) {
    constexpr int W = Simd::W;
    float block[2 * W];
    for (int b = 0; b + 2 * W <= n; b += 2 * W) {
        for (int i = 0; i < W; ++i) {
            block[2 * i] = x[b + i];
            block[2 * i + 1] = x[b + W + i];
        }
        for (int i = 0; i < 2 * W; ++i) x[b + i] = block[i];
    }
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int64_t lmin(int64_t a, int64_t b) { return a < b ? a : b; }

// Tokens of the block of n tokens at position t that a row with causal limit
// `limit` (its last visible position) may see: a prefix of the block.
static inline int visible_in_block(int64_t limit, int64_t t, int n) {
    const int64_t allowed = limit - t + 1;
    return allowed >= n ? n : (allowed < 0 ? 0 : static_cast<int>(allowed));
}

// Smallest causal limit of `rows` rows: blocks ending at or before it are
// visible to every row and need no mask.
static inline int64_t min_row_limit(const int64_t* row_limit, int rows) {
    int64_t m = row_limit[0];
    for (int i = 1; i < rows; ++i) m = row_limit[i] < m ? row_limit[i] : m;
    return m;
}

// Rows of the tokens of a tile, as the tiles address them: rows[t] is the
// first element of token t's row. RunRows: consecutive rows of one page
// (base + t * ld); ListRows: a row per token anywhere (gathered tokens).
template <class T>
struct RunRows {
    const T* base;
    int64_t ld;
    inline const T* operator[](int64_t t) const { return base + t * ld; }
    inline RunRows from(int64_t t) const { return {base + t * ld, ld}; }
};
template <class T>
struct ListRows {
    const T* const* rows;
    inline const T* operator[](int64_t t) const { return rows[t]; }
    inline ListRows from(int64_t t) const { return {rows + t}; }
};
template <class T>
static inline RunRows<T> run_rows(const T* base, int64_t ld) {
    return {base, ld};
}

// Tokens of one block starting at position t: they share a page.
static inline int block_tokens(int64_t t, int64_t t1, int page_size, int max_block) {
    int64_t in_page = page_size - t % page_size;
    return static_cast<int>(lmin(lmin(in_page, t1 - t), max_block));
}

// ------------------------------------------------------- software prefetch
// A group's K and V of one page are only P * D elements contiguous (16 KiB
// at P = 64, D = 128 bf16), one group's pages lie all G groups apart, so
// the hardware stream prefetchers restart at every 4 KiB page and every
// K <-> V switch and keep too few misses in flight for cold caches. The
// kernels therefore prefetch the stream they will read next while they
// compute on the current one, a few cache lines after every tile, so that
// the misses overlap the arithmetic instead of following it. The lines go
// to L2 (locality 2): half a block ahead of both streams does not fit next
// to the current block in L1, and L1's own prefetcher hides the L2 hop
// (measured: L1-targeted prefetch was ~10% slower cold).
constexpr int64_t kCacheLine = 64;

struct PrefetchStream {
    // At most (an 8-bit block, prefetch_ahead): a block's values and their
    // scales, and the next block's keys, rope keys, values and both scale
    // rows. A segment is `count` rows of `bytes` bytes: one contiguous run
    // (rows == nullptr, at base), or a list of gathered rows.
    static constexpr int kMaxSegments = 7;
    const char* base[kMaxSegments];
    const void* const* rows[kMaxSegments];
    int64_t bytes[kMaxSegments];
    int count[kMaxSegments];
    int segments = 0;
    int seg = 0;
    int row = 0;
    int64_t off = 0;
    int lines_per_step = 0;

    inline void add(const void* p, int64_t n_bytes) {
        if (p == nullptr || n_bytes <= 0 || segments == kMaxSegments) return;
        base[segments] = static_cast<const char*>(p);
        rows[segments] = nullptr;
        bytes[segments] = n_bytes;
        count[segments] = 1;
        ++segments;
    }
    // n rows of row_bytes bytes each, at row_list[0..n).
    inline void add_rows(const void* const* row_list, int n, int64_t row_bytes) {
        if (row_list == nullptr || n <= 0 || row_bytes <= 0 || segments == kMaxSegments) return;
        base[segments] = static_cast<const char*>(row_list[0]);
        rows[segments] = row_list;
        bytes[segments] = row_bytes;
        count[segments] = n;
        ++segments;
    }
    // Spreads all lines evenly over `steps` calls of step().
    inline void plan(int steps) {
        int64_t lines = 0;
        for (int i = 0; i < segments; ++i) lines += count[i] * ((bytes[i] + kCacheLine - 1) / kCacheLine);
        lines_per_step = steps > 0 ? static_cast<int>((lines + steps - 1) / steps) : 0;
    }
    inline void step() {
        for (int i = 0; i < lines_per_step && seg < segments; ++i) {
            __builtin_prefetch(base[seg] + off, 0, 2);
            off += kCacheLine;
            if (off < bytes[seg]) continue;
            off = 0;
            if (++row < count[seg]) {
                base[seg] = static_cast<const char*>(rows[seg][row]);
                continue;
            }
            row = 0;
            ++seg;
        }
    }
    // step() for the bf16 and f32 GQA-form tiles: out of line, the position
    // in locals. Inlined into those tiles, step() kept it in the members,
    // and each line went through a store and a reload (the members may alias
    // what the loop reads): ~35% of a gathered value tile's time with the
    // cache hot. GQA 32/8, bf16, 2 Zen 5 cores, runs alternating with
    // step(): sparse K = 2048 of 65536 hot 0.25-0.27 -> 0.20-0.24 ms, B = 8
    // T = 4096 (streamed) 4.08-4.33 -> 3.82-3.88 ms; cold B = 1 and cold
    // sparse calls unchanged within the host's noise. The same change made
    // the absorb tiles' B = 8 decode 8% slower and the fp8 kernels' cold
    // B = 1 decode ~15% slower, so those keep step(); so did keeping the
    // locals but inlining (B = 8 10% slower).
    __attribute__((noinline)) void step_out_of_line() {
        int s = seg, r = row;
        int64_t o = off;
        if (s >= segments) return;
        const char* at = base[s];
        for (int i = 0; i < lines_per_step; ++i) {
            __builtin_prefetch(at + o, 0, 2);
            o += kCacheLine;
            if (o < bytes[s]) continue;
            o = 0;
            if (++r < count[s]) {
                at = static_cast<const char*>(rows[s][r]);
                continue;
            }
            r = 0;
            if (++s == segments) break;
            at = base[s];
        }
        seg = s;
        row = r;
        off = o;
        if (s < segments) base[s] = at;
    }
};

#include "backends/cpu/attention_gqa.inl"
#include "backends/cpu/attention_absorb.inl"
#include "backends/cpu/gemm_kernels.inl"
#include "backends/cpu/attention_wide.inl"
#include "backends/cpu/expansion_kernels.inl"
#include "backends/cpu/attention_fp8.inl"

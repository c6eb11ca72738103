// SPDX-License-Identifier: Apache-2.0
// Kernel bodies shared by every ISA translation unit. The including file
// defines, inside its own namespace, a struct `Simd` (vector type V, width W,
// register-tile sizes and the primitive operations) and then includes this
// file, so each ISA gets its own copy of every symbol: no inline function is
// shared between units compiled with different instruction sets.
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
    // Key, rope key and the two scale rows of an 8-bit block: at most four.
    static constexpr int kMaxSegments = 4;
    const char* base[kMaxSegments];
    int64_t bytes[kMaxSegments];
    int segments = 0;
    int seg = 0;
    int64_t off = 0;
    int lines_per_step = 0;

    inline void add(const void* p, int64_t n_bytes) {
        if (p == nullptr || n_bytes <= 0 || segments == kMaxSegments) return;
        base[segments] = static_cast<const char*>(p);
        bytes[segments] = n_bytes;
        ++segments;
    }
    // Spreads all lines evenly over `steps` calls of step().
    inline void plan(int steps) {
        int64_t lines = 0;
        for (int i = 0; i < segments; ++i) lines += (bytes[i] + kCacheLine - 1) / kCacheLine;
        lines_per_step = steps > 0 ? static_cast<int>((lines + steps - 1) / steps) : 0;
    }
    inline void step() {
        for (int i = 0; i < lines_per_step && seg < segments; ++i) {
            __builtin_prefetch(base[seg] + off, 0, 2);
            off += kCacheLine;
            if (off >= bytes[seg]) {
                ++seg;
                off = 0;
            }
        }
    }
};

// ------------------------------------------------------------ GQA kernel
// Scores of RB query rows against NT consecutive tokens: s[r][t] =
// q[r] . [k1[t] | k2[t]]. Each key vector is loaded and converted once and
// reused by all RB rows.
template <int DT, int RB, int NT>
static inline void gqa_score_tile(const float* q, int q_ld, const typename Elem<DT>::T* k1, int d1,
                                  const typename Elem<DT>::T* k2, int d2, float* s, int s_ld) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V acc[RB * NT];
    GQLA_UNROLL
    for (int i = 0; i < RB * NT; ++i) acc[i] = Simd::zero();
    float tail[RB * NT];
    GQLA_UNROLL
    for (int i = 0; i < RB * NT; ++i) tail[i] = 0.0f;
    // Two key segments, the second continuing the query row after d1.
    for (int seg = 0; seg < 2; ++seg) {
        const typename Elem<DT>::T* k = seg == 0 ? k1 : k2;
        const int dk = seg == 0 ? d1 : d2;
        const float* qs = seg == 0 ? q : q + d1;
        if (dk == 0) continue;
        int d = 0;
        // Whole 2W blocks through load2 (queries in pair order), then W.
        // With few vector registers (AVX2: 16) go token by token, one key
        // pair live at a time; holding all NT pairs plus a row's two query
        // vectors spilled there. With 32 (AVX-512), load each query vector
        // once for all tokens instead.
        constexpr bool kTokenOuter = RB * NT + 2 * NT + 4 >= Simd::kVectorRegisters;
        for (; d + 2 * W <= dk; d += 2 * W) {
            if constexpr (kTokenOuter) {
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t) {
                    V ka, kb;
                    Elem<DT>::load2(k + static_cast<int64_t>(t) * dk + d, ka, kb);
                    GQLA_UNROLL
                    for (int r = 0; r < RB; ++r) {
                        const float* qr = qs + static_cast<int64_t>(r) * q_ld + d;
                        acc[r * NT + t] = Simd::fma(Simd::load(qr), ka, acc[r * NT + t]);
                        acc[r * NT + t] = Simd::fma(Simd::load(qr + W), kb, acc[r * NT + t]);
                    }
                }
            } else {
                V ka[NT], kb[NT];
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t) Elem<DT>::load2(k + static_cast<int64_t>(t) * dk + d, ka[t], kb[t]);
                GQLA_UNROLL
                for (int r = 0; r < RB; ++r) {
                    const V qa = Simd::load(qs + static_cast<int64_t>(r) * q_ld + d);
                    const V qb = Simd::load(qs + static_cast<int64_t>(r) * q_ld + d + W);
                    GQLA_UNROLL
                    for (int t = 0; t < NT; ++t) {
                        acc[r * NT + t] = Simd::fma(qa, ka[t], acc[r * NT + t]);
                        acc[r * NT + t] = Simd::fma(qb, kb[t], acc[r * NT + t]);
                    }
                }
            }
        }
        for (; d + W <= dk; d += W) {
            V kv[NT];
            GQLA_UNROLL
            for (int t = 0; t < NT; ++t) kv[t] = Elem<DT>::load(k + static_cast<int64_t>(t) * dk + d);
            GQLA_UNROLL
            for (int r = 0; r < RB; ++r) {
                V qv = Simd::load(qs + static_cast<int64_t>(r) * q_ld + d);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t) acc[r * NT + t] = Simd::fma(qv, kv[t], acc[r * NT + t]);
            }
        }
        for (; d < dk; ++d) GQLA_UNROLL
        for (int t = 0; t < NT; ++t) {
            float kf = Elem<DT>::scalar(k + static_cast<int64_t>(t) * dk + d);
            GQLA_UNROLL
            for (int r = 0; r < RB; ++r) tail[r * NT + t] += qs[static_cast<int64_t>(r) * q_ld + d] * kf;
        }
    }
    float sums[RB * NT];
    Simd::hsum_many(acc, RB * NT, sums);
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int t = 0; t < NT; ++t) s[r * s_ld + t] = sums[r * NT + t] + tail[r * NT + t];
}

// Steps of the score pass over n tokens (one per tile), for prefetch pacing.
static inline int gqa_score_steps(int n) { return n / Simd::kScoreTokens + n % Simd::kScoreTokens; }

template <int DT, int RB>
static inline void gqa_scores_rows(const GqaItem& it, int r0, int n, const typename Elem<DT>::T* k1,
                                   const typename Elem<DT>::T* k2, float* s, PrefetchStream* pf) {
    constexpr int NT = Simd::kScoreTokens;
    const float* q = it.q + static_cast<int64_t>(r0) * it.q_ld;
    float* srow = s + r0 * kGqaTokenBlock;
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step();
        gqa_score_tile<DT, RB, NT>(q, it.q_ld, k1 + static_cast<int64_t>(j) * it.d1, it.d1,
                                   k2 ? k2 + static_cast<int64_t>(j) * it.d2 : nullptr, it.d2, srow + j,
                                   kGqaTokenBlock);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        gqa_score_tile<DT, RB, 1>(q, it.q_ld, k1 + static_cast<int64_t>(j) * it.d1, it.d1,
                                  k2 ? k2 + static_cast<int64_t>(j) * it.d2 : nullptr, it.d2, srow + j, kGqaTokenBlock);
    }
}

// acc[r][d..] = acc * corr[r] + sum_j p[r][j] v[j][d..] for NC vectors of
// the value dim; each value vector is converted once for all RB rows.
// kMasked: row r takes only its first visible[r] tokens (n is their maximum).
template <int DT, int RB, int NC, bool kMasked = false>
static inline void gqa_pv_tile(const float* p, int n, const typename Elem<DT>::T* v, int dv, int d, float* acc,
                               const float* corr, PrefetchStream* pf, const int* visible = nullptr) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V a[RB * NC];
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        V cr = Simd::set1(corr[r]);
        GQLA_UNROLL
        for (int c = 0; c < NC; ++c)
            a[r * NC + c] = Simd::mul(Simd::load(acc + static_cast<int64_t>(r) * dv + d + c * W), cr);
    }
    for (int j = 0; j < n; ++j) {
        if (pf) pf->step();
        V vv[NC];
        if constexpr (NC % 2 == 0) {
            // Whole 2W blocks: the accumulators of this tile hold them in pair order.
            GQLA_UNROLL
            for (int c = 0; c < NC; c += 2)
                Elem<DT>::load2(v + static_cast<int64_t>(j) * dv + d + c * W, vv[c], vv[c + 1]);
        } else {
            GQLA_UNROLL
            for (int c = 0; c < NC; ++c) vv[c] = Elem<DT>::load(v + static_cast<int64_t>(j) * dv + d + c * W);
        }
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) {
            if constexpr (kMasked)
                if (j >= visible[r]) continue;
            V pb = Simd::set1(p[r * kGqaTokenBlock + j]);
            GQLA_UNROLL
            for (int c = 0; c < NC; ++c) a[r * NC + c] = Simd::fma(pb, vv[c], a[r * NC + c]);
        }
    }
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int c = 0; c < NC; ++c) Simd::store(acc + static_cast<int64_t>(r) * dv + d + c * W, a[r * NC + c]);
}

// Rows r0..r0+RB of the block of n tokens at position t. kMasked (a block
// past some row's causal limit): each row sums only the tokens it may see.
template <int DT, int RB, bool kMasked>
static inline void gqa_pv_rows(const GqaItem& it, int r0, int64_t t, int n, const typename Elem<DT>::T* v,
                               const float* p, const float* corr, PrefetchStream* pf) {
    constexpr int W = Simd::W;
    constexpr int NC = Simd::kPvChunks;
    const int dv = it.dv;
    float* acc = it.acc + static_cast<int64_t>(r0) * dv;
    const float* pr = p + r0 * kGqaTokenBlock;
    const float* cr = corr + r0;
    int visible[RB];
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) visible[r] = kMasked ? visible_in_block(it.row_limit[r0 + r], t, n) : n;
    if constexpr (kMasked) {
        int widest = 0;
        for (int r = 0; r < RB; ++r) widest = visible[r] > widest ? visible[r] : widest;
        n = widest;
    }
    int d = 0;
    // The first column chunk paces the prefetch (one step per token).
    for (; d + NC * W <= dv; d += NC * W, pf = nullptr)
        gqa_pv_tile<DT, RB, NC, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    for (; d + W <= dv; d += W, pf = nullptr) gqa_pv_tile<DT, RB, 1, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    for (; d < dv; ++d) GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        float s = acc[static_cast<int64_t>(r) * dv + d] * cr[r];
        for (int j = 0; j < visible[r]; ++j)
            s += pr[r * kGqaTokenBlock + j] * Elem<DT>::scalar(v + static_cast<int64_t>(j) * dv + d);
        acc[static_cast<int64_t>(r) * dv + d] = s;
    }
}

// The value pass of one block over all rows, in register tiles of up to
// kScoreRows rows.
template <int DT, bool kMasked>
static inline void gqa_pv_block(const GqaItem& it, int64_t t, int n, const typename Elem<DT>::T* v, const float* p,
                                const float* corr, PrefetchStream* pf) {
    constexpr int RBmax = Simd::kScoreRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
        gqa_pv_rows<DT, RBmax, kMasked>(it, r0, t, n, v, p, corr, pf);
    switch (it.rows - r0) {
        case 1:
            gqa_pv_rows<DT, 1, kMasked>(it, r0, t, n, v, p, corr, pf);
            break;
        case 2:
            gqa_pv_rows<DT, 2 < RBmax ? 2 : 1, kMasked>(it, r0, t, n, v, p, corr, pf);
            break;
        case 3:
            gqa_pv_rows<DT, 3 < RBmax ? 3 : 1, kMasked>(it, r0, t, n, v, p, corr, pf);
            break;
        default:
            break;
    }
}

// The masked variant out of line: inlined next to the unmasked one it made
// the item too large for GCC to inline the unmasked tiles as before (the
// bf16 GQA decode ran ~1.5x slower).
template <int DT>
[[gnu::noinline]] static void gqa_pv_block_masked(const GqaItem& it, int64_t t, int n, const typename Elem<DT>::T* v,
                                                  const float* p, const float* corr) {
    gqa_pv_block<DT, true>(it, t, n, v, p, corr, nullptr);
}

// Online softmax over one block: masks causally, turns scores into
// probabilities in place and returns the per-row rescale of the old state.
static inline void gqa_softmax_block(const GqaItem& it, int64_t t, int n, float* s, float* corr) {
    constexpr int W = Simd::W;
    const int n_pad = (n + W - 1) / W * W;
    for (int r = 0; r < it.rows; ++r) {
        float* sr = s + r * kGqaTokenBlock;
        // Scores the row may not see (whatever they hold) become -inf.
        const int valid = visible_in_block(it.row_limit[r], t, n);
        for (int j = valid; j < n_pad; ++j) sr[j] = kNegInf;
        // Vector maximum: a scalar running max is one serial chain per token.
        // NaN scores stay out of it (running max second) and reach l and acc
        // through exp2 instead.
        Simd::V mx = Simd::set1(kNegInf);
        for (int j = 0; j < n_pad; j += W) mx = Simd::max(Simd::load(sr + j), mx);
        const float mb = Simd::hmax(mx);
        const float m_old = it.m[r];
        const float m_new = mb > m_old ? mb : m_old;
        Simd::V mv = Simd::set1(m_new), sum = Simd::zero();
        for (int j = 0; j < n_pad; j += W) {
            Simd::V p = Simd::exp2(Simd::sub(Simd::load(sr + j), mv));
            Simd::store(sr + j, p);
            sum = Simd::add(sum, p);
        }
        float c = Simd::exp2_scalar(m_old - m_new);
        corr[r] = c;
        it.l[r] = it.l[r] * c + Simd::hsum(sum);
        it.m[r] = m_new;
    }
}

// Cache rows of one block: `n` tokens from position t, all in one page.
template <int DT>
struct GqaBlock {
    using T = typename Elem<DT>::T;
    const T* k1;
    const T* k2;
    const T* v;
    int n;

    static inline GqaBlock at(const GqaItem& it, int64_t t) {
        GqaBlock b;
        b.n = block_tokens(t, it.t1, it.page_size, kGqaTokenBlock);
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        b.k1 = static_cast<const T*>(it.k1) + page * it.k1_page_stride + slot * it.d1;
        b.k2 = it.d2 ? static_cast<const T*>(it.k2) + page * it.k2_page_stride + slot * it.d2 : nullptr;
        b.v = static_cast<const T*>(it.v) + page * it.v_page_stride + slot * it.dv;
        return b;
    }
};

template <int DT>
static void gqa_attend(const GqaItem& item) {
    using T = typename Elem<DT>::T;
    constexpr int RBmax = Simd::kScoreRows;
    constexpr int64_t es = sizeof(T);
    static_assert(Simd::kPvChunks % 2 == 0, "value tiles must cover whole 2W blocks");
    GqaItem it = item;
    if constexpr (Elem<DT>::kPaired) {
        // Queries in pair order, per key segment, to meet the keys' load2.
        const int dk = it.d1 + it.d2;
        float* qp = it.scratch + gqa_scratch_pair_query_offset(it.rows, dk);
        for (int r = 0; r < it.rows; ++r) {
            const float* src = item.q + static_cast<int64_t>(r) * item.q_ld;
            to_pair_order(src, qp + static_cast<int64_t>(r) * dk, it.d1);
            to_pair_order(src + it.d1, qp + static_cast<int64_t>(r) * dk + it.d1, it.d2);
        }
        it.q = qp;
        it.q_ld = dk;
    }
    for (int r = 0; r < it.rows; ++r) {
        it.m[r] = kMaxFloor;
        it.l[r] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.rows) * it.dv; ++i) it.acc[i] = 0.0f;
    float* s = it.scratch;
    float* corr = it.scratch + it.rows * kGqaTokenBlock;
    if (it.t0 >= it.t1) return;
    const int64_t min_limit = min_row_limit(it.row_limit, it.rows);
    // Rows that can see nothing of [t0, t1) contribute nothing; the item is
    // only called with at least one visible token for the last row.
    GqaBlock<DT> cur = GqaBlock<DT>::at(it, it.t0);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const GqaBlock<DT> next = has_next ? GqaBlock<DT>::at(it, t + n) : cur;
        // While the keys are scored, this block's values arrive; while the
        // values are summed, the next block's keys arrive.
        PrefetchStream values_ahead;
        values_ahead.add(cur.v, n * it.dv * es);
        PrefetchStream keys_ahead;
        if (has_next) {
            keys_ahead.add(next.k1, next.n * it.d1 * es);
            keys_ahead.add(next.k2, next.n * it.d2 * es);
        }
        values_ahead.plan(gqa_score_steps(n));
        keys_ahead.plan(n);

        int r0 = 0;
        PrefetchStream* pf = &values_ahead;  // paced by the first row group only
        for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
            gqa_scores_rows<DT, RBmax>(it, r0, n, cur.k1, cur.k2, s, pf);
        switch (it.rows - r0) {
            case 1:
                gqa_scores_rows<DT, 1>(it, r0, n, cur.k1, cur.k2, s, pf);
                break;
            case 2:
                gqa_scores_rows<DT, 2 < RBmax ? 2 : 1>(it, r0, n, cur.k1, cur.k2, s, pf);
                break;
            case 3:
                gqa_scores_rows<DT, 3 < RBmax ? 3 : 1>(it, r0, n, cur.k1, cur.k2, s, pf);
                break;
            default:
                break;
        }
        gqa_softmax_block(it, t, n, s, corr);
        if (t + n - 1 > min_limit)
            gqa_pv_block_masked<DT>(it, t, n, cur.v, s, corr);
        else
            gqa_pv_block<DT, false>(it, t, n, cur.v, s, corr, &keys_ahead);
        t += n;
        cur = next;
    }
    if constexpr (Elem<DT>::kPaired) {
        // The value tiles of kPvChunks vectors kept their columns in pair order.
        constexpr int tile = Simd::kPvChunks * Simd::W;
        const int paired = it.dv / tile * tile;
        for (int r = 0; r < it.rows; ++r) from_pair_order(it.acc + static_cast<int64_t>(r) * it.dv, paired);
    }
}

// ---------------------------------------------------------- absorb kernel
// Query rows sit in lanes, so scores, softmax statistics and the value
// accumulation are all lane-parallel: no horizontal reductions. The latent
// tile is converted to f32 once per block and serves as key and as value.

// st[j][rows] = sum_k ctile[j][k] * qt[k][rows] for JT tokens x NV vectors of rows.
template <int JT, int NV>
static inline void absorb_score_tile(const float* ctile, int K, const float* qt, int64_t qt_ld, float* st, int st_ld) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V acc[JT * NV];
    GQLA_UNROLL
    for (int i = 0; i < JT * NV; ++i) acc[i] = Simd::zero();
    for (int k = 0; k < K; ++k) {
        V qv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) qv[v] = Simd::load(qt + k * qt_ld + v * W);
        GQLA_UNROLL
        for (int j = 0; j < JT; ++j) {
            V cb = Simd::set1(ctile[j * K + k]);
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) acc[j * NV + v] = Simd::fma(cb, qv[v], acc[j * NV + v]);
        }
    }
    GQLA_UNROLL
    for (int j = 0; j < JT; ++j) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) Simd::store(st + j * st_ld + v * W, acc[j * NV + v]);
}

// Tile calls of one column block of the score / value pass (prefetch pacing).
static inline int absorb_score_steps(int n) { return n / Simd::kAbsorbTokens + (n % Simd::kAbsorbTokens != 0); }
static inline int absorb_pv_steps(int r) { return r / Simd::kAbsorbDims + (r % Simd::kAbsorbDims != 0); }

// Calls f(std::integral_constant<int, R>) for the runtime count 1 <= rem < MAX:
// a tile's remainder then runs as one narrower register tile. One token (or
// dim) at a time would leave NV dependent FMA chains, a sixth of the ILP:
// with 64-token blocks and 6-token tiles the 4 leftover tokens took about a
// quarter of the AVX2 score pass.
template <int MAX, int R = 1, class F>
static inline void with_remainder(int rem, F&& f) {
    if constexpr (R < MAX) {
        if (rem == R)
            f(std::integral_constant<int, R>{});
        else
            with_remainder<MAX, R + 1>(rem, f);
    }
}

// The leftover tokens of a block as one narrower tile. Out of line: inlined,
// the remainder tiles changed the main loops' code (AVX-512, whose 64-token
// blocks have no remainder, ran ~5% slower).
template <int NV>
[[gnu::noinline]] static void absorb_score_remainder(const AbsorbItem& it, int rem, int K, int col, int j) {
    with_remainder<Simd::kAbsorbTokens>(rem, [&](auto r) {
        absorb_score_tile<decltype(r)::value, NV>(it.ctile + j * K, K, it.qt + col, it.qt_ld,
                                                  it.stile + j * it.rows_pad + col, it.rows_pad);
    });
}

template <int NV>
static inline void absorb_scores_cols(const AbsorbItem& it, int n, int K, int col, PrefetchStream* pf) {
    constexpr int JT = Simd::kAbsorbTokens;
    int j = 0;
    for (; j + JT <= n; j += JT) {
        if (pf) pf->step();
        absorb_score_tile<JT, NV>(it.ctile + j * K, K, it.qt + col, it.qt_ld, it.stile + j * it.rows_pad + col,
                                  it.rows_pad);
    }
    if (j < n) {
        if (pf) pf->step();
        absorb_score_remainder<NV>(it, n - j, K, col, j);
    }
}

// acc[k][rows] = acc * corr + sum_j ctile[j][k] * p[j][rows] for KB latent
// dims x NV row vectors. kMasked: lane i takes token j only when
// j < visible[i] (a select, so the latent of a token the row may not see
// never meets the row's accumulator).
template <int KB, int NV, bool kMasked = false>
static inline void absorb_pv_tile(const float* ctile, int K, int n, const float* p, int p_ld, float* acc,
                                  int64_t acc_ld, const float* corr, const float* visible = nullptr) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V a[KB * NV];
    GQLA_UNROLL
    for (int v = 0; v < NV; ++v) {
        V cr = Simd::load(corr + v * W);
        GQLA_UNROLL
        for (int k = 0; k < KB; ++k) a[k * NV + v] = Simd::mul(Simd::load(acc + k * acc_ld + v * W), cr);
    }
    for (int j = 0; j < n; ++j) {
        V pv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) pv[v] = Simd::load(p + j * p_ld + v * W);
        if constexpr (kMasked) {
            typename Simd::M sees[NV];
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v)
                sees[v] = Simd::lt(Simd::set1(static_cast<float>(j)), Simd::load(visible + v * W));
            GQLA_UNROLL
            for (int k = 0; k < KB; ++k) {
                V cb = Simd::set1(ctile[j * K + k]);
                GQLA_UNROLL
                for (int v = 0; v < NV; ++v) a[k * NV + v] = Simd::fma_where(sees[v], cb, pv[v], a[k * NV + v]);
            }
        } else {
            GQLA_UNROLL
            for (int k = 0; k < KB; ++k) {
                V cb = Simd::set1(ctile[j * K + k]);
                GQLA_UNROLL
                for (int v = 0; v < NV; ++v) a[k * NV + v] = Simd::fma(cb, pv[v], a[k * NV + v]);
            }
        }
    }
    GQLA_UNROLL
    for (int k = 0; k < KB; ++k) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) Simd::store(acc + k * acc_ld + v * W, a[k * NV + v]);
}

// The leftover latent dims as one narrower tile (out of line, as above).
template <int NV, bool kMasked>
[[gnu::noinline]] static void absorb_pv_remainder(const AbsorbItem& it, int rem, int K, int n, int col, int k,
                                                  const float* corr, const float* visible) {
    with_remainder<Simd::kAbsorbDims>(rem, [&](auto r) {
        absorb_pv_tile<decltype(r)::value, NV, kMasked>(it.ctile + k, K, n, it.stile + col, it.rows_pad,
                                                        it.acc + k * int64_t(it.rows_pad) + col, it.rows_pad,
                                                        corr + col, kMasked ? visible + col : nullptr);
    });
}

// visible: per lane, the tokens of the block the row may see (kMasked only).
template <int NV, bool kMasked = false>
static inline void absorb_pv_cols(const AbsorbItem& it, int n, int K, int col, const float* corr, PrefetchStream* pf,
                                  const float* visible = nullptr) {
    constexpr int KB = Simd::kAbsorbDims;
    int k = 0;
    for (; k + KB <= it.r; k += KB) {
        if (pf) pf->step();
        absorb_pv_tile<KB, NV, kMasked>(it.ctile + k, K, n, it.stile + col, it.rows_pad,
                                        it.acc + k * int64_t(it.rows_pad) + col, it.rows_pad, corr + col,
                                        kMasked ? visible + col : nullptr);
    }
    if (k < it.r) {
        if (pf) pf->step();
        absorb_pv_remainder<NV, kMasked>(it, it.r - k, K, n, col, k, corr, visible);
    }
}

// The value pass of one block over all row vectors; the first column block
// paces the prefetch.
template <bool kMasked>
static inline void absorb_pv_block(const AbsorbItem& it, int n, int K, const float* corr, PrefetchStream* pf,
                                   const float* visible) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kAbsorbRowVecs;
    int col = 0;
    for (; col + NV * W <= it.rows_pad; col += NV * W, pf = nullptr)
        absorb_pv_cols<NV, kMasked>(it, n, K, col, corr, pf, visible);
    for (; col < it.rows_pad; col += W, pf = nullptr) absorb_pv_cols<1, kMasked>(it, n, K, col, corr, pf, visible);
}

// Rows of an absorb item sit in lanes, so their visible counts for the block
// at t are a vector too (floats: compared with the token index in lanes).
static inline void absorb_visible_counts(const AbsorbItem& it, int64_t t, int n, float* visible) {
    for (int i = 0; i < it.rows_pad; ++i) visible[i] = static_cast<float>(visible_in_block(it.row_limit[i], t, n));
}

// The masked value pass of the block at t, out of line (see
// gqa_pv_block_masked); the latent tile must hold the block in f32.
[[gnu::noinline]] static void absorb_pv_block_masked(const AbsorbItem& it, int64_t t, int n, int K, const float* corr) {
    alignas(64) float visible[kAbsorbMaxRowBlock];  // rows_pad <= kAbsorbMaxRowBlock
    absorb_visible_counts(it, t, n, visible);
    absorb_pv_block<true>(it, n, K, corr, nullptr, visible);
}

// Causal mask and online softmax of one block of scores stile[j][rows]
// (rows in lanes): probabilities in place, per-row rescale of the old state
// into corr. Only blocks reaching past the earliest row limit are masked.
static inline void absorb_softmax_block(const AbsorbItem& it, int64_t t, int n, int64_t min_limit, float* corr) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    const int R = it.rows_pad;
    if (t + n - 1 > min_limit)
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < R; ++i)
                if (t + j > it.row_limit[i]) it.stile[j * R + i] = kNegInf;
    for (int i = 0; i < R; i += W) {
        // NaN scores stay out of the maximum (running max second).
        V mb = Simd::set1(kNegInf);
        for (int j = 0; j < n; ++j) mb = Simd::max(Simd::load(it.stile + j * R + i), mb);
        V m_old = Simd::load(it.m + i);
        V m_new = Simd::max(m_old, mb);
        V sum = Simd::zero();
        for (int j = 0; j < n; ++j) {
            V p = Simd::exp2(Simd::sub(Simd::load(it.stile + j * R + i), m_new));
            Simd::store(it.stile + j * R + i, p);
            sum = Simd::add(sum, p);
        }
        V cr = Simd::exp2(Simd::sub(m_old, m_new));
        Simd::store(corr + i, cr);
        Simd::store(it.l + i, Simd::fma(Simd::load(it.l + i), cr, sum));
        Simd::store(it.m + i, m_new);
    }
}

template <int DT>
static void absorb_attend(const AbsorbItem& it) {
    using T = typename Elem<DT>::T;
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kAbsorbRowVecs;
    const int K = it.r + it.d_r;
    const int R = it.rows_pad;
    for (int i = 0; i < R; ++i) {
        it.m[i] = kMaxFloor;
        it.l[i] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.r) * R; ++i) it.acc[i] = 0.0f;
    float* corr = it.stile + kAbsorbTokenBlock * R;
    const int64_t min_limit = min_row_limit(it.row_limit, R);

    // Latent rows of the block at position t (one page).
    auto latent_at = [&](int64_t t, const T** c, const T** kr) {
        const int64_t page = it.page_table[t / it.page_size];
        const int slot = static_cast<int>(t % it.page_size);
        *c = static_cast<const T*>(it.c) + page * it.c_page_stride + static_cast<int64_t>(slot) * it.r;
        *kr = static_cast<const T*>(it.kr) + page * it.kr_page_stride + static_cast<int64_t>(slot) * it.d_r;
    };
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = block_tokens(t, it.t1, it.page_size, kAbsorbTokenBlock);
        const T* c;
        const T* kr;
        latent_at(t, &c, &kr);
        // The next block's latent arrives while this one is computed on (see
        // PrefetchStream): converting a block that is not in cache would
        // otherwise stall on every line of it.
        PrefetchStream next_block;
        if (t + n < it.t1) {
            const int n_next = block_tokens(t + n, it.t1, it.page_size, kAbsorbTokenBlock);
            const T* c_next;
            const T* kr_next;
            latent_at(t + n, &c_next, &kr_next);
            next_block.add(c_next, static_cast<int64_t>(n_next) * it.r * static_cast<int64_t>(sizeof(T)));
            next_block.add(kr_next, static_cast<int64_t>(n_next) * it.d_r * static_cast<int64_t>(sizeof(T)));
        }
        next_block.plan(absorb_score_steps(n) + absorb_pv_steps(it.r));
        // Latent tile to f32: [c | kr] per token.
        for (int j = 0; j < n; ++j) {
            float* dst = it.ctile + j * K;
            const T* cj = c + static_cast<int64_t>(j) * it.r;
            const T* kj = kr + static_cast<int64_t>(j) * it.d_r;
            int k = 0;
            for (; k + W <= it.r; k += W) Simd::store(dst + k, Elem<DT>::load(cj + k));
            for (; k < it.r; ++k) dst[k] = Elem<DT>::scalar(cj + k);
            k = 0;
            for (; k + W <= it.d_r; k += W) Simd::store(dst + it.r + k, Elem<DT>::load(kj + k));
            for (; k < it.d_r; ++k) dst[it.r + k] = Elem<DT>::scalar(kj + k);
        }
        // Scores for every row vector.
        // The first column block paces the prefetch.
        PrefetchStream* pf = &next_block;
        int col = 0;
        for (; col + NV * W <= R; col += NV * W, pf = nullptr) absorb_scores_cols<NV>(it, n, K, col, pf);
        for (; col < R; col += W, pf = nullptr) absorb_scores_cols<1>(it, n, K, col, pf);
        absorb_softmax_block(it, t, n, min_limit, corr);
        // Values from the same tile; the causal diagonal masks lane by lane.
        if (t + n - 1 > min_limit)
            absorb_pv_block_masked(it, t, n, K, corr);
        else
            absorb_pv_block<false>(it, n, K, corr, &next_block, nullptr);
        t += n;
    }
}

// ------------------------------------------------------------------ GEMM
// B in f32 or bf16 (DT), widened as it is loaded; f32 accumulation.
template <int DT, int MB, int NV>
static inline void gemm_tile(int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb, float* C,
                             int64_t ldc) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V acc[MB * NV];
    GQLA_UNROLL
    for (int i = 0; i < MB * NV; ++i) acc[i] = Simd::zero();
    for (int k = 0; k < K; ++k) {
        V bv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) bv[v] = Elem<DT>::load(B + k * ldb + v * W);
        GQLA_UNROLL
        for (int m = 0; m < MB; ++m) {
            V ab = Simd::set1(A[m * lda + k]);
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) acc[m * NV + v] = Simd::fma(ab, bv[v], acc[m * NV + v]);
        }
    }
    GQLA_UNROLL
    for (int m = 0; m < MB; ++m) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) Simd::store(C + m * ldc + v * W, acc[m * NV + v]);
}

template <int DT, int MB>
static inline void gemm_rows(int N, int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb,
                             float* C, int64_t ldc) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kGemmVecs;
    int n = 0;
    // One row (a GEMV, as the decode projections are at batch 1): wide
    // passes, so each B row is read in long contiguous runs the hardware
    // prefetchers follow, instead of NV vectors per row and pass.
    if (MB == 1)
        for (; n + Simd::kGemvVecs * W <= N; n += Simd::kGemvVecs * W)
            gemm_tile<DT, 1, Simd::kGemvVecs>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n + NV * W <= N; n += NV * W) gemm_tile<DT, MB, NV>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n + W <= N; n += W) gemm_tile<DT, MB, 1>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n < N; ++n) GQLA_UNROLL
    for (int m = 0; m < MB; ++m) {
        float s = 0.0f;
        for (int k = 0; k < K; ++k) s += A[m * lda + k] * Elem<DT>::scalar(B + k * ldb + n);
        C[m * ldc + n] = s;
    }
}

template <int DT>
static void gemm_any(int M, int N, int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb,
                     float* C, int64_t ldc) {
    int m = 0;
    for (; m + 4 <= M; m += 4) gemm_rows<DT, 4>(N, K, A + m * lda, lda, B, ldb, C + m * ldc, ldc);
    for (; m < M; ++m) gemm_rows<DT, 1>(N, K, A + m * lda, lda, B, ldb, C + m * ldc, ldc);
}

#include "backends/cpu/attention_wide.inl"
#include "backends/cpu/expansion_kernels.inl"
#include "backends/cpu/attention_fp8.inl"

static const KernelTable& make_table(Isa isa, const char* name) {
    static const KernelTable table = {
        isa,
        name,
        {gqa_attend<GQLA_DTYPE_F32>, gqa_attend<GQLA_DTYPE_F16>, gqa_attend<GQLA_DTYPE_BF16>, gqa_attend_fp8},
        {gqa_attend_wide<GQLA_DTYPE_F32>, gqa_attend_wide<GQLA_DTYPE_F16>, gqa_attend_wide<GQLA_DTYPE_BF16>,
         gqa_attend_wide_fp8},
        {absorb_attend<GQLA_DTYPE_F32>, absorb_attend<GQLA_DTYPE_F16>, absorb_attend<GQLA_DTYPE_BF16>,
         absorb_attend_fp8},
        {expand_latent<GQLA_DTYPE_F32>, expand_latent<GQLA_DTYPE_F16>, expand_latent<GQLA_DTYPE_BF16>},
        gemm_any<GQLA_DTYPE_F32>,
        gemm_any<GQLA_DTYPE_BF16>,
        fp8_rows_to_f32,
    };
    return table;
}

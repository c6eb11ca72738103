// SPDX-License-Identifier: Apache-2.0
// Decode over a bf16 cache with AVX512-BF16 dot products (GQA form below,
// absorb form in attention_absorb_bf16_dot.inl, included at the end)
// (vdpbf16ps: 16 lanes, each += a[2i] b[2i] + a[2i+1] b[2i+1], f32 sums).
// Included after attention_kernels.inl inside an AVX-512 unit compiled with
// -mavx512bf16; reuses its softmax, block walk and prefetch.
//
// Why: the f32 kernel spends per token and row one FMA per 16 dims on the
// keys and one on the values, plus a bf16 -> f32 conversion of every cache
// vector; on a 2-core host that arithmetic, not DRAM, bounded GQA decode.
// Here the cache vectors feed the dot products as they are stored:
//   scores: the rows' queries are rounded to bf16 once per item, and each
//           64-byte key vector (32 dims) is one vdpbf16ps per row;
//   values: two tokens' value vectors are interleaved (vpunpck[lh]wd) into
//           (v[t][d], v[t+1][d]) pairs and multiplied with the rows'
//           (p[t], p[t+1]) pairs, so 32 dims of two tokens are 2 vdpbf16ps
//           per row instead of 4 FMAs and 4 conversions.
// Rounding the queries and probabilities to bf16 adds ~2^-9 relative error
// per term, well inside the bf16 cache's tolerance. The interleave works per
// 128-bit lane, so the value accumulators of each 32-dim chunk hold dims in
// "pair order" (lo: 0-3, 8-11, 16-19, 24-27; hi: the other four groups of
// four) during the item and are put back in order at its end. Value dims
// past the last multiple of 32 go through the f32 tile.

namespace bf16dot {

constexpr int kRows = 4;         // rows per register tile (scores and values)
constexpr int kScoreTokens = 4;  // tokens per score tile: 4 x 4 accumulators
constexpr int kPvChunks = 2;     // 32-dim chunks per value tile: 4 rows x 2 x (lo, hi) accumulators

static inline __m512bh as_bh(__m512i v) { return (__m512bh)v; }

// vpunpck[lh]wd pair two vectors within 128-bit lanes: of 32 dims, lo lane
// 4g + i holds dim 8g + i and hi lane 4g + i dim 8g + 4 + i ("pair order").
// permutex2var(lo, pair_order_first(), hi) gives dims 0-15 in order,
// permutex2var(lo, pair_order_second(), hi) dims 16-31 (index >= 16: hi).
static inline __m512i pair_order_first() {
    return _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
}
static inline __m512i pair_order_second() {
    return _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
}

// The low part of x = hi + lo, hi = bf16(x) (round to nearest even): x - hi,
// or 0 where that is below 2^-17 |x|, the noise that unscaling a bf16 value
// leaves. *kept marks the lanes with a low part.
static inline __m512 query_low_part(__m512 x, __mmask16* kept) {
    const __m512 rest = _mm512_sub_ps(x, _mm512_cvtpbh_ps(_mm512_cvtneps_pbh(x)));
    *kept =
        _mm512_cmp_ps_mask(_mm512_abs_ps(rest), _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0x1p-17f)), _CMP_GT_OQ);
    return _mm512_maskz_mov_ps(*kept, rest);
}

// Queries of all rows as bf16, each key segment padded with zeros to 32,
// unscaled (it.q carries softmax scale * log2 e; the scores take it back in
// f32): q = hi + lo with hi = bf16(q) and lo = bf16(q - hi). A caller's bf16
// query is its own hi, and its lo (a few f32 ulps from the unscaling) is
// dropped, so its scores are exact products summed in f32, as on the GPU. Any
// other query (f32 or f16 io) keeps lo, ~16 bits in all: rounding it to
// bf16 alone put score errors of 2^-9 |s| into every score, which with
// sharp softmaxes took outputs past the bf16 error bound (API-sequence
// fuzzer, f16 io). Returns whether some lo is kept (the scores then take
// two dot products per key vector). The 8-bit kernels keep no lo (no ql):
// an f32 or f16 query is rounded once, its 2^-9 dwarfed by the e4m3 keys'
// own rounding; a bf16 query is exact there too.
static inline bool round_queries(const GqaItem& it, float unscale_by, uint16_t* qb, uint16_t* ql, int64_t qb_ld) {
    const int p1 = (it.d1 + 31) / 32 * 32;
    const __m512 unscale = _mm512_set1_ps(unscale_by);
    __mmask16 any_lo = 0;
    for (int r = 0; r < it.rows; ++r) {
        const float* q = it.q + static_cast<int64_t>(r) * it.q_ld;
        uint16_t* dst = qb + r * qb_ld;
        uint16_t* dst_lo = ql ? ql + r * qb_ld : nullptr;
        for (int seg = 0; seg < 2; ++seg) {
            const int dk = seg == 0 ? it.d1 : it.d2;
            const float* src = seg == 0 ? q : q + it.d1;
            const int off = seg == 0 ? 0 : p1;
            const int padded = (dk + 31) / 32 * 32;
            for (int d = 0; d < padded; d += 16) {
                const int n = dk - d;
                const __mmask16 m = n >= 16 ? static_cast<__mmask16>(0xffff)
                                    : n > 0 ? static_cast<__mmask16>((1u << n) - 1)
                                            : static_cast<__mmask16>(0);
                const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + d), unscale);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + off + d), (__m256i)_mm512_cvtneps_pbh(v));
                if (ql == nullptr) continue;
                __mmask16 kept;
                const __m512 lo = query_low_part(v, &kept);
                any_lo |= kept;
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst_lo + off + d), (__m256i)_mm512_cvtneps_pbh(lo));
            }
        }
    }
    return any_lo != 0;
}

// s[r][t] = q[r] . [k1[t] | k2[t]] for RB rows x NT tokens (R: RunRows or
// ListRows of bf16).
template <int RB, int NT, bool kSplit, class R>
static inline void score_tile(const uint16_t* qb, const uint16_t* ql, int64_t qb_ld, float scale, R k1, int d1, R k2,
                              int d2, float* s, int s_ld) {
    __m512 acc[RB * NT];
    GQLA_UNROLL
    for (int i = 0; i < RB * NT; ++i) acc[i] = _mm512_setzero_ps();
    const int p1 = (d1 + 31) / 32 * 32;
    for (int seg = 0; seg < 2; ++seg) {
        const R k = seg == 0 ? k1 : k2;
        const int dk = seg == 0 ? d1 : d2;
        const uint16_t* qs = seg == 0 ? qb : qb + p1;
        const uint16_t* qls = !kSplit ? nullptr : seg == 0 ? ql : ql + p1;  // ql may be null without kSplit
        for (int d = 0; d < dk; d += 32) {
            const int n = dk - d;
            const __mmask32 m = n >= 32 ? ~static_cast<__mmask32>(0) : static_cast<__mmask32>((1u << n) - 1);
            __m512i kv[NT];
            GQLA_UNROLL
            for (int t = 0; t < NT; ++t) kv[t] = _mm512_maskz_loadu_epi16(m, k[t] + d);
            GQLA_UNROLL
            for (int r = 0; r < RB; ++r) {
                const __m512i qv = _mm512_loadu_si512(qs + r * qb_ld + d);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t)
                    acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qv), as_bh(kv[t]));
                if constexpr (kSplit) {
                    const __m512i lv = _mm512_loadu_si512(qls + r * qb_ld + d);
                    GQLA_UNROLL
                    for (int t = 0; t < NT; ++t)
                        acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(lv), as_bh(kv[t]));
                }
            }
        }
    }
    float sums[RB * NT];
    Simd::hsum_many(acc, RB * NT, sums);
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int t = 0; t < NT; ++t) s[r * s_ld + t] = sums[r * NT + t] * scale;
    if constexpr (kSplit) {
        // An inf in a key meets the low parts too, where a zero low part or
        // one of the other sign turns +-inf into NaN: such a score is the
        // high parts' alone, as an unsplit query's would be.
        for (int r = 0; r < RB; ++r)
            for (int t = 0; t < NT; ++t)
                if (!__builtin_isfinite(sums[r * NT + t]))
                    score_tile<1, 1, false>(qb + r * qb_ld, nullptr, qb_ld, scale, k1.from(t), d1, k2.from(t), d2,
                                            s + r * s_ld + t, s_ld);
    }
}

template <int RB, bool kSplit, class R>
static inline void scores_rows(const GqaItem& it, int r0, int n, const uint16_t* qb, const uint16_t* ql, int64_t qb_ld,
                               R k1, R k2, float* s, PrefetchStream* pf) {
    constexpr int NT = kScoreTokens;
    const uint16_t* q = qb + r0 * qb_ld;
    const uint16_t* q_lo = ql + r0 * qb_ld;
    const float scale = it.score_scale();
    float* srow = s + r0 * kGqaTokenBlock;
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step_out_of_line();
        score_tile<RB, NT, kSplit>(q, q_lo, qb_ld, scale, k1.from(j), it.d1, k2.from(j), it.d2, srow + j,
                                   kGqaTokenBlock);
    }
    for (; j < n; ++j) {
        if (pf) pf->step_out_of_line();
        score_tile<RB, 1, kSplit>(q, q_lo, qb_ld, scale, k1.from(j), it.d1, k2.from(j), it.d2, srow + j,
                                  kGqaTokenBlock);
    }
}

// All rows of the block, with or without the queries' low parts.
template <bool kSplit, class R>
static inline void scores_block(const GqaItem& it, int n, const uint16_t* qb, const uint16_t* ql, int64_t qb_ld, R k1,
                                R k2, float* s, PrefetchStream* pf) {
    constexpr int RBmax = kRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
        scores_rows<RBmax, kSplit>(it, r0, n, qb, ql, qb_ld, k1, k2, s, pf);
    switch (it.rows - r0) {
        case 1:
            scores_rows<1, kSplit>(it, r0, n, qb, ql, qb_ld, k1, k2, s, pf);
            break;
        case 2:
            scores_rows<2, kSplit>(it, r0, n, qb, ql, qb_ld, k1, k2, s, pf);
            break;
        case 3:
            scores_rows<3, kSplit>(it, r0, n, qb, ql, qb_ld, k1, k2, s, pf);
            break;
        default:
            break;
    }
}

// Probabilities of the block as bf16 pairs (p[t], p[t+1]) per row. The
// softmax left zeros from n up to the next multiple of 16, so an odd n pairs
// its last token with 0.
static inline void round_probabilities(const float* s, int rows, int n, uint16_t* pb) {
    const int n16 = (n + 15) / 16 * 16;
    for (int r = 0; r < rows; ++r)
        for (int j = 0; j < n16; j += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + r * kGqaTokenBlock + j),
                                (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + r * kGqaTokenBlock + j)));
}

// acc (pair order) = acc * corr + sum_t p[t] v[t] over RB rows x NC chunks
// of 32 dims starting at d. kMasked: row r takes only its first visible[r]
// tokens (n is their maximum); a row whose last visible token is the first
// of a pair meets that token paired with zeros, never with the next token's
// value (its probability is 0, but 0 * NaN is NaN).
template <int RB, int NC, bool kMasked = false, class R>
static inline void pv_tile(const uint16_t* pb, int n, R v, int dv, int d, float* acc, const float* corr,
                           PrefetchStream* pf, const int* visible = nullptr) {
    __m512 lo[RB * NC], hi[RB * NC];
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        const __m512 cr = _mm512_set1_ps(corr[r]);
        GQLA_UNROLL
        for (int c = 0; c < NC; ++c) {
            float* a = acc + static_cast<int64_t>(r) * dv + d + c * 32;
            lo[r * NC + c] = _mm512_mul_ps(_mm512_loadu_ps(a), cr);
            hi[r * NC + c] = _mm512_mul_ps(_mm512_loadu_ps(a + 16), cr);
        }
    }
    for (int j = 0; j < n; j += 2) {
        if (pf) {
            pf->step_out_of_line();
            pf->step_out_of_line();
        }
        const uint16_t* v0 = v[j] + d;
        const bool pair = j + 1 < n;
        const uint16_t* v1 = pair ? v[j + 1] + d : v0;
        __m512i plo[NC], phi[NC];
        [[maybe_unused]] __m512i slo[NC], shi[NC];  // token j alone (kMasked)
        GQLA_UNROLL
        for (int c = 0; c < NC; ++c) {
            const __m512i a = _mm512_loadu_si512(v0 + c * 32);
            const __m512i b = pair ? _mm512_loadu_si512(v1 + c * 32) : _mm512_setzero_si512();
            plo[c] = _mm512_unpacklo_epi16(a, b);
            phi[c] = _mm512_unpackhi_epi16(a, b);
            if constexpr (kMasked) {
                slo[c] = _mm512_unpacklo_epi16(a, _mm512_setzero_si512());
                shi[c] = _mm512_unpackhi_epi16(a, _mm512_setzero_si512());
            }
        }
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) {
            bool alone = false;
            if constexpr (kMasked) {
                if (j >= visible[r]) continue;
                alone = j + 1 >= visible[r];
            }
            uint32_t pp;
            __builtin_memcpy(&pp, pb + r * kGqaTokenBlock + j, 4);
            const __m512i pv = _mm512_set1_epi32(static_cast<int>(pp));
            GQLA_UNROLL
            for (int c = 0; c < NC; ++c) {
                const __m512i vlo = kMasked && alone ? slo[c] : plo[c];
                const __m512i vhi = kMasked && alone ? shi[c] : phi[c];
                lo[r * NC + c] = _mm512_dpbf16_ps(lo[r * NC + c], as_bh(pv), as_bh(vlo));
                hi[r * NC + c] = _mm512_dpbf16_ps(hi[r * NC + c], as_bh(pv), as_bh(vhi));
            }
        }
    }
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int c = 0; c < NC; ++c) {
        float* a = acc + static_cast<int64_t>(r) * dv + d + c * 32;
        _mm512_storeu_ps(a, lo[r * NC + c]);
        _mm512_storeu_ps(a + 16, hi[r * NC + c]);
    }
}

// Rows r0..r0+RB of the block of n tokens at position t; kMasked as in
// gqa_pv_rows.
template <int RB, bool kMasked, class R>
static inline void pv_rows(const GqaItem& it, int r0, int64_t t, int n, R v, const uint16_t* pb, const float* s,
                           const float* corr, PrefetchStream* pf) {
    constexpr int NC = kPvChunks;
    const int dv = it.dv;
    const int paired = dv / 32 * 32;  // dims in pair order
    float* acc = it.acc + static_cast<int64_t>(r0) * dv;
    const uint16_t* pr = pb + r0 * kGqaTokenBlock;
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
    // The first chunk paces the prefetch (one step per token).
    for (; d + NC * 32 <= paired; d += NC * 32, pf = nullptr)
        pv_tile<RB, NC, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    for (; d < paired; d += 32, pf = nullptr) pv_tile<RB, 1, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    if (d == dv) return;
    // The rest (dv % 32 dims) in f32, in natural order.
    const float* ps = s + r0 * kGqaTokenBlock;
    for (; d + Simd::W <= dv; d += Simd::W, pf = nullptr)
        gqa_pv_tile<GQLA_DTYPE_BF16, RB, 1, kMasked>(ps, n, v, dv, d, acc, cr, pf, visible);
    for (; d < dv; ++d) GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        float x = acc[static_cast<int64_t>(r) * dv + d] * cr[r];
        for (int j = 0; j < visible[r]; ++j) x += ps[r * kGqaTokenBlock + j] * Elem<GQLA_DTYPE_BF16>::scalar(v[j] + d);
        acc[static_cast<int64_t>(r) * dv + d] = x;
    }
}

template <bool kMasked, class R>
static inline void pv_block(const GqaItem& it, int64_t t, int n, R v, const uint16_t* pb, const float* s,
                            const float* corr, PrefetchStream* pf) {
    constexpr int RBmax = kRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr) pv_rows<RBmax, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
    switch (it.rows - r0) {
        case 1:
            pv_rows<1, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        case 2:
            pv_rows<2, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        case 3:
            pv_rows<3, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        default:
            break;
    }
}

// Out of line, as gqa_pv_block_masked.
template <class R>
[[gnu::noinline]] static void pv_block_masked(const GqaItem& it, int64_t t, int n, R v, const uint16_t* pb,
                                              const float* s, const float* corr) {
    pv_block<true>(it, t, n, v, pb, s, corr, nullptr);
}

// Pair order -> natural order for the first dv / 32 * 32 dims of each row.
static inline void unpair_accumulators(const GqaItem& it) {
    const __m512i i0 = pair_order_first(), i1 = pair_order_second();
    const int paired = it.dv / 32 * 32;
    for (int r = 0; r < it.rows; ++r)
        for (int d = 0; d < paired; d += 32) {
            float* a = it.acc + static_cast<int64_t>(r) * it.dv + d;
            const __m512 lo = _mm512_loadu_ps(a), hi = _mm512_loadu_ps(a + 16);
            _mm512_storeu_ps(a, _mm512_permutex2var_ps(lo, i0, hi));
            _mm512_storeu_ps(a + 16, _mm512_permutex2var_ps(lo, i1, hi));
        }
}

// The block walk over contiguous (GqaRunBlock) or gathered (GqaListBlock)
// tokens. kDotScores: the scores too are dot products (queries rounded by
// round_queries); otherwise they are f32 FMAs over keys widened in
// registers, the f32 table's score tiles (see gqa_attend_bf16_fma_scores).
template <class Block, bool kDotScores>
static void gqa_attend_bf16_blocks(const GqaItem& item) {
    const GqaItem it =
        kDotScores
            ? item
            : with_pair_order_queries(item, item.scratch + gqa_scratch_pair_query_offset(item.rows, item.d1 + item.d2));
    for (int r = 0; r < it.rows; ++r) {
        it.m[r] = kMaxFloor;
        it.l[r] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.rows) * it.dv; ++i) it.acc[i] = 0.0f;
    if (it.t0 >= it.t1) return;
    float* s = it.scratch;
    float* corr = it.scratch + it.rows * kGqaTokenBlock;
    const int64_t qb_ld = gqa_bf16_query_ld(it.d1, it.d2);
    uint16_t* qb = reinterpret_cast<uint16_t*>(it.scratch + gqa_scratch_scores_floats(it.rows));
    uint16_t* ql = qb + round16(it.rows * qb_ld / 2) * 2;
    uint16_t* pb = ql + round16(it.rows * qb_ld / 2) * 2;
    const bool split = kDotScores && round_queries(it, it.query_unscale(), qb, ql, qb_ld);
    const int64_t min_limit = min_row_limit(it.row_limit, it.rows);

    Block cur = Block::at(it, it.t0);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const Block next = has_next ? Block::at(it, t + n) : cur;
        PrefetchStream ahead;
        prefetch_ahead(it, cur, has_next ? &next : nullptr, t == it.t0, n / kScoreTokens + n % kScoreTokens + n,
                       &ahead);

        if (!kDotScores)
            gqa_scores_block<GQLA_DTYPE_BF16>(it, n, cur.k1, cur.k2, s, &ahead);
        else if (split)
            scores_block<true>(it, n, qb, ql, qb_ld, cur.k1, cur.k2, s, &ahead);
        else
            scores_block<false>(it, n, qb, ql, qb_ld, cur.k1, cur.k2, s, &ahead);
        gqa_softmax_block(it, t, n, s, corr);
        round_probabilities(s, it.rows, n, pb);
        if (t + n - 1 > min_limit)
            pv_block_masked(it, t, n, cur.v, pb, s, corr);
        else
            pv_block<false>(it, t, n, cur.v, pb, s, corr, &ahead);
        t += n;
        cur = next;
    }
    unpair_accumulators(it);
}

static void gqa_attend_bf16(const GqaItem& it) {
    if (it.k1_rows != nullptr)
        gqa_attend_bf16_blocks<GqaListBlock<GQLA_DTYPE_BF16>, true>(it);
    else
        gqa_attend_bf16_blocks<GqaRunBlock<GQLA_DTYPE_BF16>, true>(it);
}

// The same walk with the f32 table's score tiles: widening a key vector
// costs two shifts shared by the tile's rows, and the f32 query is used as
// given (no split into bf16 parts). On a 2-vCPU Zen 5 EPYC, whose 512-bit
// FMAs issue as fast as its vdpbf16ps, it ran GQA-form decodes in 0.70-0.85x
// the all-dot kernel's time with f32 queries and 0.85-0.99x with bf16 ones
// (hot cache, T=4096), so which of the two a host runs is measured
// (avx512bf16_kernels()).
static void gqa_attend_bf16_fma_scores(const GqaItem& it) {
    if (it.k1_rows != nullptr)
        gqa_attend_bf16_blocks<GqaListBlock<GQLA_DTYPE_BF16>, false>(it);
    else
        gqa_attend_bf16_blocks<GqaRunBlock<GQLA_DTYPE_BF16>, false>(it);
}

#include "backends/cpu/attention_absorb_bf16_dot.inl"

}  // namespace bf16dot

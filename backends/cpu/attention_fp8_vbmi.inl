// SPDX-License-Identifier: Apache-2.0
// The narrow GQA-form kernel over an 8-bit cache for hosts with AVX512-VBMI
// beside AVX512-BF16 (kernels_avx512bf16.cpp picks it at run time): e4m3 is
// widened to bf16 by two 128-entry byte lookups (vpermi2b: the low and the
// high byte of each bf16, NaN and subnormal codes included, exact) and a
// byte interleave, about 5 instructions per 64 elements instead of ~18
// (attention_fp8_dot.inl). The interleave works per 128-bit lane, so of 64
// elements the first bf16 vector holds elements 0-7, 16-23, 32-39, 48-55
// ("A order") and the second 8-15, 24-31, 40-47, 56-63 ("C order"): the
// queries are laid out the same way, and the value accumulators are put
// back into natural order at the end. The absorb kernel of
// attention_fp8_dot.inl stages its latent through the same lookups (end of
// file). Included after attention_fp8_dot.inl.

#define GQLA_VBMI __attribute__((target("avx512vbmi")))

// Element i of the A / C vector of a 64-element chunk.
static inline int a_order(int i) { return i / 8 * 16 + i % 8; }
static inline int c_order(int i) { return i / 8 * 16 + 8 + i % 8; }

// Low and high bytes of the bf16 of value / 256 (kE4m3Raw) of the 128
// magnitude codes; the sign is or-ed in separately.
struct E4m3ByteTables {
    alignas(64) uint8_t lo[128];
    alignas(64) uint8_t hi[128];
};
static const E4m3ByteTables& e4m3_byte_tables() {
    static const E4m3ByteTables t = [] {
        E4m3ByteTables x{};
        for (int code = 0; code < 128; ++code) {
            const uint16_t b = bf16_bits_nearest(e4m3_raw_scalar(static_cast<uint8_t>(code)));  // exact
            x.lo[code] = static_cast<uint8_t>(b & 0xffu);
            x.hi[code] = static_cast<uint8_t>(b >> 8);
        }
        return x;
    }();
    return t;
}

struct E4m3Lut {
    __m512i lo0, lo1, hi0, hi1;
};
static inline E4m3Lut e4m3_lut() {
    const E4m3ByteTables& t = e4m3_byte_tables();
    return E4m3Lut{_mm512_load_si512(t.lo), _mm512_load_si512(t.lo + 64), _mm512_load_si512(t.hi),
                   _mm512_load_si512(t.hi + 64)};
}

// 64 e4m3 bytes to bf16 (value / 256): a in A order, c in C order (per
// 128-bit lane, a holds the lane's bytes 0-7 and c its bytes 8-15).
GQLA_VBMI static inline void e4m3x64_to_bf16(__m512i bytes, const E4m3Lut& L, __m512i& a, __m512i& c) {
    const __m512i lo = _mm512_permutex2var_epi8(L.lo0, bytes, L.lo1);
    __m512i hi = _mm512_permutex2var_epi8(L.hi0, bytes, L.hi1);
    hi = _mm512_ternarylogic_epi32(hi, bytes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);  // | sign
    a = _mm512_unpacklo_epi8(lo, hi);
    c = _mm512_unpackhi_epi8(lo, hi);
}

// Two tokens' 64 e4m3 bytes (b0: token j, b1: token j + 1) to the four
// bf16 pair vectors of the value tiles (v4[k]: 32-bit lanes (v_j, v_j+1) of
// dims 16 L + 4 k .. + 3 in 128-bit lane L, the order the unpacks of two
// e4m3x64_to_bf16 results give): the raw bytes are interleaved first, so
// each lookup widens both tokens at once (12 operations per pair of tokens
// instead of 14).
GQLA_VBMI static inline void e4m3x64_pairs_to_bf16(__m512i b0, __m512i b1, const E4m3Lut& L, __m512i (&v4)[4]) {
    e4m3x64_to_bf16(_mm512_unpacklo_epi8(b0, b1), L, v4[0], v4[1]);
    e4m3x64_to_bf16(_mm512_unpackhi_epi8(b0, b1), L, v4[2], v4[3]);
}

static inline __mmask64 mask64(int n) {
    return n >= 64 ? ~static_cast<__mmask64>(0) : (static_cast<__mmask64>(1) << n) - 1;
}
static inline int pad64(int n) { return (n + 63) / 64 * 64; }

// Tokens per score tile: 4 rows x 4 tokens take 16 accumulators beside 8 key
// vectors and the 4 lookup tables (of 32 registers).
constexpr int kVbmiScoreTokens = 4;

// Query element x (unscaled) as bf16 high and low parts: hi = bf16(x),
// lo = bf16(x - hi), or 0 where that is below 2^-17 |x| (query_low_part's
// rule: the noise unscaling a bf16 query leaves). Returns whether lo is kept.
static inline bool split_query_element(float x, uint16_t* hi, uint16_t* lo) {
    *hi = bf16_bits_nearest(x);
    const uint32_t hb = static_cast<uint32_t>(*hi) << 16;
    float h;
    __builtin_memcpy(&h, &hb, 4);
    const float rest = x - h;
    const bool kept = __builtin_fabsf(rest) > __builtin_fabsf(x) * 0x1p-17f;
    *lo = kept ? bf16_bits_nearest(rest) : 0;
    return kept;
}

// Queries as bf16, unscaled (it.q carries the softmax scale * log2 e, which
// the scores take back in f32, so a query given in bf16 is multiplied as
// given), high parts in qb and low parts in ql (round_queries' split: an f32
// or f16 query keeps ~16 bits): the e4m3 segment in 64-element chunks of A
// then C order, zero-padded to 64; the rope segment in natural order padded
// to 32. Returns whether some low part is kept.
static inline bool vbmi_queries(const GqaItem& it, uint16_t* qb, uint16_t* ql, int64_t qb_ld) {
    const int p1 = pad64(it.d1), p2 = (it.d2 + 31) / 32 * 32;
    const float unscale = it.query_unscale();
    bool any_lo = false;
    auto put = [&](const float* q, int e, int dk, uint16_t* hi, uint16_t* lo) {
        if (e < dk) {
            any_lo |= split_query_element(q[e] * unscale, hi, lo);
        } else {
            *hi = 0;
            *lo = 0;
        }
    };
    for (int r = 0; r < it.rows; ++r) {
        const float* q = it.q + static_cast<int64_t>(r) * it.q_ld;
        uint16_t* dst = qb + r * qb_ld;
        uint16_t* dlo = ql + r * qb_ld;
        for (int d = 0; d < p1; d += 64)
            for (int i = 0; i < 32; ++i) {
                put(q, d + a_order(i), it.d1, dst + d + i, dlo + d + i);
                put(q, d + c_order(i), it.d1, dst + d + 32 + i, dlo + d + 32 + i);
            }
        for (int e = 0; e < p2; ++e) put(q + it.d1, e, it.d2, dst + p1 + e, dlo + p1 + e);
    }
    return any_lo;
}

// k1 / k2: row accessors (RunRows or ListRows) from the tile's first token.
// kSplit: q = qb + ql, both multiplied (fp8_dot_score_tile's rule).
// The tile's sums are left unreduced in raw[r * kGqaTokenBlock + t]: the
// row tile reduces them 16 at a time once all its tokens are done
// (reduce_scores): 0.45 -> 0.37 ms for GQA 32/8 T=4096 fp8 decode, hot, on
// 2 Zen 4 cores, against reducing 4 x 2 tiles through hadd as they end.
template <int RB, int NT, bool kSplit, class R1, class R2>
GQLA_VBMI static inline void vbmi_score_tile(const uint16_t* qb, const uint16_t* ql, int64_t qb_ld, R1 k1, int d1,
                                             const float* ks, R2 k2, int d2, __m512* raw, const E4m3Lut& L) {
    __m512 acc[RB * NT];
    GQLA_UNROLL
    for (int i = 0; i < RB * NT; ++i) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < d1; d += 64) {
        const __mmask64 m = mask64(d1 - d);
        __m512i ka[NT], kc[NT];
        GQLA_UNROLL
        for (int t = 0; t < NT; ++t) e4m3x64_to_bf16(_mm512_maskz_loadu_epi8(m, k1[t] + d), L, ka[t], kc[t]);
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) {
            const __m512i qa = _mm512_loadu_si512(qb + r * qb_ld + d);
            const __m512i qc = _mm512_loadu_si512(qb + r * qb_ld + d + 32);
            GQLA_UNROLL
            for (int t = 0; t < NT; ++t) {
                acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qa), as_bh(ka[t]));
                acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qc), as_bh(kc[t]));
            }
            if constexpr (kSplit) {
                const __m512i la = _mm512_loadu_si512(ql + r * qb_ld + d);
                const __m512i lc = _mm512_loadu_si512(ql + r * qb_ld + d + 32);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t) {
                    acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(la), as_bh(ka[t]));
                    acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(lc), as_bh(kc[t]));
                }
            }
        }
    }
    GQLA_UNROLL
    for (int t = 0; t < NT; ++t) {
        const __m512 sc = _mm512_set1_ps(ks[t]);
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) acc[r * NT + t] = _mm512_mul_ps(acc[r * NT + t], sc);
    }
    const uint16_t* q2 = qb + pad64(d1);
    const uint16_t* q2l = kSplit ? ql + pad64(d1) : nullptr;
    for (int d = 0; d < d2; d += 32) {
        const __mmask32 m = mask32(d2 - d);
        __m512i kv[NT];
        [[maybe_unused]] bool inf[NT];
        GQLA_UNROLL
        for (int t = 0; t < NT; ++t) {
            kv[t] = _mm512_maskz_loadu_epi16(m, k2[t] + d);
            if constexpr (kSplit) inf[t] = has_inf_bf16(kv[t]);
        }
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) {
            const __m512i qv = _mm512_loadu_si512(q2 + r * qb_ld + d);
            GQLA_UNROLL
            for (int t = 0; t < NT; ++t) acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qv), as_bh(kv[t]));
            if constexpr (kSplit) {
                const __m512i qlv = _mm512_loadu_si512(q2l + r * qb_ld + d);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t)
                    if (!inf[t]) acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qlv), as_bh(kv[t]));
            }
        }
    }
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int t = 0; t < NT; ++t) _mm512_store_ps(raw + r * kGqaTokenBlock + t, acc[r * NT + t]);
}

// s[r][j] = scale * (sum of the lanes of raw[r][j]) for RB rows and n
// tokens, 16 sums per hsum16.
template <int RB>
static inline void reduce_scores(__m512* raw, int n, float scale, float* s) {
    const int whole = (n + 15) / 16 * 16;
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r)
        for (int j = n; j < whole; ++j) raw[r * kGqaTokenBlock + j] = _mm512_setzero_ps();
    const __m512 sc = _mm512_set1_ps(scale);
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r)
        for (int j = 0; j < n; j += 16) {
            const __mmask16 m =
                n - j >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - j)) - 1);
            _mm512_mask_storeu_ps(s + r * kGqaTokenBlock + j, m,
                                  _mm512_mul_ps(Simd::hsum16(raw + r * kGqaTokenBlock + j), sc));
        }
}

template <int RB, bool kSplit, class Block>
GQLA_VBMI static inline void vbmi_scores_split(const GqaItem& it, int r0, int n, const uint16_t* qb, const uint16_t* ql,
                                               int64_t qb_ld, const Block& b, const float* ks, float* s,
                                               PrefetchStream* pf, const E4m3Lut& L) {
    constexpr int NT = kVbmiScoreTokens;
    const uint16_t* q = qb + r0 * qb_ld;
    const uint16_t* q_lo = kSplit ? ql + r0 * qb_ld : nullptr;
    alignas(64) __m512 raw[RB * kGqaTokenBlock];
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step();
        vbmi_score_tile<RB, NT, kSplit>(q, q_lo, qb_ld, b.k1.from(j), it.d1, ks + j, b.k2.from(j), it.d2, raw + j, L);
    }
    for (; j < n; ++j)
        vbmi_score_tile<RB, 1, kSplit>(q, q_lo, qb_ld, b.k1.from(j), it.d1, ks + j, b.k2.from(j), it.d2, raw + j, L);
    reduce_scores<RB>(raw, n, it.score_scale(), s + r0 * kGqaTokenBlock);
}

// ql: the queries' low parts, or null (a bf16 query: exact as given).
template <int RB, class Block>
GQLA_VBMI static inline void vbmi_scores_rows(const GqaItem& it, int r0, int n, const uint16_t* qb, const uint16_t* ql,
                                              int64_t qb_ld, const Block& b, const float* ks, float* s,
                                              PrefetchStream* pf, const E4m3Lut& L) {
    if (ql)
        vbmi_scores_split<RB, true>(it, r0, n, qb, ql, qb_ld, b, ks, s, pf, L);
    else
        vbmi_scores_split<RB, false>(it, r0, n, qb, ql, qb_ld, b, ks, s, pf, L);
}

// acc (per 64 dims: A lo, A hi, C lo, C hi, each in the pair order of the
// bf16 kernel) = acc * corr + sum_t p[t] v[t] for RB rows and the 64 dims at d.
template <int RB, bool kMasked, class R>
GQLA_VBMI static inline void vbmi_pv_tile(const uint16_t* pb, int n, R v, int dv, int d, float* acc, const float* corr,
                                          PrefetchStream* pf, const int* visible, const E4m3Lut& L) {
    __m512 a[RB * 4];
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        const __m512 cr = _mm512_set1_ps(corr[r]);
        GQLA_UNROLL
        for (int k = 0; k < 4; ++k)
            a[r * 4 + k] = _mm512_mul_ps(_mm512_loadu_ps(acc + int64_t(r) * dv + d + 16 * k), cr);
    }
    for (int j = 0; j < n; j += 2) {
        if (pf) {
            pf->step();
            pf->step();
        }
        const bool pair = j + 1 < n;
        __m512i v4[4];
        e4m3x64_pairs_to_bf16(_mm512_loadu_si512(v[j] + d),
                              pair ? _mm512_loadu_si512(v[j + 1] + d) : _mm512_setzero_si512(), L, v4);
        [[maybe_unused]] __m512i s4[4];
        if constexpr (kMasked) {  // each first token alone (its partner's half zero), for rows that see only it
            const __m512i first = _mm512_set1_epi32(0xffff);
            GQLA_UNROLL
            for (int k = 0; k < 4; ++k) s4[k] = _mm512_and_si512(v4[k], first);
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
            for (int k = 0; k < 4; ++k)
                a[r * 4 + k] = _mm512_dpbf16_ps(a[r * 4 + k], as_bh(pv), as_bh(kMasked && alone ? s4[k] : v4[k]));
        }
    }
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(acc + int64_t(r) * dv + d + 16 * k, a[r * 4 + k]);
}

template <int RB, bool kMasked, class R>
GQLA_VBMI static inline void vbmi_pv_rows(const GqaItem& it, int r0, int64_t t, int n, R v, const uint16_t* pb,
                                          const float* s, const float* corr, PrefetchStream* pf, const E4m3Lut& L) {
    const int dv = it.dv;
    const int chunked = dv / 64 * 64;
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
    for (; d < chunked; d += 64, pf = nullptr) vbmi_pv_tile<RB, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible, L);
    if (d == dv) return;
    const float* ps = s + r0 * kGqaTokenBlock;
    for (; d + Simd::W <= dv; d += Simd::W)
        gqa_pv_tile<GQLA_DTYPE_FP8_E4M3, RB, 1, kMasked>(ps, n, v, dv, d, acc, cr, nullptr, visible);
    for (; d < dv; ++d) GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        float x = acc[static_cast<int64_t>(r) * dv + d] * cr[r];
        for (int j = 0; j < visible[r]; ++j) x += ps[r * kGqaTokenBlock + j] * e4m3_raw_scalar(v[j][d]);
        acc[static_cast<int64_t>(r) * dv + d] = x;
    }
}

template <bool kMasked, class R>
GQLA_VBMI static inline void vbmi_pv_block(const GqaItem& it, int64_t t, int n, R v, const uint16_t* pb, const float* s,
                                           const float* corr, PrefetchStream* pf, const E4m3Lut& L) {
    constexpr int RBmax = kRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
        vbmi_pv_rows<RBmax, kMasked>(it, r0, t, n, v, pb, s, corr, pf, L);
    switch (it.rows - r0) {
        case 1:
            vbmi_pv_rows<1, kMasked>(it, r0, t, n, v, pb, s, corr, pf, L);
            break;
        case 2:
            vbmi_pv_rows<2, kMasked>(it, r0, t, n, v, pb, s, corr, pf, L);
            break;
        case 3:
            vbmi_pv_rows<3, kMasked>(it, r0, t, n, v, pb, s, corr, pf, L);
            break;
        default:
            break;
    }
}

template <class R>
[[gnu::noinline]] GQLA_VBMI static void vbmi_pv_block_masked(const GqaItem& it, int64_t t, int n, R v,
                                                             const uint16_t* pb, const float* s, const float* corr,
                                                             const E4m3Lut& L) {
    vbmi_pv_block<true>(it, t, n, v, pb, s, corr, nullptr, L);
}

// The accumulators' 64-dim chunks back to natural order: each 32-float
// half from the bf16 kernel's pair order, then A / C order to dims.
static inline void vbmi_unpermute(const GqaItem& it) {
    const __m512i i0 = pair_order_first(), i1 = pair_order_second();
    const int chunked = it.dv / 64 * 64;
    float tmp[64];
    for (int r = 0; r < it.rows; ++r)
        for (int d = 0; d < chunked; d += 64) {
            float* a = it.acc + static_cast<int64_t>(r) * it.dv + d;
            for (int h = 0; h < 64; h += 32) {
                const __m512 lo = _mm512_loadu_ps(a + h), hi = _mm512_loadu_ps(a + h + 16);
                _mm512_storeu_ps(tmp + h, _mm512_permutex2var_ps(lo, i0, hi));
                _mm512_storeu_ps(tmp + h + 16, _mm512_permutex2var_ps(lo, i1, hi));
            }
            for (int i = 0; i < 32; ++i) {
                a[a_order(i)] = tmp[i];
                a[c_order(i)] = tmp[32 + i];
            }
        }
}

// Room check: the queries take pad64(d1) + pad32(d2) bf16 per row where
// the scratch plans pad32(d1 + d2) + 32 (plus the unused f32 pair-query
// area after them); tiny key dims go to gqa_attend_fp8_dot.
static inline bool vbmi_fits(const GqaItem& it) { return it.d1 + it.d2 >= 32; }

template <class Block>
GQLA_VBMI static void vbmi_attend_blocks(const GqaItem& it) {
    constexpr int RBmax = kRows;
    for (int r = 0; r < it.rows; ++r) {
        it.m[r] = kMaxFloor;
        it.l[r] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.rows) * it.dv; ++i) it.acc[i] = 0.0f;
    if (it.t0 >= it.t1) return;
    const E4m3Lut L = e4m3_lut();
    float* s = it.scratch;
    float* corr = it.scratch + it.rows * kGqaTokenBlock;
    const int64_t qb_ld = pad64(it.d1) + (it.d2 + 31) / 32 * 32;
    uint16_t* qb = reinterpret_cast<uint16_t*>(it.scratch + gqa_scratch_scores_floats(it.rows));
    uint16_t* ql = qb + round16(it.rows * qb_ld / 2) * 2;
    uint16_t* pb = ql + round16(it.rows * qb_ld / 2) * 2;
    float* scale =
        it.scratch + gqa_scratch_fp8_offset(it.rows, it.d1 + it.d2) + round16(int64_t(it.rows) * kGqaTokenBlock);
    if (!vbmi_queries(it, qb, ql, qb_ld)) ql = nullptr;
    const int64_t min_limit = min_row_limit(it.row_limit, it.rows);

    Block cur = Block::at(it, it.t0);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const Block next = has_next ? Block::at(it, t + n) : cur;
        PrefetchStream ahead;
        prefetch_ahead(it, cur, has_next ? &next : nullptr, t == it.t0, n / kVbmiScoreTokens + n + n % 2,
                       &ahead);  // score tiles, then pv steps
        for (int j = 0; j < n; ++j) {
            scale[j] = cur.ks[j] * kE4m3Raw;
            scale[kGqaTokenBlock + j] = cur.vs[j] * kE4m3Raw;
        }
        int r0 = 0;
        PrefetchStream* pf = &ahead;
        for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
            vbmi_scores_rows<RBmax>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf, L);
        switch (it.rows - r0) {
            case 1:
                vbmi_scores_rows<1>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf, L);
                break;
            case 2:
                vbmi_scores_rows<2>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf, L);
                break;
            case 3:
                vbmi_scores_rows<3>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf, L);
                break;
            default:
                break;
        }
        gqa_softmax_block(it, t, n, s, corr);
        for (int r = 0; r < it.rows; ++r) {
            float* pr = s + r * kGqaTokenBlock;
            for (int j = 0; j < n; ++j) pr[j] *= scale[kGqaTokenBlock + j];
        }
        round_probabilities(s, it.rows, n, pb);
        if (t + n - 1 > min_limit)
            vbmi_pv_block_masked(it, t, n, cur.v, pb, s, corr, L);
        else
            vbmi_pv_block<false>(it, t, n, cur.v, pb, s, corr, &ahead, L);
        t += n;
        cur = next;
    }
    vbmi_unpermute(it);
}

// Contiguous pages, or gathered rows (sparse attention: k1_rows with a scale
// per listed token, see GqaItem) - the latter only where vbmi_fits.
GQLA_VBMI static void gqa_attend_fp8_vbmi(const GqaItem& it) {
    if (!vbmi_fits(it)) {
        gqa_attend_fp8_dot(it);
        return;
    }
    if (it.k1_rows != nullptr)
        vbmi_attend_blocks<Fp8ListBlock>(it);
    else
        vbmi_attend_blocks<Fp8RunBlock>(it);
}

// ---------------------------------------------------------------- absorb
// The absorb kernel of attention_fp8_dot.inl with its latent staged by the
// byte lookups: a block's rows widened to raw bf16 in natural order (vpermb
// first places each 128-bit lane's elements so that the interleave of
// e4m3x64_to_bf16 lands them in order), ~6 instructions per 64 elements
// against ~30 through f32. The staging was a sixth of the 8-bit absorb
// decode's arithmetic (MLA-16, T = 4096, 2 Zen 4 cores).

// Byte p of the permuted chunk: lane L = p / 16 holds elements 8L..8L+7 in
// its low half (they become the first bf16 vector) and 32+8L..32+8L+7 in
// its high half (the second).
// Built once, as the lookup tables are: the staging loads it per block.
struct NaturalOrderBytes {
    alignas(64) uint8_t idx[64];
};
static inline __m512i natural_order_bytes() {
    static const NaturalOrderBytes t = [] {
        NaturalOrderBytes x{};
        for (int p = 0; p < 64; ++p) {
            const int lane = p / 16, i = p % 16;
            x.idx[p] = static_cast<uint8_t>(i < 8 ? 8 * lane + i : 32 + 8 * lane + (i - 8));
        }
        return x;
    }();
    return _mm512_load_si512(t.idx);
}

[[gnu::noinline]] GQLA_VBMI static void stage_latent_raw_bf16_vbmi(const AbsorbItem& it, int n, const uint8_t* c,
                                                                   uint16_t* dst) {
    const int r = it.r;
    const E4m3Lut L = e4m3_lut();
    const __m512i order = natural_order_bytes();
    for (int j = 0; j < n; ++j) {
        const uint8_t* cj = c + static_cast<int64_t>(j) * r;
        uint16_t* out = dst + static_cast<int64_t>(j) * r;
        for (int k = 0; k < r; k += 64) {
            const int left = r - k;
            const __m512i bytes = _mm512_permutexvar_epi8(order, _mm512_maskz_loadu_epi8(mask64(left), cj + k));
            __m512i a, b;
            e4m3x64_to_bf16(bytes, L, a, b);
            if (left >= 64) {
                _mm512_storeu_si512(out + k, a);
                _mm512_storeu_si512(out + k + 32, b);
            } else {
                _mm512_mask_storeu_epi16(out + k, mask32(left), a);
                if (left > 32) _mm512_mask_storeu_epi16(out + k + 32, mask32(left - 32), b);
            }
        }
    }
}

GQLA_VBMI static void absorb_attend_fp8_vbmi(const AbsorbItem& it) {
    absorb_attend_fp8_staged<stage_latent_raw_bf16_vbmi>(it);
}

// SPDX-License-Identifier: Apache-2.0
// The narrow GQA-form kernel over an 8-bit (e4m3) cache with AVX512-BF16 dot
// products: the bf16-dot kernel of attention_bf16_dot.inl with e4m3 keys and
// values widened to bf16 in registers (exact: bf16 holds every e4m3 value),
// so each cache byte costs a few integer ops instead of an f32 conversion and
// the dot products do twice the work of f32 FMAs. Included inside namespace
// bf16dot of the AVX512-BF16 unit, after attention_bf16_dot.inl and
// attention_fp8.inl, whose helpers it reuses. Scales as in attention_fp8.inl:
// each token's key scale multiplies its score vectors before the rope-key
// part is added, each probability is multiplied by its value scale before it
// is rounded to bf16 (as the bf16 kernel rounds probabilities).

// 32 e4m3 bytes to bf16 bits of value / 256 (kE4m3Raw, like
// Simd::load_e4m3): normal codes by shifting the 7 magnitude bits into
// place and adding the exponent offset (127 - 7 - 8), the 8 subnormal codes
// from a table (vpermw on the low bits), the NaN code to a bf16 NaN, and the
// sign moved up.
static inline __m512i e4m3_to_bf16_raw(__m256i bytes) {
    const __m512i x = _mm512_cvtepu8_epi16(bytes);
    // Exponent E + 112 is E | 112 (E < 16): one ternary op, (x << 4 & 0x7f0) | 0x3800.
    __m512i r =
        _mm512_ternarylogic_epi32(_mm512_slli_epi16(x, 4), _mm512_set1_epi16(0x7f0), _mm512_set1_epi16(0x3800), 0xea);
    // bf16 of m * 2^-17 for m = 0..7, as pairs of 16-bit entries.
    const __m512i subnormals =
        _mm512_setr_epi32(0x37000000, 0x37c03780, 0x38203800, 0x38603840, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __mmask32 sub = _mm512_testn_epi16_mask(x, _mm512_set1_epi16(0x78));
    r = _mm512_mask_permutexvar_epi16(r, sub, x, subnormals);
    // The NaN code (magnitude 0x7f) is the only one giving 0x3ff0.
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(r, _mm512_set1_epi16(0x3ff0));
    r = _mm512_mask_mov_epi16(r, nan, _mm512_set1_epi16(0x7fc0));
    // r | (x << 8 & 0x8000): the sign.
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(x, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xf8);
}

static inline __m512i load_e4m3_bf16(const uint8_t* p, __mmask32 m) {
    return e4m3_to_bf16_raw(_mm256_maskz_loadu_epi8(m, p));
}

static inline __mmask32 mask32(int n) {
    return n >= 32 ? ~static_cast<__mmask32>(0) : static_cast<__mmask32>((1u << n) - 1);
}

// Whether a bf16 key vector holds an infinity: its products with a query's
// low part must then be skipped (0 * inf would turn the score into NaN where
// the high part's product gives +-inf), as an unsplit query's would be.
static inline bool has_inf_bf16(__m512i k) {
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(k, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7f80)) != 0;
}

// s[r][t] = qs * (ks[t] * (q[r] . k1[t]) + q[r] . k2[t]) for RB rows x NT
// tokens (k1 e4m3, k2 bf16 or none; q unscaled, qs the query scale). kSplit:
// q = qb + ql (high and low bf16 parts, round_queries), both multiplied
// (e4m3 keys hold no infinity; a k2 vector with one takes the high part
// alone).
template <int RB, int NT, bool kSplit>
static inline void fp8_dot_score_tile(const uint16_t* qb, const uint16_t* ql, int64_t qb_ld, float qs,
                                      const uint8_t* k1, int d1, const float* ks, const uint16_t* k2, int d2, float* s,
                                      int s_ld) {
    __m512 acc[RB * NT];
    GQLA_UNROLL
    for (int i = 0; i < RB * NT; ++i) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < d1; d += 32) {
        const __mmask32 m = mask32(d1 - d);
        __m512i kv[NT];
        GQLA_UNROLL
        for (int t = 0; t < NT; ++t) kv[t] = load_e4m3_bf16(k1 + static_cast<int64_t>(t) * d1 + d, m);
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) {
            const __m512i qv = _mm512_loadu_si512(qb + r * qb_ld + d);
            GQLA_UNROLL
            for (int t = 0; t < NT; ++t) acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qv), as_bh(kv[t]));
            if constexpr (kSplit) {
                const __m512i qlv = _mm512_loadu_si512(ql + r * qb_ld + d);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t)
                    acc[r * NT + t] = _mm512_dpbf16_ps(acc[r * NT + t], as_bh(qlv), as_bh(kv[t]));
            }
        }
    }
    GQLA_UNROLL
    for (int t = 0; t < NT; ++t) {
        const __m512 sc = _mm512_set1_ps(ks[t]);
        GQLA_UNROLL
        for (int r = 0; r < RB; ++r) acc[r * NT + t] = _mm512_mul_ps(acc[r * NT + t], sc);
    }
    const uint16_t* q2 = qb + (d1 + 31) / 32 * 32;
    const uint16_t* q2l = kSplit ? ql + (d1 + 31) / 32 * 32 : nullptr;
    for (int d = 0; d < d2; d += 32) {
        const __mmask32 m = mask32(d2 - d);
        __m512i kv[NT];
        [[maybe_unused]] bool inf[NT];
        GQLA_UNROLL
        for (int t = 0; t < NT; ++t) {
            kv[t] = _mm512_maskz_loadu_epi16(m, k2 + static_cast<int64_t>(t) * d2 + d);
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
    float sums[RB * NT];
    Simd::hsum_many(acc, RB * NT, sums);
    GQLA_UNROLL
    for (int r = 0; r < RB; ++r) GQLA_UNROLL
    for (int t = 0; t < NT; ++t) s[r * s_ld + t] = sums[r * NT + t] * qs;
}

template <int RB, bool kSplit>
static inline void fp8_dot_scores_split(const GqaItem& it, int r0, int n, const uint16_t* qb, const uint16_t* ql,
                                        int64_t qb_ld, const Fp8GqaBlock& b, const float* ks, float* s,
                                        PrefetchStream* pf) {
    constexpr int NT = kScoreTokens;
    const uint16_t* q = qb + r0 * qb_ld;
    const uint16_t* q_lo = kSplit ? ql + r0 * qb_ld : nullptr;
    const float qs = it.score_scale();
    float* srow = s + r0 * kGqaTokenBlock;
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step();
        fp8_dot_score_tile<RB, NT, kSplit>(q, q_lo, qb_ld, qs, b.k1 + static_cast<int64_t>(j) * it.d1, it.d1, ks + j,
                                           b.k2 ? b.k2 + static_cast<int64_t>(j) * it.d2 : nullptr, it.d2, srow + j,
                                           kGqaTokenBlock);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        fp8_dot_score_tile<RB, 1, kSplit>(q, q_lo, qb_ld, qs, b.k1 + static_cast<int64_t>(j) * it.d1, it.d1, ks + j,
                                          b.k2 ? b.k2 + static_cast<int64_t>(j) * it.d2 : nullptr, it.d2, srow + j,
                                          kGqaTokenBlock);
    }
}

// ql: the queries' low parts, or null (a bf16 query: exact as given).
template <int RB>
static inline void fp8_dot_scores_rows(const GqaItem& it, int r0, int n, const uint16_t* qb, const uint16_t* ql,
                                       int64_t qb_ld, const Fp8GqaBlock& b, const float* ks, float* s,
                                       PrefetchStream* pf) {
    if (ql)
        fp8_dot_scores_split<RB, true>(it, r0, n, qb, ql, qb_ld, b, ks, s, pf);
    else
        fp8_dot_scores_split<RB, false>(it, r0, n, qb, ql, qb_ld, b, ks, s, pf);
}

// pv_tile of attention_bf16_dot.inl over e4m3 values (pb: the scaled
// probabilities as bf16 pairs).
template <int RB, int NC, bool kMasked = false>
static inline void fp8_dot_pv_tile(const uint16_t* pb, int n, const uint8_t* v, int dv, int d, float* acc,
                                   const float* corr, PrefetchStream* pf, const int* visible = nullptr) {
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
    const __mmask32 all = ~static_cast<__mmask32>(0);
    for (int j = 0; j < n; j += 2) {
        if (pf) {
            pf->step();
            pf->step();
        }
        const uint8_t* v0 = v + static_cast<int64_t>(j) * dv + d;
        const bool pair = j + 1 < n;
        __m512i plo[NC], phi[NC];
        [[maybe_unused]] __m512i slo[NC], shi[NC];  // token j alone (kMasked)
        GQLA_UNROLL
        for (int c = 0; c < NC; ++c) {
            const __m512i a = load_e4m3_bf16(v0 + c * 32, all);
            const __m512i b = pair ? load_e4m3_bf16(v0 + dv + c * 32, all) : _mm512_setzero_si512();
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

// pv_rows of attention_bf16_dot.inl over e4m3 values; s holds the scaled
// probabilities in f32 for the dims past the last multiple of 32.
template <int RB, bool kMasked>
static inline void fp8_dot_pv_rows(const GqaItem& it, int r0, int64_t t, int n, const uint8_t* v, const uint16_t* pb,
                                   const float* s, const float* corr, PrefetchStream* pf) {
    constexpr int NC = kPvChunks;
    const int dv = it.dv;
    const int paired = dv / 32 * 32;
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
    for (; d + NC * 32 <= paired; d += NC * 32, pf = nullptr)
        fp8_dot_pv_tile<RB, NC, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    for (; d < paired; d += 32, pf = nullptr) fp8_dot_pv_tile<RB, 1, kMasked>(pr, n, v, dv, d, acc, cr, pf, visible);
    if (d == dv) return;
    const float* ps = s + r0 * kGqaTokenBlock;
    for (; d + Simd::W <= dv; d += Simd::W, pf = nullptr)
        gqa_pv_tile<GQLA_DTYPE_FP8_E4M3, RB, 1, kMasked>(ps, n, run_rows(v, dv), dv, d, acc, cr, pf, visible);
    for (; d < dv; ++d) GQLA_UNROLL
    for (int r = 0; r < RB; ++r) {
        float x = acc[static_cast<int64_t>(r) * dv + d] * cr[r];
        for (int j = 0; j < visible[r]; ++j)
            x += ps[r * kGqaTokenBlock + j] * e4m3_raw_scalar(v[static_cast<int64_t>(j) * dv + d]);
        acc[static_cast<int64_t>(r) * dv + d] = x;
    }
}

template <bool kMasked>
static inline void fp8_dot_pv_block(const GqaItem& it, int64_t t, int n, const uint8_t* v, const uint16_t* pb,
                                    const float* s, const float* corr, PrefetchStream* pf) {
    constexpr int RBmax = kRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
        fp8_dot_pv_rows<RBmax, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
    switch (it.rows - r0) {
        case 1:
            fp8_dot_pv_rows<1, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        case 2:
            fp8_dot_pv_rows<2, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        case 3:
            fp8_dot_pv_rows<3, kMasked>(it, r0, t, n, v, pb, s, corr, pf);
            break;
        default:
            break;
    }
}

[[gnu::noinline]] static void fp8_dot_pv_block_masked(const GqaItem& it, int64_t t, int n, const uint8_t* v,
                                                      const uint16_t* pb, const float* s, const float* corr) {
    fp8_dot_pv_block<true>(it, t, n, v, pb, s, corr, nullptr);
}

static void gqa_attend_fp8_dot(const GqaItem& it) {
    constexpr int RBmax = kRows;
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
    float* scale =
        it.scratch + gqa_scratch_fp8_offset(it.rows, it.d1 + it.d2) + round16(int64_t(it.rows) * kGqaTokenBlock);
    if (!round_queries(it, it.query_unscale(), qb, ql, qb_ld)) ql = nullptr;
    const int64_t min_limit = min_row_limit(it.row_limit, it.rows);

    Fp8GqaBlock cur = Fp8GqaBlock::at(it, it.t0, it.t1, kGqaTokenBlock);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const Fp8GqaBlock next = has_next ? Fp8GqaBlock::at(it, t + n, it.t1, kGqaTokenBlock) : cur;
        PrefetchStream ahead;
        prefetch_ahead(it, cur, has_next ? &next : nullptr, t == it.t0, n / kScoreTokens + n % kScoreTokens + n,
                       &ahead);
        for (int j = 0; j < n; ++j) {
            scale[j] = cur.ks[j] * kE4m3Raw;
            scale[kGqaTokenBlock + j] = cur.vs[j] * kE4m3Raw;
        }

        int r0 = 0;
        PrefetchStream* pf = &ahead;
        for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr)
            fp8_dot_scores_rows<RBmax>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf);
        switch (it.rows - r0) {
            case 1:
                fp8_dot_scores_rows<1>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf);
                break;
            case 2:
                fp8_dot_scores_rows<2>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf);
                break;
            case 3:
                fp8_dot_scores_rows<3>(it, r0, n, qb, ql, qb_ld, cur, scale, s, pf);
                break;
            default:
                break;
        }
        gqa_softmax_block(it, t, n, s, corr);
        // l holds the plain probabilities; the values take p * scale. The
        // softmax left zeros past n up to a multiple of 16 (paired below).
        for (int r = 0; r < it.rows; ++r) {
            float* pr = s + r * kGqaTokenBlock;
            for (int j = 0; j < n; ++j) pr[j] *= scale[kGqaTokenBlock + j];
        }
        round_probabilities(s, it.rows, n, pb);
        if (t + n - 1 > min_limit)
            fp8_dot_pv_block_masked(it, t, n, cur.v, pb, s, corr);
        else
            fp8_dot_pv_block<false>(it, t, n, cur.v, pb, s, corr, &ahead);
        t += n;
        cur = next;
    }
    unpair_accumulators(it);
}

// ---------------------------------------------------------------- absorb
// absorb_attend_bf16 over an 8-bit latent, as exact as over a bf16 one:
// each block's latent is staged as bf16 without its scales (an e4m3 value
// is a bf16 value, here / 256 as the raw widening gives it), the scores sum
// per scale block (128 latent dims) and each block's sum is multiplied by
// its token's scale in f32, and the value products run block by block with
// the probabilities times that block's scales (rounded to bf16, as the bf16
// kernel rounds its probabilities). q~ is split into high and low bf16
// parts as over bf16 latents. (Staging e4m3 x scale rounded to bf16, as
// before 2026-12-06, put a 2^-9 error into every latent element the
// reference does not have; with q~ rounded once too, sharp softmaxes and
// cancelling value projections took outputs past the bf16 bound: API-
// sequence fuzzer seeds 104, 111, 123.) The masked diagonal block widens
// the e4m3 rows to f32 instead.

static inline uint16_t bf16_bits_nearest(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The block's n latent rows as bf16 raw values (e4m3 / 256: exact).
static inline void stage_latent_raw_bf16(const AbsorbItem& it, int n, const uint8_t* c, uint16_t* dst) {
    const int r = it.r;
    for (int j = 0; j < n; ++j) {
        const uint8_t* cj = c + static_cast<int64_t>(j) * r;
        uint16_t* out = dst + static_cast<int64_t>(j) * r;
        int k = 0;
        for (; k + 16 <= r; k += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                                (__m256i)_mm512_cvtneps_pbh(Simd::load_e4m3(cj + k)));
        for (; k < r; ++k) out[k] = bf16_bits_nearest(e4m3_raw_scalar(cj[k]));
    }
}

// st[j][rows] (+)= sum over the scale blocks b of sc[j][b] * 256 * (raw
// latent block b of token j) . (q pairs) + kr[j] . (q rope pairs), for JT
// tokens x NV row vectors.
template <int JT, int NV>
static inline void fp8_latent_score_tile(const AbsorbItem& it, const uint16_t* c, const uint16_t* kr, const float* sc,
                                         const uint32_t* qp, float* st, bool accumulate) {
    const int r = it.r, R = it.rows_pad, blocks = it.c_scale_blocks;
    for (int b = 0; b < blocks; ++b) {
        const int k0 = b * kFp8LatentBlockElems, pairs = (imin(r, k0 + kFp8LatentBlockElems) - k0) / 2;
        __m512 acc[JT * NV];
        GQLA_UNROLL
        for (int i = 0; i < JT * NV; ++i) acc[i] = _mm512_setzero_ps();
        for (int kp = 0; kp < pairs; ++kp) {
            __m512i qv[NV];
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_si512(qp + (k0 / 2 + kp) * R + v * 16);
            GQLA_UNROLL
            for (int j = 0; j < JT; ++j) {
                uint32_t c2;
                __builtin_memcpy(&c2, c + static_cast<int64_t>(j) * r + k0 + 2 * kp, 4);
                const __m512i cb = _mm512_set1_epi32(static_cast<int>(c2));
                GQLA_UNROLL
                for (int v = 0; v < NV; ++v)
                    acc[j * NV + v] = _mm512_dpbf16_ps(acc[j * NV + v], as_bh(cb), as_bh(qv[v]));
            }
        }
        GQLA_UNROLL
        for (int j = 0; j < JT; ++j) {
            const __m512 scale = _mm512_set1_ps(sc[j * blocks + b] * kE4m3Raw);
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) {
                float* out = st + j * R + v * 16;
                const __m512 prev = (b == 0 && !accumulate) ? _mm512_setzero_ps() : _mm512_loadu_ps(out);
                _mm512_storeu_ps(out, _mm512_fmadd_ps(acc[j * NV + v], scale, prev));
            }
        }
    }
    if (it.d_r > 0) absorb_score_tile_bf16<JT, NV>(kr, it.d_r, it.d_r / 2, qp + (r / 2) * R, R, st, true);
}

// The high parts' scores, plus the low parts' where ql is given and the
// high parts' score is finite (split_score_tile_bf16's rule).
template <int JT, int NV>
static inline void fp8_split_score_tile(const AbsorbItem& it, const uint16_t* c, const uint16_t* kr, const float* sc,
                                        const uint32_t* qp, const uint32_t* ql, float* st) {
    const int R = it.rows_pad;
    fp8_latent_score_tile<JT, NV>(it, c, kr, sc, qp, st, false);
    if (ql == nullptr) return;
    alignas(64) float hi[JT * NV * 16];
    for (int j = 0; j < JT; ++j)
        for (int v = 0; v < NV; ++v) _mm512_store_ps(hi + (j * NV + v) * 16, _mm512_loadu_ps(st + j * R + v * 16));
    fp8_latent_score_tile<JT, NV>(it, c, kr, sc, ql, st, true);
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (int j = 0; j < JT; ++j)
        for (int v = 0; v < NV; ++v) {
            const __m512 h = _mm512_load_ps(hi + (j * NV + v) * 16);
            const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(h), inf, _CMP_LT_OQ);
            float* out = st + j * R + v * 16;
            _mm512_storeu_ps(out, _mm512_mask_blend_ps(finite, h, _mm512_loadu_ps(out)));
        }
}

// Scores of the block's n tokens for the NV row vectors at column col.
template <int NV>
static inline void fp8_scores_cols(const AbsorbItem& it, int n, const uint16_t* c, const uint16_t* kr, const float* sc,
                                   const uint32_t* qp, const uint32_t* ql, int col, PrefetchStream* pf) {
    constexpr int JT = kAbsorbTokens;
    const int R = it.rows_pad, blocks = it.c_scale_blocks;
    const uint32_t* q_lo = ql ? ql + col : nullptr;
    float* st = it.stile + col;
    int j = 0;
    for (; j + JT <= n; j += JT) {
        if (pf) pf->step();
        fp8_split_score_tile<JT, NV>(it, c + static_cast<int64_t>(j) * it.r, kr + static_cast<int64_t>(j) * it.d_r,
                                     sc + j * blocks, qp + col, q_lo, st + j * R);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        fp8_split_score_tile<1, NV>(it, c + static_cast<int64_t>(j) * it.r, kr + static_cast<int64_t>(j) * it.d_r,
                                    sc + j * blocks, qp + col, q_lo, st + j * R);
    }
}

// Stage: how a block's latent rows become raw bf16 (stage_latent_raw_bf16,
// or the byte-lookup form of attention_fp8_vbmi.inl).
using StageLatentFn = void (*)(const AbsorbItem& it, int n, const uint8_t* c, uint16_t* dst);

template <StageLatentFn Stage>
static void absorb_attend_fp8_staged(const AbsorbItem& it) {
    if ((it.r | it.d_r) & 1 || it.stage == nullptr) {  // pairs need even segments
        absorb_attend_fp8(it);
        return;
    }
    const int K = it.r + it.d_r, R = it.rows_pad;
    for (int i = 0; i < R; ++i) {
        it.m[i] = kMaxFloor;
        it.l[i] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.r) * R; ++i) it.acc[i] = 0.0f;
    float* corr = it.stile + kAbsorbTokenBlock * R;
    const int64_t min_limit = min_row_limit(it.row_limit, R);
    uint32_t* qp = it.pairs;
    uint32_t* cp = qp + round16(int64_t(K / 2) * R);
    uint32_t* pp = cp + round16(int64_t(kAbsorbTokenBlock / 2) * it.r);
    uint32_t* ql = pp + round16(int64_t(kAbsorbTokenBlock / 2) * R);
    if (!absorb_pair_queries(it, qp, ql)) ql = nullptr;
    float weight[kAbsorbTokenBlock];  // one scale block's token scales x 256

    struct Rows {
        const uint8_t* c;
        const uint16_t* kr;
        const float* sc;
    };
    auto rows_at = [&](int64_t t) {
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        return Rows{static_cast<const uint8_t*>(it.c) + page * it.c_page_stride + slot * it.r,
                    static_cast<const uint16_t*>(it.kr) + page * it.kr_page_stride + slot * it.d_r,
                    it.c_scale + page * it.c_scale_page_stride + slot * it.c_scale_blocks};
    };
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = block_tokens(t, it.t1, it.page_size, kAbsorbTokenBlock);
        const Rows cur = rows_at(t);
        PrefetchStream ahead;
        if (t + n < it.t1) {
            const int next_n = block_tokens(t + n, it.t1, it.page_size, kAbsorbTokenBlock);
            const Rows nx = rows_at(t + n);
            ahead.add(nx.c, int64_t(next_n) * it.r);
            ahead.add(nx.kr, int64_t(next_n) * it.d_r * 2);
            ahead.add(nx.sc, int64_t(next_n) * it.c_scale_blocks * 4);
        }
        ahead.plan(n / kAbsorbTokens + n % kAbsorbTokens);
        Stage(it, n, cur.c, it.stage);
        const uint16_t* c = it.stage;
        PrefetchStream* pf = &ahead;
        int col = 0;
        for (; col + 32 <= R; col += 32, pf = nullptr) fp8_scores_cols<2>(it, n, c, cur.kr, cur.sc, qp, ql, col, pf);
        for (; col < R; col += 16, pf = nullptr) fp8_scores_cols<1>(it, n, c, cur.kr, cur.sc, qp, ql, col, pf);
        absorb_softmax_block(it, t, n, min_limit, corr);
        if (t + n - 1 > min_limit) {
            // The causal diagonal, lane by lane through the f32 tile.
            for (int j = 0; j < n; ++j)
                fp8_rows_to_f32(cur.c + int64_t(j) * it.r, it.r, cur.sc + int64_t(j) * it.c_scale_blocks,
                                kFp8LatentBlockElems, it.ctile + j * K);
            absorb_pv_block_masked(it, t, n, K, corr);
            t += n;
            continue;
        }
        absorb_pair_latent(it, n, c, cp);
        const int npairs = (n + 1) / 2;
        for (int b = 0; b < it.c_scale_blocks; ++b) {
            for (int j = 0; j < n; ++j) weight[j] = cur.sc[int64_t(j) * it.c_scale_blocks + b] * kE4m3Raw;
            absorb_pair_probabilities(it, n, weight, pp);
            const int k0 = b * kFp8LatentBlockElems, k1 = imin(it.r, k0 + kFp8LatentBlockElems);
            col = 0;
            for (; col + 32 <= R; col += 32) absorb_pv_cols_bf16<2>(it, npairs, cp, pp, col, corr, k0, k1);
            for (; col < R; col += 16) absorb_pv_cols_bf16<1>(it, npairs, cp, pp, col, corr, k0, k1);
        }
        t += n;
    }
}

static void absorb_attend_fp8_dot(const AbsorbItem& it) { absorb_attend_fp8_staged<stage_latent_raw_bf16>(it); }

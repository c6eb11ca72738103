// SPDX-License-Identifier: Apache-2.0
// The absorb form over a bf16 cache with AVX512-BF16 dot products. Included
// by attention_bf16_dot.inl inside its namespace (its tile constants and
// helpers are in scope).

// ---------------------------------------------------------------- absorb
// Rows (heads x query tokens) sit in lanes as in absorb_attend. Scores pair
// the key dim: q pairs (q[k], q[k+1]) per row, built once per item as high
// and low bf16 parts (two dot products per pair), against
// (c[j][k], c[j][k+1]) broadcast straight from the cache. Values pair the
// tokens: (c[j][k], c[j+1][k]) from a per-block interleave of two latent
// rows against (p[j], p[j+1]) per row. The latent is never widened to f32.

constexpr int kAbsorbTokens = 8;  // score tile: 8 tokens x 2 row vectors
constexpr int kAbsorbDims = 8;    // value tile: 8 latent dims x 2 row vectors

// 16 lanes of (lo[i], hi[i]) bf16 pairs from two f32 vectors.
static inline __m512i pair_rows(__m512 lo, __m512 hi) {
    const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's 16 values, then hi's
    const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(order, both);
}

// qp[kp][rows] = (qt[2kp][rows], qt[2kp + 1][rows]); the c and kr segments
// are paired separately (both even-sized). With ql, the pairs of the low
// parts (query_low_part) go there, as round_queries splits GQA queries:
// q~ = q_c W_UK is an f32 product, and rounding it to bf16 alone put score
// errors of 2^-9 |s| into every score, enough with sharp softmaxes to take
// outputs past the bf16 error bound (API-sequence fuzzer). Returns whether
// some low part is kept.
static inline bool absorb_pair_queries(const AbsorbItem& it, uint32_t* qp, uint32_t* ql) {
    const int K = it.r + it.d_r, R = it.rows_pad;
    __mmask16 any_lo = 0;
    for (int kp = 0; kp < K / 2; ++kp)
        for (int i = 0; i < R; i += 16) {
            const __m512 a = _mm512_loadu_ps(it.qt + (2 * kp) * it.qt_ld + i);
            const __m512 b = _mm512_loadu_ps(it.qt + (2 * kp + 1) * it.qt_ld + i);
            _mm512_storeu_si512(qp + kp * R + i, pair_rows(a, b));
            if (ql == nullptr) continue;
            __mmask16 kept_a, kept_b;
            const __m512 a_lo = query_low_part(a, &kept_a), b_lo = query_low_part(b, &kept_b);
            any_lo |= kept_a | kept_b;
            _mm512_storeu_si512(ql + kp * R + i, pair_rows(a_lo, b_lo));
        }
    return any_lo != 0;
}

// st[j][rows] = sum over key pairs of (c[j] pair) . (q pair) for JT tokens x
// NV row vectors; `key` rows are `kw` bf16 apart, `pairs` pairs long.
template <int JT, int NV>
static inline void absorb_score_tile_bf16(const uint16_t* key, int kw, int pairs, const uint32_t* qp, int R, float* st,
                                          bool accumulate) {
    __m512 acc[JT * NV];
    GQLA_UNROLL
    for (int j = 0; j < JT; ++j) GQLA_UNROLL
    for (int v = 0; v < NV; ++v)
        acc[j * NV + v] = accumulate ? _mm512_loadu_ps(st + j * R + v * 16) : _mm512_setzero_ps();
    for (int kp = 0; kp < pairs; ++kp) {
        __m512i qv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_si512(qp + kp * R + v * 16);
        GQLA_UNROLL
        for (int j = 0; j < JT; ++j) {
            uint32_t c2;
            __builtin_memcpy(&c2, key + static_cast<int64_t>(j) * kw + 2 * kp, 4);
            const __m512i cb = _mm512_set1_epi32(static_cast<int>(c2));
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) acc[j * NV + v] = _mm512_dpbf16_ps(acc[j * NV + v], as_bh(cb), as_bh(qv[v]));
        }
    }
    GQLA_UNROLL
    for (int j = 0; j < JT; ++j) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(st + j * R + v * 16, acc[j * NV + v]);
}

// Scores of JT tokens x NV row vectors over two key segments (k1: d1 dims,
// k2: d2, both even; k2's query pairs follow k1's in qp and ql): the high
// parts' products, plus the low parts' when ql is given, except where the
// high parts' score is not finite (an inf key): the low parts would turn
// +-inf into NaN there (a zero low part, or one of the other sign), so those
// stay as the high parts give them, as an unsplit query's would.
template <int JT, int NV>
static inline void split_score_tile_bf16(const uint16_t* k1, int d1, const uint16_t* k2, int d2, int R,
                                         const uint32_t* qp, const uint32_t* ql, float* st) {
    const int p1 = d1 / 2, p2 = d2 / 2;
    absorb_score_tile_bf16<JT, NV>(k1, d1, p1, qp, R, st, false);
    if (p2) absorb_score_tile_bf16<JT, NV>(k2, d2, p2, qp + p1 * R, R, st, true);
    if (ql == nullptr) return;
    alignas(64) float hi[JT * NV * 16];
    for (int j = 0; j < JT; ++j)
        for (int v = 0; v < NV; ++v) _mm512_store_ps(hi + (j * NV + v) * 16, _mm512_loadu_ps(st + j * R + v * 16));
    absorb_score_tile_bf16<JT, NV>(k1, d1, p1, ql, R, st, true);
    if (p2) absorb_score_tile_bf16<JT, NV>(k2, d2, p2, ql + p1 * R, R, st, true);
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    for (int j = 0; j < JT; ++j)
        for (int v = 0; v < NV; ++v) {
            const __m512 h = _mm512_load_ps(hi + (j * NV + v) * 16);
            // |h| < inf is false for +-inf and NaN.
            const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(h), inf, _CMP_LT_OQ);
            float* out = st + j * R + v * 16;
            _mm512_storeu_ps(out, _mm512_mask_blend_ps(finite, h, _mm512_loadu_ps(out)));
        }
}

// Scores of the block's n tokens for the NV row vectors at column col (ql:
// the low parts' pairs, or null).
template <int NV>
static inline void absorb_scores_cols_bf16(const AbsorbItem& it, int n, const uint16_t* c, const uint16_t* kr,
                                           const uint32_t* qp, const uint32_t* ql, int col, PrefetchStream* pf) {
    constexpr int JT = kAbsorbTokens;
    const int R = it.rows_pad;
    const uint32_t* q_lo = ql ? ql + col : nullptr;
    float* st = it.stile + col;
    int j = 0;
    for (; j + JT <= n; j += JT) {
        if (pf) pf->step();
        split_score_tile_bf16<JT, NV>(c + static_cast<int64_t>(j) * it.r, it.r, kr + static_cast<int64_t>(j) * it.d_r,
                                      it.d_r, R, qp + col, q_lo, st + j * R);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        split_score_tile_bf16<1, NV>(c + static_cast<int64_t>(j) * it.r, it.r, kr + static_cast<int64_t>(j) * it.d_r,
                                     it.d_r, R, qp + col, q_lo, st + j * R);
    }
}

// cp[jp][k] = (c[2jp][k], c[2jp + 1][k]) in natural k order (an odd last
// token pairs with 0).
static inline void absorb_pair_latent(const AbsorbItem& it, int n, const uint16_t* c, uint32_t* cp) {
    const int r = it.r;
    const __m512i i0 = pair_order_first(), i1 = pair_order_second();  // back to natural k order
    for (int jp = 0; jp < (n + 1) / 2; ++jp) {
        const uint16_t* a = c + static_cast<int64_t>(2 * jp) * r;
        const bool pair = 2 * jp + 1 < n;
        int k = 0;
        for (; k + 32 <= r; k += 32) {
            const __m512i va = _mm512_loadu_si512(a + k);
            const __m512i vb = pair ? _mm512_loadu_si512(a + r + k) : _mm512_setzero_si512();
            const __m512i lo = _mm512_unpacklo_epi16(va, vb), hi = _mm512_unpackhi_epi16(va, vb);
            _mm512_storeu_si512(cp + jp * r + k, _mm512_permutex2var_epi32(lo, i0, hi));
            _mm512_storeu_si512(cp + jp * r + k + 16, _mm512_permutex2var_epi32(lo, i1, hi));
        }
        for (; k < r; ++k) cp[jp * r + k] = a[k] | (pair ? static_cast<uint32_t>(a[r + k]) << 16 : 0u);
    }
}

// pp[jp][rows] = (p[2jp][rows] * w[2jp], p[2jp + 1][rows] * w[2jp + 1]) of
// the probabilities in stile; w null: unweighted (8-bit latents weigh each
// token by a block's scale).
static inline void absorb_pair_probabilities(const AbsorbItem& it, int n, const float* w, uint32_t* pp) {
    const int R = it.rows_pad;
    for (int jp = 0; jp < (n + 1) / 2; ++jp) {
        const bool pair = 2 * jp + 1 < n;
        const __m512 w0 = _mm512_set1_ps(w ? w[2 * jp] : 1.0f), w1 = _mm512_set1_ps(w && pair ? w[2 * jp + 1] : 1.0f);
        for (int i = 0; i < R; i += 16) {
            const __m512 p0 = _mm512_mul_ps(_mm512_loadu_ps(it.stile + (2 * jp) * R + i), w0);
            const __m512 p1 =
                pair ? _mm512_mul_ps(_mm512_loadu_ps(it.stile + (2 * jp + 1) * R + i), w1) : _mm512_setzero_ps();
            _mm512_storeu_si512(pp + jp * R + i, pair_rows(p0, p1));
        }
    }
}

static inline void absorb_pair_block(const AbsorbItem& it, int n, const uint16_t* c, uint32_t* cp, uint32_t* pp) {
    absorb_pair_latent(it, n, c, cp);
    absorb_pair_probabilities(it, n, nullptr, pp);
}

// acc[k][rows] = acc * corr + sum over token pairs of (c pair) . (p pair)
// for KB latent dims x NV row vectors.
template <int KB, int NV>
static inline void absorb_pv_tile_bf16(const uint32_t* cp, int r, int npairs, const uint32_t* pp, int R, float* acc,
                                       const float* corr) {
    __m512 a[KB * NV];
    GQLA_UNROLL
    for (int v = 0; v < NV; ++v) {
        const __m512 cr = _mm512_loadu_ps(corr + v * 16);
        GQLA_UNROLL
        for (int k = 0; k < KB; ++k) a[k * NV + v] = _mm512_mul_ps(_mm512_loadu_ps(acc + k * R + v * 16), cr);
    }
    for (int jp = 0; jp < npairs; ++jp) {
        __m512i pv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) pv[v] = _mm512_loadu_si512(pp + jp * R + v * 16);
        GQLA_UNROLL
        for (int k = 0; k < KB; ++k) {
            const __m512i cb = _mm512_set1_epi32(static_cast<int>(cp[jp * r + k]));
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) a[k * NV + v] = _mm512_dpbf16_ps(a[k * NV + v], as_bh(cb), as_bh(pv[v]));
        }
    }
    GQLA_UNROLL
    for (int k = 0; k < KB; ++k) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(acc + k * R + v * 16, a[k * NV + v]);
}

// Latent dims [k0, k1) of the value products (the whole latent for 16-bit
// caches; one scale block at a time for 8-bit latents).
template <int NV>
static inline void absorb_pv_cols_bf16(const AbsorbItem& it, int npairs, const uint32_t* cp, const uint32_t* pp,
                                       int col, const float* corr, int k0, int k1) {
    constexpr int KB = kAbsorbDims;
    const int R = it.rows_pad;
    int k = k0;
    for (; k + KB <= k1; k += KB)
        absorb_pv_tile_bf16<KB, NV>(cp + k, it.r, npairs, pp + col, R, it.acc + k * int64_t(R) + col, corr + col);
    for (; k < k1; ++k)
        absorb_pv_tile_bf16<1, NV>(cp + k, it.r, npairs, pp + col, R, it.acc + k * int64_t(R) + col, corr + col);
}

// The block's latent rows widened to f32 into ctile (row stride r + d_r, as
// absorb_attend lays them out), for the masked value pass.
static inline void absorb_widen_latent(const AbsorbItem& it, int n, const uint16_t* c) {
    const int K = it.r + it.d_r;
    for (int j = 0; j < n; ++j) {
        float* dst = it.ctile + j * K;
        const uint16_t* cj = c + static_cast<int64_t>(j) * it.r;
        int k = 0;
        for (; k + 16 <= it.r; k += 16) Simd::store(dst + k, Elem<GQLA_DTYPE_BF16>::load(cj + k));
        for (; k < it.r; ++k) dst[k] = Elem<GQLA_DTYPE_BF16>::scalar(cj + k);
    }
}

static void absorb_attend_bf16(const AbsorbItem& it) {
    if ((it.r | it.d_r) & 1) {  // pairs need even segments
        absorb_attend<GQLA_DTYPE_BF16>(it);
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

    // Latent and rope rows of the block of `n` tokens at position t.
    auto rows_at = [&](int64_t t, const uint16_t** c, const uint16_t** kr) {
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        *c = static_cast<const uint16_t*>(it.c) + page * it.c_page_stride + slot * it.r;
        *kr = static_cast<const uint16_t*>(it.kr) + page * it.kr_page_stride + slot * it.d_r;
    };
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = block_tokens(t, it.t1, it.page_size, kAbsorbTokenBlock);
        const uint16_t *c, *kr;
        rows_at(t, &c, &kr);
        // The next block's rows are fetched while this one is scored.
        PrefetchStream ahead;
        if (t + n < it.t1) {
            const int next_n = block_tokens(t + n, it.t1, it.page_size, kAbsorbTokenBlock);
            const uint16_t *nc, *nkr;
            rows_at(t + n, &nc, &nkr);
            ahead.add(nc, int64_t(next_n) * it.r * 2);
            ahead.add(nkr, int64_t(next_n) * it.d_r * 2);
        }
        ahead.plan(n / kAbsorbTokens + n % kAbsorbTokens);
        PrefetchStream* pf = &ahead;
        int col = 0;
        for (; col + 32 <= R; col += 32, pf = nullptr) absorb_scores_cols_bf16<2>(it, n, c, kr, qp, ql, col, pf);
        for (; col < R; col += 16, pf = nullptr) absorb_scores_cols_bf16<1>(it, n, c, kr, qp, ql, col, pf);
        absorb_softmax_block(it, t, n, min_limit, corr);
        if (t + n - 1 > min_limit) {
            // The causal diagonal: token pairs would put a token some lanes
            // may not see next to one they see, so this block's values go
            // through the f32 tile, masked lane by lane.
            absorb_widen_latent(it, n, c);
            absorb_pv_block_masked(it, t, n, K, corr);
            t += n;
            continue;
        }
        absorb_pair_block(it, n, c, cp, pp);
        const int npairs = (n + 1) / 2;
        col = 0;
        for (; col + 32 <= R; col += 32) absorb_pv_cols_bf16<2>(it, npairs, cp, pp, col, corr, 0, it.r);
        for (; col < R; col += 16) absorb_pv_cols_bf16<1>(it, npairs, cp, pp, col, corr, 0, it.r);
        t += n;
    }
}

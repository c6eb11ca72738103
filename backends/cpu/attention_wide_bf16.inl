// SPDX-License-Identifier: Apache-2.0
// The wide GQA-form kernel (attention_wide.inl) with AVX512-BF16 dot
// products over a bf16 cache, built from the absorb form's bf16 tiles:
//   scores: the rows' queries as bf16 pairs over the key dim [K/2][rows],
//           built once per item, against (k[j][d], k[j][d+1]) pairs
//           broadcast straight from the cache (absorb_score_tile_bf16);
//   values: (v[j][d], v[j+1][d]) pairs interleaved once per block against
//           the rows' (p[j], p[j+1]) pairs (absorb_pv_tile_bf16).
// The causal diagonal's blocks (some lane may not see some token) take the
// f32 masked value tile instead, so a token a row may not see never meets
// its accumulator. Odd key segments fall back to the f32 kernel. Included
// after attention_bf16_dot.inl and attention_wide.inl, inside bf16dot.

// qp[kp][rows]: bf16 pairs of each row's query over its key dims; the k1 and
// k2 segments (both even) pair separately, k2's pairs following k1's. As in
// round_queries: the queries unscaled, high parts in qp and their low parts
// (query_low_part) in ql; returns whether any low part is kept.
static inline bool wide_pair_queries(const GqaItem& it, int R, uint32_t* qp, uint32_t* ql) {
    const int K = it.d1 + it.d2;
    const float unscale = it.query_unscale();
    alignas(64) float even[16], odd[16];
    __mmask16 any_lo = 0;
    for (int kp = 0; kp < K / 2; ++kp)
        for (int i0 = 0; i0 < R; i0 += 16) {
            for (int i = 0; i < 16; ++i) {
                const int row = i0 + i;
                const float* q = it.q + int64_t(row < it.rows ? row : 0) * it.q_ld + 2 * kp;
                even[i] = row < it.rows ? q[0] * unscale : 0.0f;
                odd[i] = row < it.rows ? q[1] * unscale : 0.0f;
            }
            const __m512 e = _mm512_load_ps(even), o = _mm512_load_ps(odd);
            __mmask16 kept_e, kept_o;
            const __m512 e_lo = query_low_part(e, &kept_e), o_lo = query_low_part(o, &kept_o);
            any_lo |= kept_e | kept_o;
            _mm512_storeu_si512(qp + kp * R + i0, pair_rows(e, o));
            _mm512_storeu_si512(ql + kp * R + i0, pair_rows(e_lo, o_lo));
        }
    return any_lo != 0;
}

// Scores of the block's n tokens for the NV row vectors at column col (ql:
// the queries' low parts, or null).
template <int NV>
static inline void wide_scores_cols_bf16(const GqaItem& it, int R, int n, const uint16_t* k1, const uint16_t* k2,
                                         const uint32_t* qp, const uint32_t* ql, float* st, PrefetchStream* pf) {
    constexpr int JT = kAbsorbTokens;
    int j = 0;
    for (; j + JT <= n; j += JT) {
        if (pf) pf->step();
        split_score_tile_bf16<JT, NV>(k1 + int64_t(j) * it.d1, it.d1, k2 ? k2 + int64_t(j) * it.d2 : nullptr, it.d2, R,
                                      qp, ql, st + j * R);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        split_score_tile_bf16<1, NV>(k1 + int64_t(j) * it.d1, it.d1, k2 ? k2 + int64_t(j) * it.d2 : nullptr, it.d2, R,
                                     qp, ql, st + j * R);
    }
}

// vp[jp][k] = (v[2jp][k], v[2jp + 1][k]) in natural k order (an odd last
// token pairs with 0); pp[jp][rows] = (p[2jp][rows], p[2jp + 1][rows]).
static inline void wide_pair_block(const uint16_t* v, int dv, int n, const float* st, int R, uint32_t* vp,
                                   uint32_t* pp) {
    const __m512i i0 = pair_order_first(), i1 = pair_order_second();
    for (int jp = 0; jp < (n + 1) / 2; ++jp) {
        const uint16_t* a = v + int64_t(2 * jp) * dv;
        const bool pair = 2 * jp + 1 < n;
        int k = 0;
        for (; k + 32 <= dv; k += 32) {
            const __m512i va = _mm512_loadu_si512(a + k);
            const __m512i vb = pair ? _mm512_loadu_si512(a + dv + k) : _mm512_setzero_si512();
            const __m512i lo = _mm512_unpacklo_epi16(va, vb), hi = _mm512_unpackhi_epi16(va, vb);
            _mm512_storeu_si512(vp + jp * dv + k, _mm512_permutex2var_epi32(lo, i0, hi));
            _mm512_storeu_si512(vp + jp * dv + k + 16, _mm512_permutex2var_epi32(lo, i1, hi));
        }
        for (; k < dv; ++k) vp[jp * dv + k] = a[k] | (pair ? static_cast<uint32_t>(a[dv + k]) << 16 : 0u);
        for (int i = 0; i < R; i += 16) {
            const __m512 p0 = _mm512_loadu_ps(st + (2 * jp) * R + i);
            const __m512 p1 = pair ? _mm512_loadu_ps(st + (2 * jp + 1) * R + i) : _mm512_setzero_ps();
            _mm512_storeu_si512(pp + jp * R + i, pair_rows(p0, p1));
        }
    }
}

template <int NV>
static inline void wide_pv_cols_bf16(const uint32_t* vp, int dv, int npairs, const uint32_t* pp, int R, float* acc,
                                     const float* corr) {
    constexpr int KB = kAbsorbDims;
    int k = 0;
    for (; k + KB <= dv; k += KB) absorb_pv_tile_bf16<KB, NV>(vp + k, dv, npairs, pp, R, acc + int64_t(k) * R, corr);
    for (; k < dv; ++k) absorb_pv_tile_bf16<1, NV>(vp + k, dv, npairs, pp, R, acc + int64_t(k) * R, corr);
}

static void gqa_attend_wide_bf16(const GqaItem& it) {
    if ((it.d1 | it.d2) & 1) {  // pairs need even segments
        gqa_attend_wide<GQLA_DTYPE_BF16>(it);
        return;
    }
    const int dv = it.dv;
    const int R = wide_rows_pad(it.rows);
    const WideScratch w = wide_scratch(it);
    const int64_t min_limit = wide_start(it, R, w);
    uint32_t* qp = reinterpret_cast<uint32_t*>(w.qt);
    uint32_t* qp_lo = qp + (it.d1 + it.d2) / 2 * R;  // w.qt holds (K + 2) x R floats
    uint32_t* vp = w.pairs;
    uint32_t* pp = w.pairs + kWideTokenBlock / 2 * dv;
    const uint32_t* ql = wide_pair_queries(it, R, qp, qp_lo) ? qp_lo : nullptr;
    const __m512 scale = _mm512_set1_ps(it.score_scale());
    const int64_t t1 = lmin(it.t1, max_lane_limit(w.limit, R) + 1);
    for (int64_t t = it.t0; t < t1;) {
        const WideBlock<GQLA_DTYPE_BF16> b = WideBlock<GQLA_DTYPE_BF16>::at(it, t, t1);
        const int n = b.n;
        PrefetchStream ahead;
        WideBlock<GQLA_DTYPE_BF16>::prefetch_next(it, t + n, t1, n / kAbsorbTokens + n % kAbsorbTokens, ahead);
        PrefetchStream* pf = &ahead;
        int col = 0;
        for (; col + 32 <= R; col += 32, pf = nullptr)
            wide_scores_cols_bf16<2>(it, R, n, b.k1, b.k2, qp + col, ql ? ql + col : nullptr, w.st + col, pf);
        for (; col < R; col += 16, pf = nullptr)
            wide_scores_cols_bf16<1>(it, R, n, b.k1, b.k2, qp + col, ql ? ql + col : nullptr, w.st + col, pf);
        for (int64_t i = 0; i < int64_t(n) * R; i += 16)  // the scale the queries' rounding left out
            _mm512_storeu_ps(w.st + i, _mm512_mul_ps(_mm512_loadu_ps(w.st + i), scale));
        wide_softmax_block(w.st, R, t, n, w.limit, min_limit, w.m, w.l, w.corr);
        if (t + n - 1 > min_limit) {
            widen_rows<GQLA_DTYPE_BF16>(b.v, n, dv, w.vtile, dv);
            wide_pv_block_masked(w, R, dv, t, n);
        } else {
            wide_pair_block(b.v, dv, n, w.st, R, vp, pp);
            const int npairs = (n + 1) / 2;
            col = 0;
            for (; col + 32 <= R; col += 32)
                wide_pv_cols_bf16<2>(vp, dv, npairs, pp + col, R, w.acc + col, w.corr + col);
            for (; col < R; col += 16) wide_pv_cols_bf16<1>(vp, dv, npairs, pp + col, R, w.acc + col, w.corr + col);
        }
        t += n;
    }
    wide_finish(it, R, w);
}

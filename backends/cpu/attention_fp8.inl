// SPDX-License-Identifier: Apache-2.0
// Kernels over an 8-bit (e4m3) cache, layout in docs/fp8-cache.md: keys and
// values carry one f32 scale per token (GQA form: per token and KV group;
// latent: per token and kFp8LatentBlock elements), and the rope key kr stays
// bf16. Included by attention_kernels.inl into every ISA unit, after the
// f32/f16/bf16 kernels, whose tiles these reuse:
//   GQA form, narrow  the score tiles run on the unscaled e4m3 keys and each
//                     token's score is then multiplied by its key scale
//                     (plus the bf16 rope-key scores, a second pass); the
//                     probabilities are multiplied by the value scales
//                     before the value tiles, which read e4m3 directly;
//   GQA form, wide    the block's keys and values are widened to f32 with
//                     their scales into the tiles the wide kernel stages;
//   absorb            the latent tile is widened with its block scales, as
//                     the other dtypes' latent tiles are;
// so every path reads one byte per cached element. Non-finite rules as in
// attention_kernels.inl (a NaN element reaches the scores/values it feeds).

// Simd::load_e4m3 returns the element's value divided by 256 (the shift
// puts e4m3's exponent into an f16's, whose bias is 8 larger); the factor
// is folded into the scales, so dequantized = raw * (scale * kE4m3Raw).
constexpr float kE4m3Raw = 256.0f;

// One e4m3 element as Simd::load_e4m3 returns it (value / 256).
static inline float e4m3_raw_scalar(uint8_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x80u) << 24;
    const uint32_t e = (h >> 3) & 15u, m = h & 7u;
    uint32_t bits;
    if (e == 15u && m == 7u) {
        bits = 0x7fc00000u;
    } else if (e == 0u) {
        const float v = static_cast<float>(m) * (1.0f / 131072.0f);  // m * 2^-9 / 256
        return sign ? -v : v;
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 20);
    }
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

template <>
struct Elem<GQLA_DTYPE_FP8_E4M3> {
    using T = uint8_t;
    static constexpr bool kPaired = false;
    static inline Simd::V load(const T* p) { return Simd::load_e4m3(p); }
    static inline void load2(const T* p, Simd::V& a, Simd::V& b) { Simd::load_e4m3_pair(p, a, b); }
    static inline float scalar(const T* p) { return e4m3_raw_scalar(*p); }
};

// bf16 in natural order (load2 = two plain loads): the rope key beside e4m3
// keys, whose queries are not in pair order.
constexpr int kDtBf16Natural = 100;
template <>
struct Elem<kDtBf16Natural> {
    using T = uint16_t;
    static constexpr bool kPaired = false;
    static inline Simd::V load(const T* p) { return Simd::load_bf16(p); }
    static inline void load2(const T* p, Simd::V& a, Simd::V& b) {
        a = Simd::load_bf16(p);
        b = Simd::load_bf16(p + Simd::W);
    }
    static inline float scalar(const T* p) { return Elem<GQLA_DTYPE_BF16>::scalar(p); }
};

// dst[k] = src[k] * scales[k / block] (e4m3 to f32), k < n; block is a
// multiple of W or at least n.
static void fp8_rows_to_f32(const uint8_t* src, int n, const float* scales, int block, float* dst) {
    constexpr int W = Simd::W;
    for (int b0 = 0, bi = 0; b0 < n; b0 += block, ++bi) {
        const int e = imin(n, b0 + block);
        const float sc = scales[bi] * kE4m3Raw;
        const Simd::V sv = Simd::set1(sc);
        int k = b0;
        for (; k + W <= e; k += W) Simd::store(dst + k, Simd::mul(Simd::load_e4m3(src + k), sv));
        for (; k < e; ++k) dst[k] = e4m3_raw_scalar(src[k]) * sc;
    }
}

// ----------------------------------------------------- GQA form, narrow
// Scores of rows r0.. against n tokens: the e4m3 part into s (unscaled),
// the bf16 rope part (if any) into s2.
template <int RB, class R1, class R2>
static inline void fp8_scores_rows(const GqaItem& it, int r0, int n, R1 k1, R2 k2, float* s, float* s2,
                                   PrefetchStream* pf) {
    constexpr int NT = Simd::kScoreTokens;
    const float* q = it.q + static_cast<int64_t>(r0) * it.q_ld;
    float* srow = s + r0 * kGqaTokenBlock;
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step();
        const auto k = k1.from(j);
        gqa_score_tile<GQLA_DTYPE_FP8_E4M3, RB, NT>(q, it.q_ld, k, it.d1, k, 0, srow + j, kGqaTokenBlock);
    }
    for (; j < n; ++j) {
        if (pf) pf->step();
        const auto k = k1.from(j);
        gqa_score_tile<GQLA_DTYPE_FP8_E4M3, RB, 1>(q, it.q_ld, k, it.d1, k, 0, srow + j, kGqaTokenBlock);
    }
    if (it.d2 == 0) return;
    float* s2row = s2 + r0 * kGqaTokenBlock;
    for (j = 0; j + NT <= n; j += NT)
        gqa_score_tile<kDtBf16Natural, RB, NT>(q + it.d1, it.q_ld, k2.from(j), it.d2, k2, 0, s2row + j, kGqaTokenBlock);
    for (; j < n; ++j)
        gqa_score_tile<kDtBf16Natural, RB, 1>(q + it.d1, it.q_ld, k2.from(j), it.d2, k2, 0, s2row + j, kGqaTokenBlock);
}

// Cache rows and scales of one block of n tokens at position t (one page).
struct Fp8GqaBlock {
    const uint8_t* k1;
    const uint16_t* k2;
    const uint8_t* v;
    const float* ks;
    const float* vs;
    int n;

    static inline Fp8GqaBlock at(const GqaItem& it, int64_t t, int64_t t1, int max_block) {
        Fp8GqaBlock b;
        b.n = block_tokens(t, t1, it.page_size, max_block);
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        b.k1 = static_cast<const uint8_t*>(it.k1) + page * it.k1_page_stride + slot * it.d1;
        b.k2 = it.d2 ? static_cast<const uint16_t*>(it.k2) + page * it.k2_page_stride + slot * it.d2 : nullptr;
        b.v = static_cast<const uint8_t*>(it.v) + page * it.v_page_stride + slot * it.dv;
        b.ks = it.k1_scale + page * it.k1_scale_page_stride + slot;
        b.vs = it.v_scale + page * it.v_scale_page_stride + slot;
        return b;
    }
    // The block's values and their scales; prefetch adds its keys, rope
    // keys and their scales (see prefetch_ahead).
    inline void prefetch_values(const GqaItem& it, PrefetchStream* pf) const {
        pf->add(v, int64_t(n) * it.dv);
        pf->add(vs, int64_t(n) * 4);
    }
    inline void prefetch(const GqaItem& it, PrefetchStream* pf) const {
        pf->add(k1, int64_t(n) * it.d1);
        pf->add(k2, int64_t(n) * it.d2 * 2);
        pf->add(ks, int64_t(n) * 4);
        prefetch_values(it, pf);
    }
};

// One block of tokens for the narrow fp8 walks (gqa_attend_fp8 and the VBMI
// kernel): its key, rope-key and value rows as accessors, and its per-token
// scales. A page's contiguous rows (Fp8RunBlock), or gathered rows with
// their scales listed per token (Fp8ListBlock: GqaItem's k1_rows,
// k1_scale[t], v_scale[t]).
struct Fp8RunBlock {
    RunRows<uint8_t> k1, v;
    RunRows<uint16_t> k2;
    const float* ks;
    const float* vs;
    int n;
    Fp8GqaBlock raw;
    static inline Fp8RunBlock at(const GqaItem& it, int64_t t) {
        const Fp8GqaBlock b = Fp8GqaBlock::at(it, t, it.t1, kGqaTokenBlock);
        return {run_rows(b.k1, it.d1), run_rows(b.v, it.dv), run_rows(b.k2, it.d2), b.ks, b.vs, b.n, b};
    }
    inline void prefetch_values(const GqaItem& it, PrefetchStream* pf) const { raw.prefetch_values(it, pf); }
    inline void prefetch(const GqaItem& it, PrefetchStream* pf) const { raw.prefetch(it, pf); }
};

struct Fp8ListBlock {
    ListRows<uint8_t> k1, v;
    ListRows<uint16_t> k2;
    const float* ks;
    const float* vs;
    int n;
    static inline Fp8ListBlock at(const GqaItem& it, int64_t t) {
        Fp8ListBlock b;
        b.n = static_cast<int>(lmin(it.t1 - t, kGqaTokenBlock));
        b.k1 = {reinterpret_cast<const uint8_t* const*>(it.k1_rows) + t};
        b.v = {reinterpret_cast<const uint8_t* const*>(it.v_rows) + t};
        // No rope key (d2 == 0): an accessor that is never read.
        b.k2 = {reinterpret_cast<const uint16_t* const*>(it.d2 ? it.k2_rows : it.k1_rows) + t};
        b.ks = it.k1_scale + t;
        b.vs = it.v_scale + t;
        return b;
    }
    inline void prefetch_values(const GqaItem& it, PrefetchStream* pf) const {
        pf->add_rows(reinterpret_cast<const void* const*>(v.rows), n, it.dv);
        pf->add(vs, int64_t(n) * 4);
    }
    inline void prefetch(const GqaItem& it, PrefetchStream* pf) const {
        pf->add_rows(reinterpret_cast<const void* const*>(k1.rows), n, it.d1);
        if (it.d2) pf->add_rows(reinterpret_cast<const void* const*>(k2.rows), n, it.d2 * int64_t(2));
        pf->add(ks, int64_t(n) * 4);
        prefetch_values(it, pf);
    }
};

template <int RB, class Block>
static inline void fp8_scores_group(const GqaItem& it, int r0, int n, const Block& b, float* s, float* s2,
                                    PrefetchStream* pf) {
    fp8_scores_rows<RB>(it, r0, n, b.k1, b.k2, s, s2, pf);
}

template <class Block>
[[gnu::always_inline]] inline void gqa_attend_fp8_blocks(const GqaItem& it) {
    constexpr int RBmax = Simd::kScoreRows;
    constexpr int E = GQLA_DTYPE_FP8_E4M3;
    for (int r = 0; r < it.rows; ++r) {
        it.m[r] = kMaxFloor;
        it.l[r] = 0.0f;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(it.rows) * it.dv; ++i) it.acc[i] = 0.0f;
    float* s = it.scratch;
    float* corr = it.scratch + it.rows * kGqaTokenBlock;
    float* s2 = it.scratch + gqa_scratch_fp8_offset(it.rows, it.d1 + it.d2);
    float* scale = s2 + round16(int64_t(it.rows) * kGqaTokenBlock);  // [2][kGqaTokenBlock]: keys, values
    if (it.t0 >= it.t1) return;
    const int64_t min_limit = min_row_limit(it.row_limit, it.rows);
    Block cur = Block::at(it, it.t0);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const Block next = has_next ? Block::at(it, t + n) : cur;
        PrefetchStream ahead;
        prefetch_ahead(it, cur, has_next ? &next : nullptr, t == it.t0, gqa_score_steps(n) + n, &ahead);
        for (int j = 0; j < n; ++j) {
            scale[j] = cur.ks[j] * kE4m3Raw;
            scale[kGqaTokenBlock + j] = cur.vs[j] * kE4m3Raw;
        }

        int r0 = 0;
        PrefetchStream* pf = &ahead;
        for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr) fp8_scores_group<RBmax>(it, r0, n, cur, s, s2, pf);
        switch (it.rows - r0) {
            case 1:
                fp8_scores_group<1>(it, r0, n, cur, s, s2, pf);
                break;
            case 2:
                fp8_scores_group<2 < RBmax ? 2 : 1>(it, r0, n, cur, s, s2, pf);
                break;
            case 3:
                fp8_scores_group<3 < RBmax ? 3 : 1>(it, r0, n, cur, s, s2, pf);
                break;
            default:
                break;
        }
        for (int r = 0; r < it.rows; ++r) {
            float* sr = s + r * kGqaTokenBlock;
            if (it.d2 > 0) {
                const float* s2r = s2 + r * kGqaTokenBlock;
                for (int j = 0; j < n; ++j) sr[j] = sr[j] * scale[j] + s2r[j];
            } else {
                for (int j = 0; j < n; ++j) sr[j] *= scale[j];
            }
        }
        gqa_softmax_block(it, t, n, s, corr);
        // l holds the plain probabilities; the value tiles take p * scale.
        for (int r = 0; r < it.rows; ++r) {
            float* pr = s + r * kGqaTokenBlock;
            for (int j = 0; j < n; ++j) pr[j] *= scale[kGqaTokenBlock + j];
        }
        if (t + n - 1 > min_limit)
            gqa_pv_block_masked<E>(it, t, n, cur.v, s, corr);
        else
            gqa_pv_block<E, false>(it, t, n, cur.v, s, corr, &ahead);
        t += n;
        cur = next;
    }
}

// Gathered rows with a scale per listed token (sparse attention, see
// GqaItem), compiled out of line: with both walks inlined here the dense
// one ran 1.06-1.13x slower on the AVX-512 table (2-vCPU Zen 5).
[[gnu::noinline]] static void gqa_attend_fp8_lists(const GqaItem& it) { gqa_attend_fp8_blocks<Fp8ListBlock>(it); }

// Contiguous pages (the dense walk, inlined), or gathered rows.
static void gqa_attend_fp8(const GqaItem& it) {
    if (it.k1_rows != nullptr) {
        gqa_attend_fp8_lists(it);
        return;
    }
    gqa_attend_fp8_blocks<Fp8RunBlock>(it);
}

// ------------------------------------------------------- GQA form, wide
// n rows of w e4m3 elements (row stride w) with one scale per row into f32
// rows of stride ld.
static inline void widen_rows_fp8(const uint8_t* src, int n, int w, const float* scales, float* dst, int ld) {
    for (int j = 0; j < n; ++j) fp8_rows_to_f32(src + int64_t(j) * w, w, scales + j, w, dst + int64_t(j) * ld);
}

static void gqa_attend_wide_fp8(const GqaItem& it) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kAbsorbRowVecs;
    const int K = it.d1 + it.d2, dv = it.dv;
    const int R = wide_rows_pad(it.rows);
    const WideScratch w = wide_scratch(it);
    const int64_t min_limit = wide_start(it, R, w);
    for (int k = 0; k < K; ++k)
        for (int i = 0; i < R; ++i) w.qt[int64_t(k) * R + i] = i < it.rows ? it.q[int64_t(i) * it.q_ld + k] : 0.0f;
    const int64_t t1 = lmin(it.t1, max_lane_limit(w.limit, R) + 1);
    for (int64_t t = it.t0; t < t1;) {
        const Fp8GqaBlock b = Fp8GqaBlock::at(it, t, t1, kWideTokenBlock);
        const int n = b.n;
        PrefetchStream ahead;
        if (t + n < t1) {
            const Fp8GqaBlock nb = Fp8GqaBlock::at(it, t + n, t1, kWideTokenBlock);
            ahead.add(nb.k1, int64_t(nb.n) * it.d1);
            ahead.add(nb.k2, int64_t(nb.n) * it.d2 * 2);
            ahead.add(nb.v, int64_t(nb.n) * it.dv);
            ahead.plan(wide_score_steps(n));
        }
        widen_rows_fp8(b.k1, n, it.d1, b.ks, w.ktile, K);
        if (it.d2) widen_rows<GQLA_DTYPE_BF16>(b.k2, n, it.d2, w.ktile + it.d1, K);
        widen_rows_fp8(b.v, n, dv, b.vs, w.vtile, dv);
        PrefetchStream* pf = &ahead;
        int col = 0;
        for (; col + NV * W <= R; col += NV * W, pf = nullptr)
            wide_scores_cols<NV>(w.ktile, K, n, w.qt + col, R, w.st + col, pf);
        for (; col < R; col += W, pf = nullptr) wide_scores_cols<1>(w.ktile, K, n, w.qt + col, R, w.st + col, pf);
        wide_softmax_block(w.st, R, t, n, w.limit, min_limit, w.m, w.l, w.corr);
        if (t + n - 1 > min_limit)
            wide_pv_block_masked(w, R, dv, t, n);
        else
            wide_pv_block<false>(w, R, dv, n, nullptr);
        t += n;
    }
    wide_finish(it, R, w);
}

// ---------------------------------------------------------------- absorb
static void absorb_attend_fp8(const AbsorbItem& it) {
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
    struct Rows {
        const uint8_t* c;
        const uint16_t* kr;
        const float* sc;
    };
    auto latent_at = [&](int64_t t) {
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        return Rows{static_cast<const uint8_t*>(it.c) + page * it.c_page_stride + slot * it.r,
                    static_cast<const uint16_t*>(it.kr) + page * it.kr_page_stride + slot * it.d_r,
                    it.c_scale + page * it.c_scale_page_stride + slot * it.c_scale_blocks};
    };
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = block_tokens(t, it.t1, it.page_size, kAbsorbTokenBlock);
        const Rows cur = latent_at(t);
        PrefetchStream next_block;
        if (t + n < it.t1) {
            const int n_next = block_tokens(t + n, it.t1, it.page_size, kAbsorbTokenBlock);
            const Rows nx = latent_at(t + n);
            next_block.add(nx.c, int64_t(n_next) * it.r);
            next_block.add(nx.kr, int64_t(n_next) * it.d_r * 2);
            next_block.add(nx.sc, int64_t(n_next) * it.c_scale_blocks * 4);
        }
        next_block.plan(absorb_score_steps(n) + absorb_pv_steps(it.r));
        // Latent tile to f32 with its block scales: [c | kr] per token.
        for (int j = 0; j < n; ++j) {
            float* dst = it.ctile + j * K;
            fp8_rows_to_f32(cur.c + int64_t(j) * it.r, it.r, cur.sc + int64_t(j) * it.c_scale_blocks,
                            kFp8LatentBlockElems, dst);
            const uint16_t* kj = cur.kr + int64_t(j) * it.d_r;
            int k = 0;
            for (; k + W <= it.d_r; k += W) Simd::store(dst + it.r + k, Simd::load_bf16(kj + k));
            for (; k < it.d_r; ++k) dst[it.r + k] = Elem<GQLA_DTYPE_BF16>::scalar(kj + k);
        }
        PrefetchStream* pf = &next_block;
        int col = 0;
        for (; col + NV * W <= R; col += NV * W, pf = nullptr) absorb_scores_cols<NV>(it, n, K, col, pf);
        for (; col < R; col += W, pf = nullptr) absorb_scores_cols<1>(it, n, K, col, pf);
        absorb_softmax_block(it, t, n, min_limit, corr);
        if (t + n - 1 > min_limit)
            absorb_pv_block_masked(it, t, n, K, corr);
        else
            absorb_pv_block<false>(it, n, K, corr, &next_block, nullptr);
        t += n;
    }
}

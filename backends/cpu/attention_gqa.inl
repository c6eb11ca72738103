// SPDX-License-Identifier: Apache-2.0
// The GQA-form decode kernel (gqa_attend): scores, softmax, values.
// Part of the kernel bodies every ISA unit includes through
// attention_kernels.inl (its conventions and non-finite rules hold here).

// ------------------------------------------------------------ GQA kernel
// Scores of RB query rows against NT tokens: s[r][t] = q[r] . [k1[t] |
// k2[t]] (R: RunRows or ListRows of the cache element type). Each key
// vector is loaded and converted once and reused by all RB rows.
template <int DT, int RB, int NT, class R>
static inline void gqa_score_tile(const float* q, int q_ld, R k1, int d1, R k2, int d2, float* s, int s_ld) {
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
        const R k = seg == 0 ? k1 : k2;
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
                    Elem<DT>::load2(k[t] + d, ka, kb);
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
                for (int t = 0; t < NT; ++t) Elem<DT>::load2(k[t] + d, ka[t], kb[t]);
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
            for (int t = 0; t < NT; ++t) kv[t] = Elem<DT>::load(k[t] + d);
            GQLA_UNROLL
            for (int r = 0; r < RB; ++r) {
                V qv = Simd::load(qs + static_cast<int64_t>(r) * q_ld + d);
                GQLA_UNROLL
                for (int t = 0; t < NT; ++t) acc[r * NT + t] = Simd::fma(qv, kv[t], acc[r * NT + t]);
            }
        }
        for (; d < dk; ++d) GQLA_UNROLL
        for (int t = 0; t < NT; ++t) {
            float kf = Elem<DT>::scalar(k[t] + d);
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

template <int DT, int RB, class R>
static inline void gqa_scores_rows(const GqaItem& it, int r0, int n, R k1, R k2, float* s, PrefetchStream* pf) {
    constexpr int NT = Simd::kScoreTokens;
    const float* q = it.q + static_cast<int64_t>(r0) * it.q_ld;
    float* srow = s + r0 * kGqaTokenBlock;
    int j = 0;
    for (; j + NT <= n; j += NT) {
        if (pf) pf->step_out_of_line();
        gqa_score_tile<DT, RB, NT>(q, it.q_ld, k1.from(j), it.d1, k2.from(j), it.d2, srow + j, kGqaTokenBlock);
    }
    for (; j < n; ++j) {
        if (pf) pf->step_out_of_line();
        gqa_score_tile<DT, RB, 1>(q, it.q_ld, k1.from(j), it.d1, k2.from(j), it.d2, srow + j, kGqaTokenBlock);
    }
}

// Scores of all rows of a block; pf is paced by the first row group only.
template <int DT, class R>
static inline void gqa_scores_block(const GqaItem& it, int n, R k1, R k2, float* s, PrefetchStream* pf) {
    constexpr int RBmax = Simd::kScoreRows;
    int r0 = 0;
    for (; r0 + RBmax <= it.rows; r0 += RBmax, pf = nullptr) gqa_scores_rows<DT, RBmax>(it, r0, n, k1, k2, s, pf);
    switch (it.rows - r0) {
        case 1:
            gqa_scores_rows<DT, 1>(it, r0, n, k1, k2, s, pf);
            break;
        case 2:
            gqa_scores_rows<DT, 2 < RBmax ? 2 : 1>(it, r0, n, k1, k2, s, pf);
            break;
        case 3:
            gqa_scores_rows<DT, 3 < RBmax ? 3 : 1>(it, r0, n, k1, k2, s, pf);
            break;
        default:
            break;
    }
}

// Queries of a bf16-cache item in pair order (to meet the keys' load2), per
// key segment, into dst [rows][d1 + d2]; returns the item reading them there.
static inline GqaItem with_pair_order_queries(const GqaItem& item, float* dst) {
    GqaItem it = item;
    const int dk = item.d1 + item.d2;
    for (int r = 0; r < item.rows; ++r) {
        const float* src = item.q + static_cast<int64_t>(r) * item.q_ld;
        to_pair_order(src, dst + static_cast<int64_t>(r) * dk, item.d1);
        to_pair_order(src + item.d1, dst + static_cast<int64_t>(r) * dk + item.d1, item.d2);
    }
    it.q = dst;
    it.q_ld = dk;
    return it;
}

// acc[r][d..] = acc * corr[r] + sum_j p[r][j] v[j][d..] for NC vectors of
// the value dim; each value vector is converted once for all RB rows.
// kMasked: row r takes only its first visible[r] tokens (n is their maximum).
template <int DT, int RB, int NC, bool kMasked = false, class R>
static inline void gqa_pv_tile(const float* p, int n, R v, int dv, int d, float* acc, const float* corr,
                               PrefetchStream* pf, const int* visible = nullptr) {
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
        if (pf) pf->step_out_of_line();
        V vv[NC];
        if constexpr (NC % 2 == 0) {
            // Whole 2W blocks: the accumulators of this tile hold them in pair order.
            GQLA_UNROLL
            for (int c = 0; c < NC; c += 2) Elem<DT>::load2(v[j] + d + c * W, vv[c], vv[c + 1]);
        } else {
            GQLA_UNROLL
            for (int c = 0; c < NC; ++c) vv[c] = Elem<DT>::load(v[j] + d + c * W);
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
template <int DT, int RB, bool kMasked, class R>
static inline void gqa_pv_rows(const GqaItem& it, int r0, int64_t t, int n, R v, const float* p, const float* corr,
                               PrefetchStream* pf) {
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
        for (int j = 0; j < visible[r]; ++j) s += pr[r * kGqaTokenBlock + j] * Elem<DT>::scalar(v[j] + d);
        acc[static_cast<int64_t>(r) * dv + d] = s;
    }
}

// The value pass of one block over all rows, in register tiles of up to
// kScoreRows rows.
template <int DT, bool kMasked, class R>
static inline void gqa_pv_block(const GqaItem& it, int64_t t, int n, R v, const float* p, const float* corr,
                                PrefetchStream* pf) {
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
template <int DT, class R>
[[gnu::noinline]] static void gqa_pv_block_masked(const GqaItem& it, int64_t t, int n, R v, const float* p,
                                                  const float* corr) {
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

// Cache rows of one block of n tokens from position t. GqaRunBlock: the
// block lies in one page; GqaListBlock: gathered tokens (GqaItem::k1_rows),
// any addresses, the block not cut at page ends. Without a rope key (d2 = 0)
// k2 repeats k1: the tiles never read it then.
template <int DT>
struct GqaRunBlock {
    using T = typename Elem<DT>::T;
    RunRows<T> k1, k2, v;
    int n;

    static inline GqaRunBlock at(const GqaItem& it, int64_t t) {
        GqaRunBlock b;
        b.n = block_tokens(t, it.t1, it.page_size, kGqaTokenBlock);
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        b.k1 = {static_cast<const T*>(it.k1) + page * it.k1_page_stride + slot * it.d1, it.d1};
        b.k2 = it.d2 ? RunRows<T>{static_cast<const T*>(it.k2) + page * it.k2_page_stride + slot * it.d2, it.d2} : b.k1;
        b.v = {static_cast<const T*>(it.v) + page * it.v_page_stride + slot * it.dv, it.dv};
        return b;
    }
    inline void prefetch_values(const GqaItem& it, PrefetchStream* pf) const {
        pf->add(v.base, n * it.dv * int64_t(sizeof(T)));
    }
    inline void prefetch(const GqaItem& it, PrefetchStream* pf) const {
        pf->add(k1.base, n * it.d1 * int64_t(sizeof(T)));
        if (it.d2) pf->add(k2.base, n * it.d2 * int64_t(sizeof(T)));
        prefetch_values(it, pf);
    }
};

template <int DT>
struct GqaListBlock {
    using T = typename Elem<DT>::T;
    ListRows<T> k1, k2, v;
    int n;

    static inline GqaListBlock at(const GqaItem& it, int64_t t) {
        GqaListBlock b;
        b.n = static_cast<int>(lmin(it.t1 - t, kGqaTokenBlock));
        b.k1 = {reinterpret_cast<const T* const*>(it.k1_rows) + t};
        b.k2 = it.d2 ? ListRows<T>{reinterpret_cast<const T* const*>(it.k2_rows) + t} : b.k1;
        b.v = {reinterpret_cast<const T* const*>(it.v_rows) + t};
        return b;
    }
    inline void prefetch_values(const GqaItem& it, PrefetchStream* pf) const {
        pf->add_rows(reinterpret_cast<const void* const*>(v.rows), n, it.dv * int64_t(sizeof(T)));
    }
    inline void prefetch(const GqaItem& it, PrefetchStream* pf) const {
        pf->add_rows(reinterpret_cast<const void* const*>(k1.rows), n, it.d1 * int64_t(sizeof(T)));
        if (it.d2) pf->add_rows(reinterpret_cast<const void* const*>(k2.rows), n, it.d2 * int64_t(sizeof(T)));
        prefetch_values(it, pf);
    }
};

// The prefetch of one block of a GQA-form walk (every narrow kernel, any
// Block with prefetch and prefetch_values): the next block's keys and
// values (and scales) spread over the `steps` steps of this block's score
// and value passes; the walk's first block also asks for its own values,
// which its scores then overlap. One pass ahead (this block's values during
// its scores, the next keys during its sums) left a cold walk waiting on
// memory: the bf16-dot kernel went from 0.91-1.05 to 0.65-0.85 ms for GQA
// 32/8 T=4096 on 2 Zen 5 cores; f16, f32 and fp8 measured the same within
// noise.
template <class Block>
static inline void prefetch_ahead(const GqaItem& it, const Block& cur, const Block* next, bool first, int steps,
                                  PrefetchStream* pf) {
    if (first) cur.prefetch_values(it, pf);
    if (next) next->prefetch(it, pf);
    pf->plan(steps);
}

// The block walk of gqa_attend over contiguous (GqaRunBlock) or gathered
// (GqaListBlock) tokens.
template <int DT, class Block>
static void gqa_attend_blocks(const GqaItem& item) {
    static_assert(Simd::kPvChunks % 2 == 0, "value tiles must cover whole 2W blocks");
    GqaItem it = item;
    if constexpr (Elem<DT>::kPaired)
        it = with_pair_order_queries(item, item.scratch + gqa_scratch_pair_query_offset(item.rows, item.d1 + item.d2));
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
    Block cur = Block::at(it, it.t0);
    for (int64_t t = it.t0; t < it.t1;) {
        const int n = cur.n;
        const bool has_next = t + n < it.t1;
        const Block next = has_next ? Block::at(it, t + n) : cur;
        PrefetchStream ahead;
        prefetch_ahead(it, cur, has_next ? &next : nullptr, t == it.t0, gqa_score_steps(n) + n, &ahead);

        gqa_scores_block<DT>(it, n, cur.k1, cur.k2, s, &ahead);
        gqa_softmax_block(it, t, n, s, corr);
        if (t + n - 1 > min_limit)
            gqa_pv_block_masked<DT>(it, t, n, cur.v, s, corr);
        else
            gqa_pv_block<DT, false>(it, t, n, cur.v, s, corr, &ahead);
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

template <int DT>
static void gqa_attend(const GqaItem& item) {
    if (item.k1_rows != nullptr)
        gqa_attend_blocks<DT, GqaListBlock<DT>>(item);
    else
        gqa_attend_blocks<DT, GqaRunBlock<DT>>(item);
}

// SPDX-License-Identifier: Apache-2.0
// The wide GQA-form kernel: up to kWideRows query rows of one item (a tile
// of a prefill chunk's rows of one KV group) sit in SIMD lanes, as the
// absorb kernel's rows do, against the item's tokens:
//   scores  st[j][rows]  = sum_k key[j][k] * qt[k][rows]   (key broadcast)
//   values  acc[k][rows] += v[j][k] * p[j][rows]           (value broadcast)
// so no score needs a horizontal sum, the softmax runs lane-parallel, and
// every cache element loaded feeds a whole vector of rows. The register
// tiles are the absorb kernel's (absorb_score_tile, absorb_pv_tile). Each
// block's keys and values are widened to f32 once; the item's accumulator
// is kept transposed and put back into GqaItem::acc [rows][dv] at the end.
// Included after attention_kernels.inl; same non-finite rules (a position a
// row may not see is -inf before the softmax and its value never meets the
// row's accumulator: blocks past the earliest row limit run the masked
// value tiles).

// The item's scratch (gqa_wide_scratch_floats); arrays over rows are
// rows_pad long, rows_pad <= kWideRows.
struct WideScratch {
    float* qt;        // [d1 + d2 + 2][rows_pad] queries (f32, or bf16 pairs)
    float* st;        // [kWideTokenBlock][rows_pad] scores, then probabilities
    float* corr;      // [rows_pad]
    float* ktile;     // [kWideTokenBlock][d1 + d2]
    float* vtile;     // [kWideTokenBlock][dv]
    uint32_t* pairs;  // value pairs [kWideTokenBlock / 2][dv], then probability pairs
    float* acc;       // [dv][rows_pad]
    float* m;
    float* l;
    float* visible;  // per lane: tokens of the current block it may see
    int64_t* limit;  // per lane: last visible position (padding lanes copy the last row)
};

static inline WideScratch wide_scratch(const GqaItem& it) {
    const int64_t K = it.d1 + it.d2;
    float* p = it.scratch;
    WideScratch w;
    w.qt = p;
    p += round16((K + 2) * kWideRows);
    w.st = p;
    w.corr = p + kWideTokenBlock * kWideRows;
    p += round16((kWideTokenBlock + 1) * kWideRows);
    w.ktile = p;
    p += round16(kWideTokenBlock * K);
    w.vtile = p;
    p += round16(int64_t(kWideTokenBlock) * it.dv);
    w.pairs = reinterpret_cast<uint32_t*>(p);
    p += round16(kWideTokenBlock / 2 * (it.dv + kWideRows));
    w.acc = p;
    p += round16(int64_t(it.dv) * kWideRows);
    w.m = p;
    w.l = p + kWideRows;
    w.visible = p + 2 * kWideRows;
    w.limit = reinterpret_cast<int64_t*>(p + 3 * kWideRows);
    return w;
}

static inline int wide_rows_pad(int rows) { return (rows + kAbsorbRowAlign - 1) / kAbsorbRowAlign * kAbsorbRowAlign; }

// Limits, softmax state and accumulator of a fresh item; returns the
// smallest limit over the lanes.
static inline int64_t wide_start(const GqaItem& it, int R, const WideScratch& w) {
    for (int i = 0; i < R; ++i) {
        w.limit[i] = it.row_limit[i < it.rows ? i : it.rows - 1];
        w.m[i] = kMaxFloor;
        w.l[i] = 0.0f;
    }
    for (int64_t i = 0; i < int64_t(it.dv) * R; ++i) w.acc[i] = 0.0f;
    return min_row_limit(w.limit, R);
}

// GqaItem's outputs from the lanes: acc [rows][dv], m and l.
static inline void wide_finish(const GqaItem& it, int R, const WideScratch& w) {
    for (int i = 0; i < it.rows; ++i) {
        it.m[i] = w.m[i];
        it.l[i] = w.l[i];
        float* dst = it.acc + int64_t(i) * it.dv;
        for (int k = 0; k < it.dv; ++k) dst[k] = w.acc[int64_t(k) * R + i];
    }
}

// Cache rows of the block of n tokens at position t (all in one page).
template <int DT>
struct WideBlock {
    using T = typename Elem<DT>::T;
    const T* k1;
    const T* k2;
    const T* v;
    int n;

    static inline WideBlock at(const GqaItem& it, int64_t t, int64_t t1) {
        WideBlock b;
        b.n = block_tokens(t, t1, it.page_size, kWideTokenBlock);
        const int64_t page = it.page_table[t / it.page_size];
        const int64_t slot = t % it.page_size;
        b.k1 = static_cast<const T*>(it.k1) + page * it.k1_page_stride + slot * it.d1;
        b.k2 = it.d2 ? static_cast<const T*>(it.k2) + page * it.k2_page_stride + slot * it.d2 : nullptr;
        b.v = static_cast<const T*>(it.v) + page * it.v_page_stride + slot * it.dv;
        return b;
    }
    // The next block's rows arrive while this one is computed on (see
    // PrefetchStream), paced over `steps` tile calls.
    static inline void prefetch_next(const GqaItem& it, int64_t t, int64_t t1, int steps, PrefetchStream& pf) {
        if (t >= t1) return;
        const WideBlock nb = at(it, t, t1);
        pf.add(nb.k1, int64_t(nb.n) * it.d1 * int64_t(sizeof(T)));
        pf.add(nb.k2, int64_t(nb.n) * it.d2 * int64_t(sizeof(T)));
        pf.add(nb.v, int64_t(nb.n) * it.dv * int64_t(sizeof(T)));
        pf.plan(steps);
    }
};

// Copies n rows of width w (row stride w) into f32 rows of stride ld.
template <int DT>
static inline void widen_rows(const typename Elem<DT>::T* src, int n, int w, float* dst, int ld) {
    constexpr int W = Simd::W;
    for (int j = 0; j < n; ++j) {
        const typename Elem<DT>::T* s = src + int64_t(j) * w;
        float* o = dst + int64_t(j) * ld;
        int k = 0;
        for (; k + W <= w; k += W) Simd::store(o + k, Elem<DT>::load(s + k));
        for (; k < w; ++k) o[k] = Elem<DT>::scalar(s + k);
    }
}

// Lane-parallel causal mask and online softmax of one block (the absorb
// kernel's, over plain arrays): probabilities in place, rescale into corr.
static inline void wide_softmax_block(float* st, int R, int64_t t, int n, const int64_t* limit, int64_t min_limit,
                                      float* m, float* l, float* corr) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    if (t + n - 1 > min_limit)
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < R; ++i)
                if (t + j > limit[i]) st[j * R + i] = kNegInf;
    for (int i = 0; i < R; i += W) {
        // NaN scores stay out of the maximum (running max second).
        V mb = Simd::set1(kNegInf);
        for (int j = 0; j < n; ++j) mb = Simd::max(Simd::load(st + j * R + i), mb);
        V m_old = Simd::load(m + i);
        V m_new = Simd::max(m_old, mb);
        V sum = Simd::zero();
        for (int j = 0; j < n; ++j) {
            V p = Simd::exp2(Simd::sub(Simd::load(st + j * R + i), m_new));
            Simd::store(st + j * R + i, p);
            sum = Simd::add(sum, p);
        }
        V cr = Simd::exp2(Simd::sub(m_old, m_new));
        Simd::store(corr + i, cr);
        Simd::store(l + i, Simd::fma(Simd::load(l + i), cr, sum));
        Simd::store(m + i, m_new);
    }
}

static inline void wide_visible_counts(const int64_t* limit, int R, int64_t t, int n, float* visible) {
    for (int i = 0; i < R; ++i) visible[i] = static_cast<float>(visible_in_block(limit[i], t, n));
}

// Leftover tokens / value dims as one narrower register tile (out of line,
// as absorb_score_remainder).
template <int NV>
[[gnu::noinline]] static void wide_score_remainder(const float* keys, int K, const float* qt, int R, float* st,
                                                   int rem) {
    with_remainder<Simd::kAbsorbTokens>(
        rem, [&](auto r) { absorb_score_tile<decltype(r)::value, NV>(keys, K, qt, R, st, R); });
}

template <int NV, bool kMasked>
[[gnu::noinline]] static void wide_pv_remainder(const float* vt, int dv, int n, const float* p, int R, float* acc,
                                                const float* corr, const float* visible, int rem) {
    with_remainder<Simd::kAbsorbDims>(
        rem, [&](auto r) { absorb_pv_tile<decltype(r)::value, NV, kMasked>(vt, dv, n, p, R, acc, R, corr, visible); });
}

// Scores of n tokens (keys [n][K] f32) for the NV row vectors at column col.
template <int NV>
static inline void wide_scores_cols(const float* keys, int K, int n, const float* qt, int R, float* st,
                                    PrefetchStream* pf) {
    constexpr int JT = Simd::kAbsorbTokens;
    int j = 0;
    for (; j + JT <= n; j += JT) {
        if (pf) pf->step();
        absorb_score_tile<JT, NV>(keys + j * K, K, qt, R, st + j * R, R);
    }
    if (j < n) {
        if (pf) pf->step();
        wide_score_remainder<NV>(keys + j * K, K, qt, R, st + j * R, n - j);
    }
}

// acc[k][rows] = acc * corr + sum_j vt[j][k] p[j][rows] for the NV row
// vectors at column col (p, acc, corr, visible already offset to it).
template <int NV, bool kMasked>
static inline void wide_pv_cols(const float* vt, int dv, int n, const float* p, int R, float* acc, const float* corr,
                                const float* visible, PrefetchStream* pf) {
    constexpr int KB = Simd::kAbsorbDims;
    int k = 0;
    for (; k + KB <= dv; k += KB) {
        if (pf) pf->step();
        absorb_pv_tile<KB, NV, kMasked>(vt + k, dv, n, p, R, acc + int64_t(k) * R, R, corr, visible);
    }
    if (k < dv) {
        if (pf) pf->step();
        wide_pv_remainder<NV, kMasked>(vt + k, dv, n, p, R, acc + int64_t(k) * R, corr, visible, dv - k);
    }
}

// The value pass of one block over all row vectors (values widened in vtile).
template <bool kMasked>
static inline void wide_pv_block(const WideScratch& w, int R, int dv, int n, PrefetchStream* pf) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kAbsorbRowVecs;
    int col = 0;
    for (; col + NV * W <= R; col += NV * W, pf = nullptr)
        wide_pv_cols<NV, kMasked>(w.vtile, dv, n, w.st + col, R, w.acc + col, w.corr + col, w.visible + col, pf);
    for (; col < R; col += W, pf = nullptr)
        wide_pv_cols<1, kMasked>(w.vtile, dv, n, w.st + col, R, w.acc + col, w.corr + col, w.visible + col, pf);
}

// The masked value pass of the block at t, out of line (see gqa_pv_block_masked).
[[gnu::noinline]] static void wide_pv_block_masked(const WideScratch& w, int R, int dv, int64_t t, int n) {
    wide_visible_counts(w.limit, R, t, n, w.visible);
    wide_pv_block<true>(w, R, dv, n, nullptr);
}

// Tile calls of the first column block's score pass (prefetch pacing).
static inline int wide_score_steps(int n) { return (n + Simd::kAbsorbTokens - 1) / Simd::kAbsorbTokens; }

static inline int64_t max_lane_limit(const int64_t* limit, int R) {
    int64_t m = limit[0];
    for (int i = 1; i < R; ++i) m = limit[i] > m ? limit[i] : m;
    return m;
}

template <int DT>
static void gqa_attend_wide(const GqaItem& it) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kAbsorbRowVecs;
    const int K = it.d1 + it.d2, dv = it.dv;
    const int R = wide_rows_pad(it.rows);
    const WideScratch w = wide_scratch(it);
    const int64_t min_limit = wide_start(it, R, w);
    // Queries transposed, padding lanes 0.
    for (int k = 0; k < K; ++k)
        for (int i = 0; i < R; ++i) w.qt[int64_t(k) * R + i] = i < it.rows ? it.q[int64_t(i) * it.q_ld + k] : 0.0f;
    const int64_t t1 = lmin(it.t1, max_lane_limit(w.limit, R) + 1);  // no row sees past it
    for (int64_t t = it.t0; t < t1;) {
        const WideBlock<DT> b = WideBlock<DT>::at(it, t, t1);
        const int n = b.n;
        PrefetchStream ahead;
        WideBlock<DT>::prefetch_next(it, t + n, t1, wide_score_steps(n), ahead);
        widen_rows<DT>(b.k1, n, it.d1, w.ktile, K);
        if (it.d2) widen_rows<DT>(b.k2, n, it.d2, w.ktile + it.d1, K);
        widen_rows<DT>(b.v, n, dv, w.vtile, dv);
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

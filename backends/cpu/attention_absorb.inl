// SPDX-License-Identifier: Apache-2.0
// The absorb-form decode kernel (absorb_attend) over the latent cache.
// Part of the kernel bodies every ISA unit includes through
// attention_kernels.inl (its conventions and non-finite rules hold here).

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

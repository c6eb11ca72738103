// SPDX-License-Identifier: Apache-2.0
// The GQA_TRANSIENT form's up-projection of one block of latent rows for
// one group, out[j][n] = c[j] . W[n]. With f32 weights it is the table's
// GEMM out^T = W [N][r] * c^T [r][tokens] (the latent transposed once per
// block): every output is one FMA chain over the latent dim in order, as
// the fallback expansion GEMM computes the kept expanded cache, and the
// register tiles stream W's rows (measured on Zen 4: ~1.45x the rate of a
// dot-product form). bf16 weights, whose load2 the GEMM tiles do not take,
// go through the GQA score tile instead (c[j] . W[n] with both operands
// contiguous along the latent dim, horizontal sums once per 4 x 4 tile).
// Included after attention_kernels.inl.

template <int WDT, int RB>
static inline void expand_rows_tile(const float* lat, int r, const typename Elem<WDT>::T* w, int N, float* out) {
    int n = 0;
    const auto rows = run_rows(w, r);
    for (; n + 4 <= N; n += 4) gqa_score_tile<WDT, RB, 4>(lat, r, rows.from(n), r, rows, 0, out + n, N);
    for (; n < N; ++n) gqa_score_tile<WDT, RB, 1>(lat, r, rows.from(n), r, rows, 0, out + n, N);
}

template <int DT>
static void expand_latent_gemm(const ExpandItem& e) {
    using T = typename Elem<DT>::T;
    constexpr int W = Simd::W;
    constexpr int J = kExpandTokens;
    const int r = e.r, N = e.N;
    float* lat = e.scratch;                                  // [r][J] f32, tokens past e.tokens 0
    float* out_t = e.scratch + round16(int64_t(J + 1) * r);  // [N][J]
    float* row = e.scratch + int64_t(J) * r;                 // one widened row
    for (int j = 0; j < J; ++j) {
        if (j < e.tokens) {
            const T* src = static_cast<const T*>(e.latent[j]);
            int k = 0;
            for (; k + W <= r; k += W) Simd::store(row + k, Elem<DT>::load(src + k));
            for (; k < r; ++k) row[k] = Elem<DT>::scalar(src + k);
            for (k = 0; k < r; ++k) lat[int64_t(k) * J + j] = row[k];
        } else {
            for (int k = 0; k < r; ++k) lat[int64_t(k) * J + j] = 0.0f;
        }
    }
    gemm_any<GQLA_DTYPE_F32>(N, J, r, static_cast<const float*>(e.w), r, lat, J, out_t, J);
    for (int j = 0; j < e.tokens; ++j)
        for (int n = 0; n < N; ++n) e.out[int64_t(j) * N + n] = out_t[int64_t(n) * J + j];
}

template <int DT, int WDT>
static void expand_latent_with(const ExpandItem& e) {
    using T = typename Elem<DT>::T;
    constexpr int W = Simd::W;
    const int r = e.r;
    float* lat = e.scratch;                          // [tokens][r] f32
    float* row = e.scratch + int64_t(e.tokens) * r;  // one widened row (paired weights)
    for (int j = 0; j < e.tokens; ++j) {
        const T* src = static_cast<const T*>(e.latent[j]);
        float* dst = Elem<WDT>::kPaired ? row : lat + int64_t(j) * r;
        int k = 0;
        for (; k + W <= r; k += W) Simd::store(dst + k, Elem<DT>::load(src + k));
        for (; k < r; ++k) dst[k] = Elem<DT>::scalar(src + k);
        // bf16 weights arrive through load2 in pair order: meet them there.
        if (Elem<WDT>::kPaired) to_pair_order(row, lat + int64_t(j) * r, r);
    }
    const auto* w = static_cast<const typename Elem<WDT>::T*>(e.w);
    int j = 0;
    for (; j + 4 <= e.tokens; j += 4)
        expand_rows_tile<WDT, 4>(lat + int64_t(j) * r, r, w, e.N, e.out + int64_t(j) * e.N);
    for (; j < e.tokens; ++j) expand_rows_tile<WDT, 1>(lat + int64_t(j) * r, r, w, e.N, e.out + int64_t(j) * e.N);
}

template <int DT>
static void expand_latent(const ExpandItem& e) {
    if (e.w_bf16)
        expand_latent_with<DT, GQLA_DTYPE_BF16>(e);
    else
        expand_latent_gemm<DT>(e);
}

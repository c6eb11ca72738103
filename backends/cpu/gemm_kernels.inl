// SPDX-License-Identifier: Apache-2.0
// Register-tiled GEMMs (f32 or bf16 B) for the absorb projections and the expansion.
// Part of the kernel bodies every ISA unit includes through
// attention_kernels.inl (its conventions and non-finite rules hold here).

// ------------------------------------------------------------------ GEMM
// B in f32 or bf16 (DT), widened as it is loaded; f32 accumulation.
template <int DT, int MB, int NV>
static inline void gemm_tile(int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb, float* C,
                             int64_t ldc) {
    using V = Simd::V;
    constexpr int W = Simd::W;
    V acc[MB * NV];
    GQLA_UNROLL
    for (int i = 0; i < MB * NV; ++i) acc[i] = Simd::zero();
    for (int k = 0; k < K; ++k) {
        V bv[NV];
        GQLA_UNROLL
        for (int v = 0; v < NV; ++v) bv[v] = Elem<DT>::load(B + k * ldb + v * W);
        GQLA_UNROLL
        for (int m = 0; m < MB; ++m) {
            V ab = Simd::set1(A[m * lda + k]);
            GQLA_UNROLL
            for (int v = 0; v < NV; ++v) acc[m * NV + v] = Simd::fma(ab, bv[v], acc[m * NV + v]);
        }
    }
    GQLA_UNROLL
    for (int m = 0; m < MB; ++m) GQLA_UNROLL
    for (int v = 0; v < NV; ++v) Simd::store(C + m * ldc + v * W, acc[m * NV + v]);
}

template <int DT, int MB>
static inline void gemm_rows(int N, int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb,
                             float* C, int64_t ldc) {
    constexpr int W = Simd::W;
    constexpr int NV = Simd::kGemmVecs;
    int n = 0;
    // One row (a GEMV, as the decode projections are at batch 1): wide
    // passes, so each B row is read in long contiguous runs the hardware
    // prefetchers follow, instead of NV vectors per row and pass.
    if (MB == 1)
        for (; n + Simd::kGemvVecs * W <= N; n += Simd::kGemvVecs * W)
            gemm_tile<DT, 1, Simd::kGemvVecs>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n + NV * W <= N; n += NV * W) gemm_tile<DT, MB, NV>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n + W <= N; n += W) gemm_tile<DT, MB, 1>(K, A, lda, B + n, ldb, C + n, ldc);
    for (; n < N; ++n) GQLA_UNROLL
    for (int m = 0; m < MB; ++m) {
        float s = 0.0f;
        for (int k = 0; k < K; ++k) s += A[m * lda + k] * Elem<DT>::scalar(B + k * ldb + n);
        C[m * ldc + n] = s;
    }
}

template <int DT>
static void gemm_any(int M, int N, int K, const float* A, int64_t lda, const typename Elem<DT>::T* B, int64_t ldb,
                     float* C, int64_t ldc) {
    int m = 0;
    for (; m + 4 <= M; m += 4) gemm_rows<DT, 4>(N, K, A + m * lda, lda, B, ldb, C + m * ldc, ldc);
    for (; m < M; ++m) gemm_rows<DT, 1>(N, K, A + m * lda, lda, B, ldb, C + m * ldc, ldc);
}

// SPDX-License-Identifier: Apache-2.0
// The GQA_TRANSIENT up-projection (expansion_kernels.inl) with AVX512-BF16
// dot products: a bf16 cache's latent rows as stored against bf16 weights
// that hold W exactly (bf16 checkpoints), so every product is exact and
// only the f32 sums' order differs from the f32 GEMM that builds the kept
// expanded cache. Whole 32-dim chunks only; anything else takes the f32
// kernel. Included after attention_bf16_dot.inl, inside bf16dot.

template <int RB>
static inline void expand_rows_tile_bf16(const uint16_t* lat, int r, const uint16_t* w, int N, float* out) {
    const auto rows = run_rows(w, r);
    int n = 0;
    for (; n + 4 <= N; n += 4) score_tile<RB, 4, false>(lat, nullptr, r, 1.0f, rows.from(n), r, rows, 0, out + n, N);
    for (; n < N; ++n) score_tile<RB, 1, false>(lat, nullptr, r, 1.0f, rows.from(n), r, rows, 0, out + n, N);
}

static void expand_latent_bf16(const ExpandItem& e) {
    if (!e.w_bf16 || e.r % 32) {
        expand_latent<GQLA_DTYPE_BF16>(e);
        return;
    }
    const int r = e.r;
    uint16_t* lat = reinterpret_cast<uint16_t*>(e.scratch);  // [tokens][r] as stored
    for (int j = 0; j < e.tokens; ++j) __builtin_memcpy(lat + int64_t(j) * r, e.latent[j], size_t(r) * 2);
    const uint16_t* w = static_cast<const uint16_t*>(e.w);
    int j = 0;
    for (; j + 4 <= e.tokens; j += 4)
        expand_rows_tile_bf16<4>(lat + int64_t(j) * r, r, w, e.N, e.out + int64_t(j) * e.N);
    for (; j < e.tokens; ++j) expand_rows_tile_bf16<1>(lat + int64_t(j) * r, r, w, e.N, e.out + int64_t(j) * e.N);
}

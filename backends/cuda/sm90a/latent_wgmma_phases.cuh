// SPDX-License-Identifier: Apache-2.0
// The per-tile phases of the latent decode kernel (latent_wgmma_kernel.cu),
// each a device function with explicit parameters. WG0: the score product,
// the causal mask, the online softmax and P handed to the value warpgroups;
// WG1/WG2: the rescale and the value product. Both layouts: 64 query rows as
// the wgmma M, or (transposed, 32 rows) the tile's tokens and the latent
// columns as M.
#pragma once

#include <cstdint>

#include "latent_wgmma_tiles.cuh"

namespace gqla::cuda::latent {

// wgmma operand descriptors. WG0's score operands, K-major: Q and each
// stage's tile (a k-step only adds a constant to the start address field).
// WG1/WG2's value operands: P (or P^T) and their four 64-column latent atoms
// of each stage, read MN-major.
struct Operands {
    uint64_t q, k0, k1;
    uint64_t p, v0, v1;
};

// The descriptors of the CTA's shared memory; atom0: the first latent atom
// of WG1/WG2's value columns.
__device__ __forceinline__ Operands make_operands(const LatentShared& sh, int atom0) {
    static_assert(kStages == 2, "one descriptor per stage");
    Operands d;
    d.q = smem_desc_sw128(sh.q, 16, kSwizzleGroupBytes);
    d.k0 = smem_desc_sw128(sh.stages, 16, kSwizzleGroupBytes);
    d.k1 = smem_desc_sw128(sh.stages + kStageBytes, 16, kSwizzleGroupBytes);
    d.p = smem_desc_sw128(sh.p, 16, kSwizzleGroupBytes);
    d.v0 = smem_desc_sw128(sh.stages + atom0 * kAtomBytes, kAtomBytes, kSwizzleGroupBytes);
    d.v1 = smem_desc_sw128(sh.stages + kStageBytes + atom0 * kAtomBytes, kAtomBytes, kSwizzleGroupBytes);
    return d;
}

// ---- 64-row layout: S = Q K^T, O += P V, query rows as the wgmma M ----

// The online softmax of a thread's two rows r0, r1: running maxima (log2,
// scaled), partial sums over the thread's columns, and each row's last
// visible token.
struct RowState {
    float m0, m1, l0, l1;
    int lim0, lim1;
};

// WG0's softmax state before the first tile: the rows' limits from shared
// memory.
__device__ __forceinline__ RowState row_state(const int* sLimit, const Fragment& f) {
    return RowState{-INFINITY, -INFINITY, 0.f, 0.f, sLimit[f.r0], sLimit[f.r1]};
}

// WG0: S = Q K^T of the 64 rows and the tile's 64 tokens (36 x m64n64k16),
// completed.
template <typename T>
__device__ __forceinline__ void multiply_scores_rows(float (&s)[32], uint64_t q_desc, uint64_t k_desc) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeySteps; ++ks) {
        const uint32_t off = (ks >> 2) * kAtomBytes + (ks & 3) * 32;
        wgmma_m64n64k16<T>(s, desc_advance(q_desc, off), desc_advance(k_desc, off), ks != 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s);
}

// WG0, the causal tail: this warp's rows of the tile (kTileRows tokens,
// kTileRows / 4 a warp) scrubbed, and the warps' masks of those that had a
// non-finite value shared (double-buffered by tile: the tail's tiles are
// consecutive). Returns the tile's tokens 0-31 (x) and 32-63 (y) that had
// one.
template <typename T, int kTileRows = kLatentTile>
__device__ __forceinline__ uint2 share_tail_masks(unsigned char* stage, uint32_t* tail_mask, int tile, int first_hidden,
                                                  int length, int wi, int lane) {
    const uint32_t bad = scrub_tail_rows<T, kTileRows>(stage, tile, first_hidden, length, wi, lane);
    uint32_t* masks = tail_mask + (tile & 1) * 4;
    if (lane == 0) masks[wi] = bad;
    named_barrier_sync(kBarTailMask, kWgThreads);
    uint64_t all = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) all |= static_cast<uint64_t>(masks[k]) << (k * kTileRows / 4);
    return make_uint2(static_cast<uint32_t>(all), static_cast<uint32_t>(all >> 32));
}

// WG0: the causal/length mask only where the tile (first token `first`,
// 2N tokens: 64, or 32 for the 8-bit latent's half tiles) reaches past a
// row's last visible token.
template <int N>
__device__ __forceinline__ void mask_rows(float (&s)[N], const RowState& st, int first, int c_lane) {
    const int j_base = first + c_lane;
    if (first + 2 * N - 1 > min(st.lim0, st.lim1)) {
#pragma unroll
        for (int j = 0; j < N / 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int jj = j_base + 8 * j + e;
                if (jj > st.lim0) s[4 * j + e] = -INFINITY;
                if (jj > st.lim1) s[4 * j + 2 + e] = -INFINITY;
            }
    }
}

// Two probabilities as a pair of T.
template <typename T>
__device__ __forceinline__ uint32_t pack_two(float lo, float hi) {
    return pack_pair(lo, hi, static_cast<T*>(nullptr));
}

// WG0: the online softmax of the thread's two rows over the tile's 2N
// tokens (from token `first`) and their probabilities packed (pa[2j],
// pa[2j + 1]: rows r0, r1 at tokens 8j + c_lane + {0, 1}). Scores stay
// unscaled: the scale (> 0) goes into the row max and the exponent's fma.
// In the causal tail a row gets a NaN probability for a scrubbed token it
// may see (bad_lo / bad_hi: the tile's tokens 0-31 / 32-63). Returns the
// rows' rescale factors.
template <typename T, int N>
__device__ __forceinline__ float2 softmax_rows(const float (&s)[N], uint32_t (&pa)[N / 2], RowState& st, int first,
                                               int c_lane, float scale, bool tail, uint32_t bad_lo, uint32_t bad_hi) {
    const int j_base = first + c_lane;
    const float2 mx = fragment_row_max(s);
    const float n0 = fmaxf(st.m0, mx.x * scale), n1 = fmaxf(st.m1, mx.y * scale);
    const float alpha0 = n0 == -INFINITY ? 1.f : exp2_ftz(st.m0 - n0);
    const float alpha1 = n1 == -INFINITY ? 1.f : exp2_ftz(st.m1 - n1);
    st.m0 = n0;
    st.m1 = n1;
    const float b0 = n0 == -INFINITY ? 0.f : n0, b1 = n1 == -INFINITY ? 0.f : n1;  // exp2(-inf - 0) = 0
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        float e0 = exp2_ftz(fmaf(s[4 * j], scale, -b0)), e1 = exp2_ftz(fmaf(s[4 * j + 1], scale, -b0));
        float e2 = exp2_ftz(fmaf(s[4 * j + 2], scale, -b1)), e3 = exp2_ftz(fmaf(s[4 * j + 3], scale, -b1));
        sum0 += e0 + e1;
        sum1 += e2 + e3;
        if (tail) {  // scrubbed values rows r0 / r1 may see: tokens 8j + c_lane, + 1
            const uint32_t bits = ((j < 4 ? bad_lo : bad_hi) >> ((8 * j + c_lane) & 31)) & 3u;
            const int jj = j_base + 8 * j;
            if ((bits & 1) && jj <= st.lim0) e0 = quiet_nan();
            if ((bits & 2) && jj + 1 <= st.lim0) e1 = quiet_nan();
            if ((bits & 1) && jj <= st.lim1) e2 = quiet_nan();
            if ((bits & 2) && jj + 1 <= st.lim1) e3 = quiet_nan();
        }
        pa[2 * j] = pack_two<T>(e0, e1);
        pa[2 * j + 1] = pack_two<T>(e2, e3);
    }
    st.l0 = st.l0 * alpha0 + sum0;
    st.l1 = st.l1 * alpha1 + sum1;
    return make_float2(alpha0, alpha1);
}

// WG0: P (NP * 4 token columns from column `first_column`) and the rescale
// factors of a tile handed over, once the previous ones in their place were
// consumed (wait_free: there were such; barrier free_bar), announced on
// barrier ready_bar.
template <int NP>
__device__ __forceinline__ void hand_over_rows(unsigned char* sP, float* sScale, const uint32_t (&pa)[NP], float2 alpha,
                                               bool wait_free, const Fragment& f, int first_column = 0,
                                               int free_bar = kBarPFree, int ready_bar = kBarPReady) {
    if (wait_free) named_barrier_sync(free_bar, kLatentThreads);
#pragma unroll
    for (int j = 0; j < NP / 2; ++j) {
        const int c = first_column + 8 * j + f.c_lane;
        *reinterpret_cast<uint32_t*>(sP + swizzled_offset(f.r0, c >> 3) + (c & 7) * 2) = pa[2 * j];
        *reinterpret_cast<uint32_t*>(sP + swizzled_offset(f.r1, c >> 3) + (c & 7) * 2) = pa[2 * j + 1];
    }
    if ((f.lane & 3) == 0) {
        sScale[f.r0] = alpha.x;
        sScale[f.r1] = alpha.y;
    }
    fence_proxy_async_smem();
    named_barrier_arrive(ready_bar, kLatentThreads);
}

// WG1/WG2: the rows' rescale factors of the tile; true when the running
// max of some row of the warp moved.
__device__ __forceinline__ bool row_factors(float2& alpha, const float* sScale, const Fragment& f) {
    alpha = make_float2(sScale[f.r0], sScale[f.r1]);
    return __any_sync(0xffffffffu, alpha.x != 1.f || alpha.y != 1.f);
}

// WG1/WG2: O rescaled by the rows' factors.
__device__ __forceinline__ void rescale_rows(float (&o)[128], float2 alpha) {
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= (i & 2) ? alpha.y : alpha.x;
}

// WG1/WG2: O[:, 0:256] or O[:, 256:512] += P V of a tile of kTokens tokens,
// the latent tile read transposed as the value (kTokens / 16 x
// m64n256k16), issued; complete_values_rows waits for it.
template <typename T, int kTokens>
__device__ __forceinline__ void issue_values_rows(float (&o)[128], uint64_t p_desc, uint64_t v_desc) {
    fence_accumulators(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTokens / 16; ++kk) {
        wgmma_m64n256k16_bt<T>(o, desc_advance(p_desc, kk * 32), desc_advance(v_desc, kk * 16 * kSwizzleRowBytes), 1);
    }
    wgmma_commit();
}
__device__ __forceinline__ void complete_values_rows(float (&o)[128]) {
    wgmma_wait<0>();
    fence_accumulators(o);
}
// The same over a whole tile, completed.
template <typename T>
__device__ __forceinline__ void multiply_values_rows(float (&o)[128], uint64_t p_desc, uint64_t v_desc) {
    issue_values_rows<T, kLatentTile>(o, p_desc, v_desc);
    complete_values_rows(o);
}

// ---- Transposed layout (32 rows): S^T = K Q^T, O^T += V^T P^T ----
// r0 / r1 are a tile's token rows (scores) or latent columns (values) and
// a thread's query rows are the columns 8j + c_lane + e (j < 4, e < 2),
// index 2j + e of its arrays.

// The online softmax of a thread's 8 query rows: running maxima (log2,
// scaled), partial sums over the thread's tokens, each row's last visible
// token and the least of those.
struct ColumnState {
    float m[8], l[8];
    int lim[8], min_lim;
};

// WG0's softmax state before the first tile: each query row's limit from
// shared memory.
__device__ __forceinline__ ColumnState column_state(const int* sLimit, int c_lane) {
    ColumnState st;
    st.min_lim = INT32_MAX;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        st.m[i] = -INFINITY;
        st.l[i] = 0.f;
        st.lim[i] = sLimit[8 * (i >> 1) + c_lane + (i & 1)];
        st.min_lim = min(st.min_lim, st.lim[i]);
    }
    return st;
}

// WG0: S^T = K Q^T of the tile's 64 tokens and the 32 rows (36 x
// m64n32k16), completed.
template <typename T>
__device__ __forceinline__ void multiply_scores_columns(float (&s)[16], uint64_t k_desc, uint64_t q_desc) {
    constexpr int kQAtomBytes = LatentSmem<kLatentRowsTransposed>::kQAtomBytes;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeySteps; ++ks) {
        const uint32_t in_row = (ks & 3) * 32;
        wgmma_m64n32k16<T>(s, desc_advance(k_desc, (ks >> 2) * kAtomBytes + in_row),
                           desc_advance(q_desc, (ks >> 2) * kQAtomBytes + in_row), ks != 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s);
}

// WG0: tokens past a column's last visible one masked (only in a tile that
// reaches past some column's limit); t0: the token of row r0.
__device__ __forceinline__ void mask_columns(float (&s)[16], const ColumnState& st, int tile, int t0) {
    if (tile * kLatentTile + kLatentTile - 1 > st.min_lim) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int x = 4 * (i >> 1) + (i & 1);
            if (t0 > st.lim[i]) s[x] = -INFINITY;
            if (t0 + 8 > st.lim[i]) s[x + 2] = -INFINITY;
        }
    }
}

// WG0: column maxima over this thread's two tokens, the 8 lanes of its
// columns, then WG0's four warps through `red` (this tile's half of the
// double-buffered column maxima).
__device__ __forceinline__ void column_maxima(const float (&s)[16], float (&cm)[8], float* red, const Fragment& f) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int x = 4 * (i >> 1) + (i & 1);
        cm[i] = fmaxf(s[x], s[x + 2]);
    }
#pragma unroll
    for (int off = 4; off < 32; off <<= 1)
#pragma unroll
        for (int i = 0; i < 8; ++i) cm[i] = fmaxf(cm[i], __shfl_xor_sync(0xffffffffu, cm[i], off));
    if (f.lane < 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            *reinterpret_cast<float2*>(red + f.warp * 32 + 8 * j + f.c_lane) = make_float2(cm[2 * j], cm[2 * j + 1]);
    }
    named_barrier_sync(kBarColumnMax, kWgThreads);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int ww = 0; ww < 4; ++ww) {
            const float2 v = *reinterpret_cast<const float2*>(red + ww * 32 + 8 * j + f.c_lane);
            cm[2 * j] = ww ? fmaxf(cm[2 * j], v.x) : v.x;
            cm[2 * j + 1] = ww ? fmaxf(cm[2 * j + 1], v.y) : v.y;
        }
    }
}

// WG0: the online softmax down each column and P^T of rows r0 (pt[2j + e])
// and r1 (pt[8 + 2j + e]), with the columns' rescale factors. In the causal
// tail a column gets a NaN probability for a scrubbed token it may see
// (bad0 / bad1: tokens r0 / r1 had a non-finite value).
template <typename T>
__device__ __forceinline__ void softmax_columns(const float (&s)[16], const float (&cm)[8], ColumnState& st,
                                                float (&alpha)[8], T (&pt)[16], int t0, float scale, bool tail,
                                                bool bad0, bool bad1) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float n = fmaxf(st.m[i], cm[i] * scale);
        alpha[i] = n == -INFINITY ? 1.f : exp2_ftz(st.m[i] - n);
        st.m[i] = n;
        const float base = n == -INFINITY ? 0.f : n;  // exp2(-inf - 0) = 0
        const int x = 4 * (i >> 1) + (i & 1);
        float e0 = exp2_ftz(fmaf(s[x], scale, -base)), e1 = exp2_ftz(fmaf(s[x + 2], scale, -base));
        st.l[i] = st.l[i] * alpha[i] + (e0 + e1);
        if (tail) {  // a scrubbed value this column may see
            if (bad0 && t0 <= st.lim[i]) e0 = quiet_nan();
            if (bad1 && t0 + 8 <= st.lim[i]) e1 = quiet_nan();
        }
        pt[i] = from_float<T>(e0);
        pt[8 + i] = from_float<T>(e1);
    }
}

// WG0: P^T and the rescale factors of a tile handed over, once the previous
// ones were consumed (wait_free: there were previous ones). P^T is the
// values' B operand, K-major: query row c's 64 tokens are one 128-byte
// swizzled row.
template <typename T>
__device__ __forceinline__ void hand_over_columns(unsigned char* sP, float* sScale, const T (&pt)[16],
                                                  const float (&alpha)[8], bool wait_free, const Fragment& f) {
    if (wait_free) named_barrier_sync(kBarPFree, kLatentThreads);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int c = 8 * (i >> 1) + f.c_lane + (i & 1);
        *reinterpret_cast<T*>(sP + swizzled_offset(c, f.r0 >> 3) + (f.r0 & 7) * 2) = pt[i];
        *reinterpret_cast<T*>(sP + swizzled_offset(c, (f.r0 >> 3) + 1) + (f.r0 & 7) * 2) = pt[8 + i];
    }
    if (f.warp == 0 && f.lane < 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            *reinterpret_cast<float2*>(sScale + 8 * j + f.c_lane) = make_float2(alpha[2 * j], alpha[2 * j + 1]);
    }
    fence_proxy_async_smem();
    named_barrier_arrive(kBarPReady, kLatentThreads);
}

// WG1/WG2: the query rows' (columns') rescale factors of the tile; true
// when the running max of some column of the warp moved.
__device__ __forceinline__ bool column_factors(float (&alpha)[8], const float* sScale, int c_lane) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 v = *reinterpret_cast<const float2*>(sScale + 8 * j + c_lane);
        alpha[2 * j] = v.x;
        alpha[2 * j + 1] = v.y;
    }
    bool moved = false;
#pragma unroll
    for (int i = 0; i < 8; ++i) moved |= alpha[i] != 1.f;
    return __any_sync(0xffffffffu, moved);
}

// WG1/WG2: O^T rescaled by the columns' factors.
__device__ __forceinline__ void rescale_columns(float (&o)[4][16], const float (&alpha)[8]) {
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int x = 0; x < 16; ++x) o[a][x] *= alpha[2 * (x >> 2) + (x & 1)];
}

// WG1/WG2: O^T[256 latent columns of this warpgroup][32] += V^T P^T of the
// tile, four 64-column atoms read MN-major as A (4 x 4 m64n32k16),
// completed.
template <typename T>
__device__ __forceinline__ void multiply_values_columns(float (&o)[4][16], uint64_t p_desc, uint64_t v_desc) {
#pragma unroll
    for (int a = 0; a < 4; ++a) fence_accumulators(o[a]);
    wgmma_fence();
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int kk = 0; kk < kLatentTile / 16; ++kk)
            wgmma_m64n32k16_at<T>(o[a], desc_advance(v_desc, a * kAtomBytes + kk * 16 * kSwizzleRowBytes),
                                  desc_advance(p_desc, kk * 32), 1);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int a = 0; a < 4; ++a) fence_accumulators(o[a]);
}

}  // namespace gqla::cuda::latent

// SPDX-License-Identifier: Apache-2.0
// The phases of the tensor-core decode kernel (attention_mma_kernel.cuh),
// each a device function with explicit parameters: the query staging, the
// K/V tile copies, the score product, the online softmax, the scrub of hidden
// value rows, the value product and the epilogue. The kernel only orders them
// (stages, waits, CTA barriers).
#pragma once

#include "attention_common.cuh"
#include "attention_mma_layout.hpp"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"

namespace gqla::cuda::decode_mma {

// Query staging: the CTA's ROWS query rows -> sQ (any io dtype -> T), pad
// columns zero; each row's causal limit -> sLimit.
template <typename T, int ROWS, int NT>
__device__ __forceinline__ void stage_queries(const AttentionParams& p, const CtaWork& w, const MmaLayout& L, T* sQ,
                                              int* sLimit, int dk, int tid) {
    const int rb = w.rb, g = w.g, b = w.b, length = w.length;
    for (int i = tid; i < ROWS * L.dk16; i += NT) {
        int m = i / L.dk16, c = i - m * L.dk16;
        int mg = rb * ROWS + m;
        float v = 0.f;
        if (mg < p.rows && c < dk) {
            const auto [qi, h] = query_head(p, g, mg);
            v = load_elem(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + c);
        }
        sQ[m * L.k_stride + c] = from_float<T>(v);
    }
    for (int m = tid; m < ROWS; m += NT) {
        int mg = rb * ROWS + m;
        sLimit[m] = (mg < p.rows) ? length - p.q_len + mg / p.heads_per_group : length - 1;
    }
}

// Pad columns of every stage's key and value rows set to zero; cp.async
// never writes them.
template <typename T, int BN, int STAGES, int NT>
__device__ __forceinline__ void zero_tile_pads(const AttentionParams& p, const MmaLayout& L, T* sK, T* sV, int dk,
                                               int dv, int tid) {
    for (int i = tid; i < STAGES * BN * (L.dk16 - dk); i += NT) {
        int r = i / (L.dk16 - dk), c = dk + i % (L.dk16 - dk);
        sK[r * L.k_stride + c] = from_float<T>(0.f);
    }
    if (!p.v_aliases_k1) {
        for (int i = tid; i < STAGES * BN * (L.dv16 - dv); i += NT) {
            int r = i / (L.dv16 - dv), c = dv + i % (L.dv16 - dv);
            sV[r * L.v_stride + c] = from_float<T>(0.f);
        }
    }
}

// Token bases (page << 32 | slot) of this thread's rows of tile `tile`
// (rows tid / 8 + i * ROW_STEP); -1 past the split's tiles and past the end.
template <int BN, int RPT, int ROW_STEP>
__device__ __forceinline__ void fetch_tile_bases(const AttentionParams& p, const CtaWork& w, int tile,
                                                 int64_t (&tb)[RPT], int tid) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        int j = tile * BN + (tid >> 3) + i * ROW_STEP;
        tb[i] = (tile < w.range.end && j < w.length) ? cta_token(p, w, j) : -1;
    }
}

// Where a tile's rows are read from (attention_common.cuh).
template <typename T>
using TileSources = KvRowSources<T>;

// Tile copy into stage `stage` of sK and sV: this thread's rows from their
// token bases tb (-1: zero-filled), 8 threads x 16 bytes per row.
template <typename T, int BN, int RPT, int ROW_STEP>
__device__ __forceinline__ void copy_tile(const AttentionParams& p, const TileSources<T>& src, T* sK, T* sV, int stage,
                                          int k_stride, int vstride, const int64_t (&tb)[RPT], int g, int tid) {
    T* dK = sK + stage * BN * k_stride;
    T* dV = sV + stage * BN * vstride;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
        const int r = (tid >> 3) + i * ROW_STEP;
        const bool valid = tb[i] >= 0;
        const int64_t base = valid ? tb[i] : 0;
        const T* s1 = src.k1 + pool_offset(p.k1, base, g);
        for (int c = (tid & 7) * 8; c < src.dk1; c += 64)
            cp_async_16(dK + r * k_stride + c, valid ? s1 + c : src.k1, valid);
        if (src.dk2) {
            const T* s2 = src.k2 + pool_offset(p.k2, base, g);
            for (int c = (tid & 7) * 8; c < src.dk2; c += 64)
                cp_async_16(dK + r * k_stride + src.dk1 + c, valid ? s2 + c : src.k2, valid);
        }
        if (!p.v_aliases_k1) {
            const T* s3 = src.v + pool_offset(p.v, base, g);
            for (int c = (tid & 7) * 8; c < src.dv; c += 64)
                cp_async_16(dV + r * vstride + c, valid ? s3 + c : src.v, valid);
        }
    }
}

// Scores: S = Q K^T of tile `tile` (its keys in stage `stage` of sK), scaled
// to log2 units and causally masked, into sS; warps split (row tile, 16-token
// chunk) pairs.
template <typename T, int NW, int MR, int BN, int S_STRIDE>
__device__ __forceinline__ void tile_scores(const AttentionParams& p, const MmaLayout& L, const T* sQ, const T* sK,
                                            float* sS, const int* sLimit, int tile, int stage, int warp, int lane) {
    const T* tK = sK + stage * BN * L.k_stride;
    for (int pair = warp; pair < MR * (BN / 16); pair += NW) {
        const int rt = pair / (BN / 16), tc = pair % (BN / 16);
        // KSETS independent accumulator pairs over interleaved k-steps:
        // with one pair, the 36 k-steps of a 576-wide latent key were one
        // chain of dependent MMAs per tile (the absorb path's bound).
        constexpr int KSETS = 4;
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        float sk[KSETS - 1][2][4] = {};
        const T* qrow = sQ + (rt * 16 + (lane & 15)) * L.k_stride + (lane >> 4) * 8;
        const T* krow = tK + (tc * 16 + (lane & 7) + ((lane >> 4) << 3)) * L.k_stride + ((lane >> 3) & 1) * 8;
        int kk = 0;
        for (; kk + 16 * KSETS <= L.dk16; kk += 16 * KSETS) {
#pragma unroll
            for (int k = 0; k < KSETS; ++k) {
                uint32_t a[4], bk[4];
                ldmatrix_x4(a, qrow + kk + 16 * k);
                ldmatrix_x4(bk, krow + kk + 16 * k);
                float(*acc)[4] = k == 0 ? s : sk[k - 1];
                mma_16816<T>(acc[0], a, bk[0], bk[1]);
                mma_16816<T>(acc[1], a, bk[2], bk[3]);
            }
        }
        for (; kk < L.dk16; kk += 16) {
            uint32_t a[4], bk[4];
            ldmatrix_x4(a, qrow + kk);
            ldmatrix_x4(bk, krow + kk);
            mma_16816<T>(s[0], a, bk[0], bk[1]);
            mma_16816<T>(s[1], a, bk[2], bk[3]);
        }
#pragma unroll
        for (int k = 0; k < KSETS - 1; ++k)
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] += sk[k][n][e];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int row = rt * 16 + (lane >> 2) + (e >> 1) * 8;
                int col = tc * 16 + n * 8 + (lane & 3) * 2 + (e & 1);
                int j = tile * BN + col;
                sS[row * S_STRIDE + col] = (j <= sLimit[row]) ? s[n][e] * p.scale_log2 : -INFINITY;
            }
    }
}

// Online softmax of one of the tile's rows (smax_row, TPR threads a row, this
// thread's columns smax_sub + k * TPR): probabilities -> sP, the factor the
// row's outputs so far are rescaled by -> sAlpha; run_m, run_l updated.
template <typename T, int BN, int TPR, int S_STRIDE, int P_STRIDE>
__device__ __forceinline__ void tile_softmax(const float* sS, T* sP, float* sAlpha, float& run_m, float& run_l,
                                             int smax_row, int smax_sub) {
    const float* srow = sS + smax_row * S_STRIDE;
    float mx = -INFINITY;
#pragma unroll
    for (int c = smax_sub; c < BN; c += TPR) mx = fmaxf(mx, srow[c]);
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float m_new = fmaxf(run_m, mx);
    float alpha = (m_new == -INFINITY) ? 1.f : exp2_ftz(run_m - m_new);
    float sum = 0.f;
    T* prow = sP + smax_row * P_STRIDE;
#pragma unroll
    for (int c = smax_sub; c < BN; c += TPR) {
        float e = softmax_weight(srow[c], m_new);
        sum += e;
        prow[c] = from_float<T>(e);
    }
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    run_l = run_l * alpha + sum;
    run_m = m_new;
    if (smax_sub == 0) sAlpha[smax_row] = alpha;
}

// Scrub of the tile's hidden tokens (some row may not see them: past the
// first row's limit, the earliest; loaded: before the end): their value rows
// scrubbed (a few rows per warp), and each row that may see a scrubbed token
// gets probability NaN for it. Ends with a CTA barrier when there are any.
template <typename T, int NW, int BN, int ROWS, int P_STRIDE>
__device__ __forceinline__ void scrub_hidden_tokens(T* tV, T* sP, const int* sLimit, int vstride, int dv, int tile,
                                                    int length, int warp, int lane) {
    const int tile_first = tile * BN;
    const int hidden_begin = max(tile_first, sLimit[0] + 1), hidden_end = min(tile_first + BN, length);
    if (hidden_begin < hidden_end) {
        const int per_warp = (hidden_end - hidden_begin + NW - 1) / NW;
        const int r0 = hidden_begin - tile_first + warp * per_warp;
        const int rows_here = min(per_warp, hidden_end - tile_first - r0);
        if (rows_here > 0) {
            uint32_t bad = scrub_rows(tV + r0 * vstride, SmemRows{vstride, false}, rows_here, dv, lane);
            for (; bad; bad &= bad - 1) {
                const int col = r0 + __ffs(bad) - 1, j = tile_first + col;
                for (int r = lane; r < ROWS; r += 32)
                    if (j <= sLimit[r]) sP[r * P_STRIDE + col] = from_float<T>(quiet_nan());
            }
        }
        __syncthreads();
    }
}

// P V: this warp's outputs (row tile pv_rt, 16-column chunks pv_wc + i * WPR)
// rescaled by their rows' alpha, then the tile's probabilities times its
// values added.
template <typename T, int BN, int WPR, int MAX_NC, int P_STRIDE>
__device__ __forceinline__ void accumulate_values(float (&acc)[MAX_NC][2][4], const T* sP, const T* tV,
                                                  const float* sAlpha, int vstride, int v_chunks, int pv_rt, int pv_wc,
                                                  int lane) {
    const float a0 = sAlpha[pv_rt * 16 + (lane >> 2)], a1 = sAlpha[pv_rt * 16 + (lane >> 2) + 8];
#pragma unroll
    for (int i = 0; i < MAX_NC; ++i)
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            acc[i][n][0] *= a0;
            acc[i][n][1] *= a0;
            acc[i][n][2] *= a1;
            acc[i][n][3] *= a1;
        }
    const T* prow = sP + (pv_rt * 16 + (lane & 15)) * P_STRIDE + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < BN; kk += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, prow + kk);
        const T* vrow = tV + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * vstride + (lane >> 4) * 8;
#pragma unroll
        for (int i = 0; i < MAX_NC; ++i) {
            const int chunk = pv_wc + i * WPR;
            if (chunk < v_chunks) {
                uint32_t bv[4];
                ldmatrix_x4_trans(bv, vrow + chunk * 16);
                mma_16816<T>(acc[i][0], a, bv[0], bv[1]);
                mma_16816<T>(acc[i][1], a, bv[2], bv[3]);
            }
        }
    }
}

// Epilogue: normalized rows (+ lse) to o, or to the split partials.
template <int ROWS, int NT, int WPR, int MAX_NC>
__device__ __forceinline__ void write_rows(const AttentionParams& p, const CtaWork& w, const float (&acc)[MAX_NC][2][4],
                                           const float* sFinalM, const float* sFinalL, int dv, int v_chunks, int pv_rt,
                                           int pv_wc, int tid) {
    const int rb = w.rb, g = w.g, b = w.b, split = w.split;
    const int lane = tid & 31;
#pragma unroll
    for (int i = 0; i < MAX_NC; ++i) {
        const int chunk = pv_wc + i * WPR;
        if (chunk >= v_chunks) continue;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int row = pv_rt * 16 + (lane >> 2) + (e >> 1) * 8;
                int col = chunk * 16 + n * 8 + (lane & 3) * 2 + (e & 1);
                int mg = rb * ROWS + row;
                if (mg >= p.rows || col >= dv) continue;
                float l = sFinalL[row];
                const auto [qi, h] = query_head(p, g, mg);
                write_output(p, split, b, qi, h, col, normalized(acc[i][n][e], l));
            }
    }
    for (int m = tid; m < ROWS; m += NT) {
        int mg = rb * ROWS + m;
        if (mg >= p.rows) continue;
        const auto [qi, h] = query_head(p, g, mg);
        write_row_lse(p, split, b, qi, h, sFinalM[m], sFinalL[m]);
    }
}

}  // namespace gqla::cuda::decode_mma

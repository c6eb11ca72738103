// SPDX-License-Identifier: Apache-2.0
// Split-KV flash decoding on tensor cores (mma.sync m16n8k16, bf16/f16).
//
// One CTA = one sequence x one group x one block of ROWS = 16*MR query rows
// (the n_rep heads x s_q tokens sharing the group's K/V, or MR*16 of the H
// absorb heads sharing the latent) x one split of the tokens. K/V tiles of BN
// tokens are read once per CTA with 16-byte cp.async through the page table,
// STAGES tiles in flight, so every group's cache crosses DRAM once per row
// block. Page ids are fetched one tile ahead of the copies that use them:
// otherwise each tile pays the page-table load latency before its data load.
//   S = Q K^T      warps split (row tile, 16-token chunk) pairs
//   softmax        online, f32, log2 domain, TPR threads per row
//   O += P V       warps split (row tile, 16-column chunks) of O, in registers
// In the tiles of a sequence's causal tail (tokens the earlier queries may
// not see) the value rows are scrubbed between the softmax and P V, see
// nonfinite.cuh.
#pragma once

#include "attention_common.cuh"
#include "attention_mma_layout.hpp"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"

namespace gqla::cuda {

template <typename T, int NW, int MR, int BN, int STAGES, int MAX_NC>
__global__ void __launch_bounds__(NW * 32) attention_mma_kernel(const __grid_constant__ AttentionParams p) {
    constexpr int ROWS = MR * 16;
    constexpr int NT = NW * 32;
    constexpr int TPR = NT / ROWS;  // softmax threads per row
    constexpr int WPR = NW / MR;    // PV warps per row tile
    constexpr int S_STRIDE = BN + 4;
    constexpr int P_STRIDE = BN + 8;
    constexpr int ROW_STEP = NT / 8;    // tile rows loaded per pass (8 threads x 16 B per row)
    constexpr int RPT = BN / ROW_STEP;  // rows each thread loads per tile
    static_assert(NT % ROWS == 0 && 32 % TPR == 0 && NW % MR == 0 && BN % ROW_STEP == 0, "bad tiling");

    extern __shared__ __align__(128) unsigned char smem[];
    const MmaLayout L = mma_layout(p.k1.dim + p.k2.dim, p.v.dim, p.v_aliases_k1 != 0, ROWS, BN, STAGES);
    T* sQ = reinterpret_cast<T*>(smem + L.q_off);
    T* sK = reinterpret_cast<T*>(smem + L.k_off);
    T* sV = reinterpret_cast<T*>(smem + L.v_off);
    float* sS = reinterpret_cast<float*>(smem + L.s_off);
    T* sP = reinterpret_cast<T*>(smem + L.p_off);
    int* sLimit = reinterpret_cast<int*>(smem + L.f_off);
    float* sAlpha = reinterpret_cast<float*>(sLimit + ROWS);
    float* sFinalM = sAlpha + ROWS;
    float* sFinalL = sFinalM + ROWS;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const CtaWork w = cta_work(p, ROWS, BN);
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const SplitRange range = w.range;
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = dk1 + dk2, dv = p.v.dim;
    const int vstride = L.v_stride;

    // Queries -> smem (any io dtype -> T), zero padding; causal limits.
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
    // Pad columns of both stages stay zero (cp.async never writes them).
    for (int i = tid; i < STAGES * BN * (L.dk16 - dk); i += NT) {
        int r = i / (L.dk16 - dk), c = dk + i % (L.dk16 - dk);
        sK[r * L.k_stride + c] = from_float<T>(0.f);
    }
    if (!p.v_aliases_k1) {
        for (int i = tid; i < STAGES * BN * (L.dv16 - dv); i += NT) {
            int r = i / (L.dv16 - dv), c = dv + i % (L.dv16 - dv);
            sV[r * vstride + c] = from_float<T>(0.f);
        }
    }

    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    // Token bases (page << 32 | slot) of this thread's rows of a tile; -1 past the end.
    auto fetch_bases = [&](int tile, int64_t tb[RPT]) {
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            int j = tile * BN + (tid >> 3) + i * ROW_STEP;
            tb[i] = (tile < range.end && j < length) ? cta_token(p, w, j) : -1;
        }
    };
    auto issue_tile = [&](int stage, const int64_t tb[RPT]) {
        T* dK = sK + stage * BN * L.k_stride;
        T* dV = sV + stage * BN * vstride;
#pragma unroll
        for (int i = 0; i < RPT; ++i) {
            const int r = (tid >> 3) + i * ROW_STEP;
            const bool valid = tb[i] >= 0;
            const int64_t base = valid ? tb[i] : 0;
            const T* s1 = k1 + pool_offset(p.k1, base, g);
            for (int c = (tid & 7) * 8; c < dk1; c += 64)
                cp_async_16(dK + r * L.k_stride + c, valid ? s1 + c : k1, valid);
            if (dk2) {
                const T* s2 = k2 + pool_offset(p.k2, base, g);
                for (int c = (tid & 7) * 8; c < dk2; c += 64)
                    cp_async_16(dK + r * L.k_stride + dk1 + c, valid ? s2 + c : k2, valid);
            }
            if (!p.v_aliases_k1) {
                const T* s3 = vb + pool_offset(p.v, base, g);
                for (int c = (tid & 7) * 8; c < dv; c += 64)
                    cp_async_16(dV + r * vstride + c, valid ? s3 + c : vb, valid);
            }
        }
    };

    float acc[MAX_NC][2][4];
#pragma unroll
    for (int i = 0; i < MAX_NC; ++i)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][n][e] = 0.f;
    float run_m = -INFINITY, run_l = 0.f;  // owned by the softmax threads of a row
    const int smax_row = tid / TPR, smax_sub = tid % TPR;
    const int pv_rt = warp % MR, pv_wc = warp / MR;
    const int v_chunks = L.dv16 / 16;

    int64_t tb_next[RPT];
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
        fetch_bases(range.begin + st, tb_next);
        issue_tile(st, tb_next);
        cp_async_commit();
    }
    fetch_bases(range.begin + STAGES - 1, tb_next);
    for (int tile = range.begin; tile < range.end; ++tile) {
        const int stage = (tile - range.begin) % STAGES;
        // The stage refilled here was consumed in the previous iteration.
        if (tile + STAGES - 1 < range.end) issue_tile((tile - range.begin + STAGES - 1) % STAGES, tb_next);
        cp_async_commit();
        fetch_bases(tile + STAGES, tb_next);
        cp_async_wait<STAGES - 1>();
        __syncthreads();
        const T* tK = sK + stage * BN * L.k_stride;
        T* tV = sV + stage * BN * vstride;

        // S = Q K^T, scaled to log2 units, causal mask.
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
        __syncthreads();

        // Online softmax of the tile's rows.
        {
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
        __syncthreads();

        // Tokens of the tile some row may not see (past the first row's
        // limit, the earliest; loaded: before the end): their value rows
        // scrubbed (a few rows per warp), and each row that may see a
        // scrubbed token gets probability NaN for it.
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

        // O = alpha * O + P V.
        {
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
        __syncthreads();
    }
    cp_async_wait<0>();

    if (smax_sub == 0) {
        sFinalM[smax_row] = run_m;
        sFinalL[smax_row] = run_l;
    }
    __syncthreads();

    // Epilogue: normalized rows (+ lse) to o, or to the split partials.
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

}  // namespace gqla::cuda

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

#include "attention_mma_phases.cuh"

namespace gqla::cuda {

template <typename T, int NW, int MR, int BN, int STAGES, int MAX_NC>
__global__ void __launch_bounds__(NW * 32) attention_mma_kernel(const __grid_constant__ AttentionParams p) {
    using namespace decode_mma;
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
    const int length = w.length;
    const SplitRange range = w.range;
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = dk1 + dk2, dv = p.v.dim;
    const int vstride = L.v_stride;

    stage_queries<T, ROWS, NT>(p, w, L, sQ, sLimit, dk, tid);
    zero_tile_pads<T, BN, STAGES, NT>(p, L, sK, sV, dk, dv, tid);

    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    const TileSources<T> src{k1, k2, vb, dk1, dk2, dv};

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
        fetch_tile_bases<BN, RPT, ROW_STEP>(p, w, range.begin + st, tb_next, tid);
        copy_tile<T, BN, RPT, ROW_STEP>(p, src, sK, sV, st, L.k_stride, vstride, tb_next, w.g, tid);
        cp_async_commit();
    }
    fetch_tile_bases<BN, RPT, ROW_STEP>(p, w, range.begin + STAGES - 1, tb_next, tid);
    for (int tile = range.begin; tile < range.end; ++tile) {
        const int stage = (tile - range.begin) % STAGES;
        // The stage refilled here was consumed in the previous iteration.
        if (tile + STAGES - 1 < range.end)
            copy_tile<T, BN, RPT, ROW_STEP>(p, src, sK, sV, (tile - range.begin + STAGES - 1) % STAGES, L.k_stride,
                                            vstride, tb_next, w.g, tid);
        cp_async_commit();
        fetch_tile_bases<BN, RPT, ROW_STEP>(p, w, tile + STAGES, tb_next, tid);
        cp_async_wait<STAGES - 1>();
        __syncthreads();
        T* tV = sV + stage * BN * vstride;

        // S = Q K^T, scaled to log2 units, causal mask.
        tile_scores<T, NW, MR, BN, S_STRIDE>(p, L, sQ, sK, sS, sLimit, tile, stage, warp, lane);
        __syncthreads();

        // Online softmax of the tile's rows.
        tile_softmax<T, BN, TPR, S_STRIDE, P_STRIDE>(sS, sP, sAlpha, run_m, run_l, smax_row, smax_sub);
        __syncthreads();

        scrub_hidden_tokens<T, NW, BN, ROWS, P_STRIDE>(tV, sP, sLimit, vstride, dv, tile, length, warp, lane);

        // O = alpha * O + P V.
        accumulate_values<T, BN, WPR, MAX_NC, P_STRIDE>(acc, sP, tV, sAlpha, vstride, v_chunks, pv_rt, pv_wc, lane);
        __syncthreads();
    }
    cp_async_wait<0>();

    if (smax_sub == 0) {
        sFinalM[smax_row] = run_m;
        sFinalL[smax_row] = run_l;
    }
    __syncthreads();

    // Epilogue: normalized rows (+ lse) to o, or to the split partials.
    write_rows<ROWS, NT, WPR, MAX_NC>(p, w, acc, sFinalM, sFinalL, dv, v_chunks, pv_rt, pv_wc, tid);
}

}  // namespace gqla::cuda

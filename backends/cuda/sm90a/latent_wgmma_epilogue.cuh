// SPDX-License-Identifier: Apache-2.0
// The epilogues of the latent decode kernel (latent_wgmma_kernel.cu): WG0's
// row max / sum and lse, WG1/WG2's normalised rows to o, to the split's
// partial rows or to shared memory, and the cluster merge of a row block's
// splits through distributed shared memory.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "latent_wgmma_phases.cuh"

namespace gqla::cuda::latent {

// The splits of this row block are the CTAs of the cluster (rank = split);
// each holds its rows normalised in sO [64][kStagedRowFloats] and their log2
// max / sum in sMax / sSum. Every thread of every CTA calls this: the CTA of
// rank r merges rows r, r + splits, ... into p.o and p.lse. sW: 64 x
// kMaxLatentClusterSplits floats and sOff: 64 int64 of scratch. A merge
// that loaded every split's max and sum for each element (as the narrow
// kernel's once did) took 4-16 us longer on the H200 at H=32, B=64 (64 x 512
// elements a row block; the narrow kernel has 8 x 128), so here the weights
// and output offsets are computed once per row, and each thread merges 8
// columns at a time. (The narrow kernel's push merge, cluster_merge.cuh,
// would need the 128 KiB of a row block's partials in a second buffer.)
template <int kRows>
__device__ __forceinline__ void merge_split_rows(const AttentionParams& p, int rb, int g, int b, const float* sO,
                                                 const float* sMax, const float* sSum, float* sW, int64_t* sOff) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's rows staged and visible cluster-wide
    const int splits = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
    const int rows = min(kRows, p.rows - rb * kRows);
    const int mine = rows > rank ? (rows - rank + splits - 1) / splits : 0;  // rows rank + splits * k
    // Per row: each split's weight exp2(m_s - max) l_s over their sum, the lse
    // and where the row goes in o.
    for (int k = threadIdx.x; k < mine; k += blockDim.x) {
        const int m = rank + k * splits;
        float ms[kMaxLatentClusterSplits], ls[kMaxLatentClusterSplits], mx = -INFINITY;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            if (sp < splits) {
                ms[sp] = *cluster.map_shared_rank(sMax + m, sp);
                ls[sp] = *cluster.map_shared_rank(sSum + m, sp);
                mx = fmaxf(mx, ms[sp]);
            }
        }
        float sum = 0.f;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            // A split that saw no token (sum 0) weighs 0; NaN sums stay NaN.
            const float wgt = sp < splits && ls[sp] != 0.f ? exp2f(ms[sp] - mx) * ls[sp] : 0.f;
            sW[k * kMaxLatentClusterSplits + sp] = wgt;
            sum += wgt;
        }
        const float inv = sum == 0.f ? 0.f : 1.f / sum;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) sW[k * kMaxLatentClusterSplits + sp] *= inv;
        const QueryHead r = query_head(p, g, rb * kRows + m);
        sOff[k] = row_offset(p.oa, b, r.qi, r.h);
        if (p.lse) p.lse[lse_index(p, b, r.qi, r.h)] = sum == 0.f ? -INFINITY : (mx + log2f(sum)) * kLn2;
    }
    named_barrier_sync(kBarMerge, kLatentThreads);  // the roles call this from different places
    constexpr int kPieces = kLatentDim / 8;
    for (int e = threadIdx.x; e < mine * kPieces; e += blockDim.x) {
        const int k = e / kPieces, c = (e - k * kPieces) * 8, m = rank + k * splits;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            if (sp < splits) {
                const float wgt = sW[k * kMaxLatentClusterSplits + sp];
                const float4* src =
                    reinterpret_cast<const float4*>(cluster.map_shared_rank(sO + m * kStagedRowFloats + c, sp));
                const float4 lo = src[0], hi = src[1];
                acc[0] = fmaf(wgt, lo.x, acc[0]);
                acc[1] = fmaf(wgt, lo.y, acc[1]);
                acc[2] = fmaf(wgt, lo.z, acc[2]);
                acc[3] = fmaf(wgt, lo.w, acc[3]);
                acc[4] = fmaf(wgt, hi.x, acc[4]);
                acc[5] = fmaf(wgt, hi.y, acc[5]);
                acc[6] = fmaf(wgt, hi.z, acc[6]);
                acc[7] = fmaf(wgt, hi.w, acc[7]);
            }
        }
        store_elems8(p.o, p.o_dtype, sOff[k] + c, 8, acc);
    }
    cluster.sync();  // no CTA leaves while others still read its shared memory
#endif
}

// The transposed kernel's epilogue without a cluster merge: row block rb's
// rows, normalised in sO [rows][kStagedRowFloats], go to o or to the
// split's partial rows, 8 columns a thread, coalesced. Every thread calls
// this.
__device__ __forceinline__ void store_staged_rows(const AttentionParams& p, int rb, int g, int b, int split,
                                                  const float* sO) {
    named_barrier_sync(kBarMerge, kLatentThreads);  // the roles call this from different places
    constexpr int kPieces = kLatentDim / 8;
    const int rows = min(kLatentRowsTransposed, p.rows - rb * kLatentRowsTransposed);
    for (int e = threadIdx.x; e < rows * kPieces; e += blockDim.x) {
        const int m = e / kPieces, c = (e - m * kPieces) * 8;
        const float4 lo = *reinterpret_cast<const float4*>(sO + m * kStagedRowFloats + c);
        const float4 hi = *reinterpret_cast<const float4*>(sO + m * kStagedRowFloats + c + 4);
        const QueryHead r = query_head(p, g, rb * kLatentRowsTransposed + m);
        if (p.num_splits > 1) {
            float4* dst = reinterpret_cast<float4*>(p.part_o + partial_row(p, split, b, r.qi, r.h) * p.v.dim + c);
            dst[0] = lo;
            dst[1] = hi;
        } else {
            const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            store_elems8(p.o, p.o_dtype, row_offset(p.oa, b, r.qi, r.h) + c, 8, v);
        }
    }
}

// WG0's end (64-row layout): row sums over the 4 lanes of a row; WG0's
// softmax state is the CTA's. Row max / sum go to shared memory for WG1/WG2,
// then the cluster merge or each row's lse.
__device__ __forceinline__ void finish_score_rows(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                  RowState& st, const Fragment& f) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        st.l0 += __shfl_xor_sync(0xffffffffu, st.l0, off);
        st.l1 += __shfl_xor_sync(0xffffffffu, st.l1, off);
    }
    float* sMax = sh.row_max;
    float* sSum = sh.row_sum;
    if ((f.lane & 3) == 0) {
        sMax[f.r0] = st.m0;
        sMax[f.r1] = st.m1;
        sSum[f.r0] = st.l0;
        sSum[f.r1] = st.l1;
    }
    named_barrier_sync(kBarEnd, kLatentThreads);  // row max / sum visible
    if (p.cluster_merge) {
        merge_split_rows<kLatentRows>(p, w.rb, w.g, w.b, reinterpret_cast<float*>(sh.stages), sMax, sSum,
                                      reinterpret_cast<float*>(sh.stages + kMergeScratchOff),
                                      reinterpret_cast<int64_t*>(sh.stages + kMergeOffsetsOff));
        return;
    }
    const int mg0 = w.rb * kLatentRows + f.r0, mg1 = w.rb * kLatentRows + f.r1;
    if ((f.lane & 3) == 0) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int mg = half ? mg1 : mg0;
            if (mg >= p.rows) continue;
            const QueryHead r = query_head(p, w.g, mg);
            write_row_lse(p, w.split, w.b, r.qi, r.h, half ? st.m1 : st.m0, half ? st.l1 : st.l0);
        }
    }
}

// WG1/WG2's end (64-row layout), once every product is done and WG0's row
// sums are visible: the normalised columns atom0 * 64 .. + 255 of rows r0
// and r1 to o, to the split's partial rows, or (cluster merge) to shared
// memory, where the cluster's CTAs read them.
__device__ __forceinline__ void write_value_rows(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                 const float (&o)[128], const Fragment& f, int atom0) {
    const float* sSum = sh.row_sum;
    const float L0 = sSum[f.r0], L1 = sSum[f.r1];
    const float inv0 = L0 == 0.f ? 0.f : 1.f / L0, inv1 = L1 == 0.f ? 0.f : 1.f / L1;
    const int c0 = atom0 * 64 + f.c_lane;
    if (!p.cluster_merge) {
        // Each thread stores its fragment's column pairs of rows r0 and r1
        // (32-byte pieces of 8 rows per warp store) to o or the split's
        // partial rows, with each row's address computed once.
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int mg = w.rb * kLatentRows + (half ? f.r1 : f.r0);
            if (mg >= p.rows) continue;
            const QueryHead r = query_head(p, w.g, mg);
            const float inv = half ? inv1 : inv0;
            if (p.num_splits > 1) {
                float* dst = p.part_o + partial_row(p, w.split, w.b, r.qi, r.h) * p.v.dim + c0;
#pragma unroll
                for (int j = 0; j < 32; ++j)
                    *reinterpret_cast<float2*>(dst + 8 * j) =
                        make_float2(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
            } else {
                const int64_t dst = row_offset(p.oa, w.b, r.qi, r.h) + c0;
#pragma unroll
                for (int j = 0; j < 32; ++j)
                    store_pair(p.o, p.o_dtype, dst + 8 * j, o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
            }
        }
        return;
    }
    // Cluster merge: normalised rows through shared memory (the stages are
    // free now).
    float* sO = reinterpret_cast<float*>(sh.stages);  // [64][kStagedRowFloats]
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int c = c0 + 8 * j;
        *reinterpret_cast<float2*>(sO + f.r0 * kStagedRowFloats + c) =
            make_float2(o[4 * j] * inv0, o[4 * j + 1] * inv0);
        *reinterpret_cast<float2*>(sO + f.r1 * kStagedRowFloats + c) =
            make_float2(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
    }
    merge_split_rows<kLatentRows>(p, w.rb, w.g, w.b, sO, sh.row_max, sSum,
                                  reinterpret_cast<float*>(sh.stages + kMergeScratchOff),
                                  reinterpret_cast<int64_t*>(sh.stages + kMergeOffsetsOff));
}

// WG0's end (transposed layout): column sums over this thread's lanes, then
// the warps; each query row's max / sum to shared memory and its lse, then
// the cluster merge or the coalesced store of the rows WG1/WG2 staged.
__device__ __forceinline__ void finish_score_columns(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                     ColumnState& st, const Fragment& f) {
    constexpr int kRows = kLatentRowsTransposed;
    float* sColumnSum = sh.column_max + 2 * 4 * 32;
#pragma unroll
    for (int off = 4; off < 32; off <<= 1)
#pragma unroll
        for (int i = 0; i < 8; ++i) st.l[i] += __shfl_xor_sync(0xffffffffu, st.l[i], off);
    if (f.lane < 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            *reinterpret_cast<float2*>(sColumnSum + f.warp * 32 + 8 * j + f.c_lane) =
                make_float2(st.l[2 * j], st.l[2 * j + 1]);
    }
    named_barrier_sync(kBarColumnMax, kWgThreads);
    float* sMax = sh.row_max;
    float* sSum = sh.row_sum;
    if (f.warp == 0 && f.lane < 4) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int c = 8 * (i >> 1) + f.c_lane + (i & 1);
            const float sum = sColumnSum[c] + sColumnSum[32 + c] + sColumnSum[64 + c] + sColumnSum[96 + c];
            sMax[c] = st.m[i];
            sSum[c] = sum;
            if (!p.cluster_merge && w.rb * kRows + c < p.rows) {
                const QueryHead r = query_head(p, w.g, w.rb * kRows + c);
                write_row_lse(p, w.split, w.b, r.qi, r.h, st.m[i], sum);
            }
        }
    }
    named_barrier_sync(kBarEnd, kLatentThreads);  // column max / sum visible
    if (p.cluster_merge)
        merge_split_rows<kRows>(p, w.rb, w.g, w.b, reinterpret_cast<float*>(sh.stages), sMax, sSum,
                                reinterpret_cast<float*>(sh.stages + kMergeScratchOff),
                                reinterpret_cast<int64_t*>(sh.stages + kMergeOffsetsOff));
    else
        store_staged_rows(p, w.rb, w.g, w.b, w.split, reinterpret_cast<float*>(sh.stages));
}

// WG1/WG2's end (transposed layout), once every product is done and WG0's
// column sums are visible: the normalised rows [query row][latent column]
// into the freed stages, where the cluster merge or the coalesced store
// reads them.
__device__ __forceinline__ void write_value_columns(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                    const float (&o)[4][16], const Fragment& f, int atom0) {
    constexpr int kRows = kLatentRowsTransposed;
    const float* sSum = sh.row_sum;
    float inv[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float sum = sSum[8 * (i >> 1) + f.c_lane + (i & 1)];
        inv[i] = sum == 0.f ? 0.f : 1.f / sum;
    }
    float* sO = reinterpret_cast<float*>(sh.stages);  // [rows][kStagedRowFloats]
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        const int col = (atom0 + a) * 64 + f.r0;
#pragma unroll
        for (int x = 0; x < 16; ++x) {
            const int i = 2 * (x >> 2) + (x & 1), c = 8 * (x >> 2) + f.c_lane + (x & 1);
            sO[c * kStagedRowFloats + col + ((x & 2) ? 8 : 0)] = o[a][x] * inv[i];
        }
    }
    if (p.cluster_merge)
        merge_split_rows<kRows>(p, w.rb, w.g, w.b, sO, sh.row_max, sSum,
                                reinterpret_cast<float*>(sh.stages + kMergeScratchOff),
                                reinterpret_cast<int64_t*>(sh.stages + kMergeOffsetsOff));
    else
        store_staged_rows(p, w.rb, w.g, w.b, w.split, sO);
}

}  // namespace gqla::cuda::latent

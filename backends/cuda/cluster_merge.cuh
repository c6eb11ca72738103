// Split-KV merge inside a thread-block cluster (compute capability 9.0+).
//
// When the splits of one row block are the CTAs of one cluster (cluster
// dims (1, 1, splits), so a CTA's cluster rank is its split), each CTA keeps
// its partial result in its own shared memory and the cluster merges them
// through distributed shared memory: no partial rows go to global memory and
// no combine pass follows. At batch 1 and a short context (GQA 32/8, T =
// 1024: 16 one-tile splits) the combine pass is a fifth of the step: its
// launch, the attention grid's completion and a global round trip of the
// partials all sit on the critical path, where the cluster needs two
// cluster barriers and a few hundred cycles of remote loads.
#pragma once

#include <cooperative_groups.h>

#include "attention_common.cuh"
#include "attention_kernels.hpp"

namespace gqla::cuda {

// Every CTA of the cluster calls this with its partial: o (rows x o_stride
// f32, not normalised, scaled to the CTA's row maxima), row maxima m (log2
// units, -inf where the split saw no token) and row sums l, all in its own
// shared memory and complete. Writes the merged rows to p.o at out[r] + c
// (element offsets, the same in every CTA of the cluster) and, where p.lse
// is set, row r's natural-log lse at p.lse[lse_at(r)]. Every thread of every
// CTA of the cluster must call it (cluster barriers).
template <typename LseAt>
__device__ __forceinline__ void merge_splits_in_cluster(const AttentionParams& p, int rows, int dv, int o_stride,
                                                        const float* o, const float* m, const float* l,
                                                        const int64_t* out, LseAt lse_at) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's partial written and visible cluster-wide
    const int splits = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    // 32-element runs of the row block's rows x dv outputs, dealt round-robin
    // over the cluster's CTAs and their warps: every SM of the cluster issues
    // remote loads, and each warp's stores are consecutive columns.
    const int total = rows * dv;
    for (int run = (threadIdx.x >> 5) * splits + rank; run * 32 < total; run += warps * splits) {
        const int e = run * 32 + lane;
        if (e >= total) break;
        const int r = e / dv, c = e - r * dv;
        float ms[kMaxClusterSplits], ls[kMaxClusterSplits], os[kMaxClusterSplits];
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) {
            if (s < splits) {  // all loads first: one remote latency
                ms[s] = *cluster.map_shared_rank(m + r, s);
                ls[s] = *cluster.map_shared_rank(l + r, s);
                os[s] = *cluster.map_shared_rank(o + r * o_stride + c, s);
            }
        }
        float mx = -INFINITY;
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s)
            if (s < splits) mx = fmaxf(mx, ms[s]);
        float sum = 0.f, acc = 0.f;
        if (mx != -INFINITY) {
#pragma unroll
            for (int s = 0; s < kMaxClusterSplits; ++s) {
                if (s < splits && ms[s] != -INFINITY) {
                    const float w = exp2f(ms[s] - mx);
                    sum = fmaf(w, ls[s], sum);
                    acc = fmaf(w, os[s], acc);
                }
            }
        }
        store_elem(p.o, p.o_dtype, out[r] + c, sum > 0.f ? acc / sum : 0.f);
        if (c == 0 && p.lse) p.lse[lse_at(r)] = sum > 0.f ? (mx + log2f(sum)) * kLn2 : -INFINITY;
    }
    cluster.sync();  // no CTA leaves while others still read its shared memory
#endif
}

}  // namespace gqla::cuda

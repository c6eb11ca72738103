// SPDX-License-Identifier: Apache-2.0
// Split-KV merge of the narrow kernel inside a thread-block cluster
// (compute capability 9.0+).
//
// When the splits of one row block are the CTAs of one cluster (cluster
// dims (1, 1, splits), so a CTA's cluster rank is its split), no partial
// rows go to global memory and no combine pass follows. At batch 1 and a
// short context (GQA 32/8, T = 1024: 16 one-tile splits) the combine pass
// was a fifth of the step: its launch, the attention grid's completion and
// a global round trip of the partials all sat on the critical path.
//
// The merge pushes rather than pulls. Each CTA owns a slice of the row
// block's rows x dv outputs; when a CTA's partial is ready it stores every
// owner's slice of it, with its row maxima and sums, into that owner's
// shared memory (st.async), and those stores complete on the owner's merge
// barrier. An owner waits for its bytes only, then merges from its own
// shared memory. Pulling (a cluster barrier, remote loads of every split's
// partial, and a closing cluster barrier so no CTA leaves while others
// read it) put two cluster-wide waits and a remote round trip between the
// last split's end and the output: 2.7 us of an 8.2 us step at T = 1024.
//
// Protocol: at its start a CTA initialises its merge barrier, expects its
// bytes on it and arrives (relaxed) on the cluster barrier; before its
// first push it waits on that cluster barrier, so every owner's barrier is
// initialised by then. A CTA may leave once its pushes are issued: nobody
// reads its shared memory, and an owner leaves only after all its bytes
// have arrived.
#pragma once

#include <cooperative_groups.h>

#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "nonfinite.cuh"
#include "tma_primitives.cuh"

namespace gqla::cuda {

// How a row block's rows x dv outputs are dealt to the cluster's CTAs:
// consecutive slices of `chunk` elements (row-major), and each owner's
// buffer: per split a packet of the rows' maxima, their sums, then the
// split's values of the slice: at most splits x (2 rows + ceil(rows x dv /
// splits)) floats, which kNarrowClusterMergeFloats bounds.
struct ClusterSlices {
    int splits, rank, total, chunk, packet;  // packet: floats per split
    __device__ int begin(int owner) const { return min(total, owner * chunk); }
    __device__ int size(int owner) const { return min(total, (owner + 1) * chunk) - begin(owner); }
};

__device__ __forceinline__ ClusterSlices cluster_slices(int rows, int dv) {
    namespace cg = cooperative_groups;
    ClusterSlices s;
    s.splits = static_cast<int>(cg::this_cluster().num_blocks());
    s.rank = static_cast<int>(cg::this_cluster().block_rank());
    s.total = rows * dv;
    s.chunk = (s.total + s.splits - 1) / s.splits;
    s.packet = 2 * rows + s.chunk;
    return s;
}

// The merge region (kNarrowClusterMergeBytes at a 16-byte aligned `region`):
// the barrier, then the buffer.
__device__ __forceinline__ uint64_t* merge_barrier(unsigned char* region) {
    return reinterpret_cast<uint64_t*>(region);
}
__device__ __forceinline__ float* merge_buffer(unsigned char* region) { return reinterpret_cast<float*>(region + 16); }

// At the kernel's start, by every thread (a cluster barrier arrival).
__device__ __forceinline__ void cluster_merge_begin(unsigned char* region, int rows, int dv) {
    if (threadIdx.x == 0) {
        const ClusterSlices s = cluster_slices(rows, dv);
        const int mine = s.size(s.rank);
        uint64_t* bar = merge_barrier(region);
        mbarrier_init(bar, 1);
        mbarrier_init_fence();
        if (mine > 0) mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(s.splits * (2 * rows + mine) * 4));
    }
    cluster_arrive_relaxed();
}

// Every thread of every CTA of the cluster calls this with the CTA's
// partial complete in its own shared memory (after a CTA barrier): o (rows
// x o_stride f32, not normalised, scaled to the CTA's row maxima), row
// maxima m (log2 units, -inf where the split saw no token) and row sums l.
// Writes the merged rows to p.o at out[r] + c (element offsets, the same in
// every CTA of the cluster) and, where p.lse is set, row r's natural-log
// lse at p.lse[lse_at(r)].
template <typename LseAt>
__device__ __forceinline__ void merge_splits_in_cluster(const AttentionParams& p, unsigned char* region, int rows,
                                                        int dv, int o_stride, const float* o, const float* m,
                                                        const float* l, const int64_t* out, LseAt lse_at) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const ClusterSlices s = cluster_slices(rows, dv);
    uint64_t* bar = merge_barrier(region);
    float* buf = merge_buffer(region);
    const uint32_t bar_local = smem_addr(bar),
                   buf_local = smem_addr(buf) + 4u * static_cast<uint32_t>(s.rank * s.packet);
    cluster_wait();  // every owner's barrier initialised
    const int tid = threadIdx.x, nt = blockDim.x;
    // This split's maxima and sums to every owner of a slice...
    for (int i = tid; i < s.splits * 2 * rows; i += nt) {
        const int owner = i / (2 * rows), j = i - owner * 2 * rows;
        if (s.size(owner) == 0) continue;
        st_async_f32(cluster_map(buf_local + 4u * j, owner), j < rows ? m[j] : l[j - rows],
                     cluster_map(bar_local, owner));
    }
    // ...and its values of each owner's slice.
    for (int e = tid; e < s.total; e += nt) {
        const int owner = e / s.chunk, r = e / dv, c = e - r * dv;
        st_async_f32(cluster_map(buf_local + 4u * (2 * rows + e - s.begin(owner)), owner), o[r * o_stride + c],
                     cluster_map(bar_local, owner));
    }
    const int mine = s.size(s.rank), first = s.begin(s.rank);
    if (mine == 0) return;
    mbarrier_wait_cluster(bar, 0);
    for (int i = tid; i < mine; i += nt) {
        const int e = first + i, r = e / dv, c = e - r * dv;
        float mx = -INFINITY;
        for (int sp = 0; sp < s.splits; ++sp) mx = fmaxf(mx, buf[sp * s.packet + r]);
        // A split that saw no token (sum 0) is left out; a NaN sum (a NaN
        // score, even under a max of -inf) or value reaches the output.
        float sum = 0.f, acc = 0.f;
        for (int sp = 0; sp < s.splits; ++sp) {
            const float* packet = buf + sp * s.packet;
            if (packet[rows + r] == 0.f) continue;
            const float w = exp2f(packet[r] - mx);
            sum = fmaf(w, packet[rows + r], sum);
            acc = fmaf(w, packet[2 * rows + i], acc);
        }
        store_elem(p.o, p.o_dtype, out[r] + c, normalized(acc, sum));
        if (c == 0 && p.lse) p.lse[lse_at(r)] = sum == 0.f ? -INFINITY : (mx + log2f(sum)) * kLn2;
    }
#endif
}

}  // namespace gqla::cuda

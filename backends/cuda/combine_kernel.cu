// SPDX-License-Identifier: Apache-2.0
// Merges the split partials of each (sequence, query token, head) row:
// o = sum_s w_s o_s / sum_s w_s with w_s = 2^(lse2_s - max), and the row's
// natural-log lse.
// One thread per (row, kVec output columns). Each thread reads the row's
// split lse values itself (the row's threads share them through L1) in the
// same batch as its partial outputs, merging batch by batch with a running
// maximum, so a batch of kBatch splits costs one memory latency: no lse
// pass, no shared memory, no block barrier. Many rows (the absorb path's
// 2048 x 512 columns at batch 64) take 16-byte vectors; few rows (batch 1)
// take one column per thread, so more SMs issue loads. (Many rows come with
// few splits: the planner splits only where the batch leaves SMs idle.)
// A CTA-per-row version with a separate lse pass and scalar loads took 13 us
// for that absorb case (12 MB, ~3 us of traffic).
//
// On compute capability 9.0+ the pass is launched as a programmatic
// dependent of the attention kernel: its CTAs are scheduled while the
// attention kernel's last CTAs still run and wait in griddepcontrol.wait
// (which returns once that grid has completed and its writes are visible),
// so the launch latency between the two kernels is hidden.
//
// Non-finite partials: a split that saw no token (lse2 -inf, values 0)
// weighs 0; a NaN lse2 or value reaches the merged output (and a NaN lse2
// the lse), also where every split's lse2 is NaN or -inf.
#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "cuda_status.hpp"
#include "launch_config.hpp"

namespace gqla::cuda {

namespace {

constexpr int kThreads = 256;
// Below this many 4-column items per launch (~2 waves of CTAs on an H200),
// one column per thread.
constexpr int64_t kMinVectorItems = 65536;

// Offset of row (b, qi)'s lse entries (b, qi unfolded as row_offset does).
__device__ __forceinline__ int64_t lse_row(const CombineParams& p, int b, int qi) {
    unfold_query(p.oa.fold, b, qi);
    return b * p.lse_sB + qi * p.lse_sQ;
}

template <int kVec>
__device__ __forceinline__ void load_vec(const float* src, float (&v)[kVec]) {
    if constexpr (kVec == 4) {
        const float4 x = *reinterpret_cast<const float4*>(src);
        v[0] = x.x;
        v[1] = x.y;
        v[2] = x.z;
        v[3] = x.w;
    } else {
        v[0] = *src;
    }
}

template <int kVec, int kBatch>
__global__ void __launch_bounds__(kThreads, kVec == 4 ? 4 : 2) combine_kernel(const __grid_constant__ CombineParams p) {
    grid_dependency_wait();
    const int vecs_per_row = p.dv / kVec;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t rows = static_cast<int64_t>(p.batch) * p.q_len * p.num_heads;
    if (item >= rows * vecs_per_row) return;
    const int row = static_cast<int>(item / vecs_per_row);  // (bl, qi, h) of this launch
    const int c = static_cast<int>(item - static_cast<int64_t>(row) * vecs_per_row) * kVec;
    const int h = row % p.num_heads, qi = (row / p.num_heads) % p.q_len, bl = row / (p.num_heads * p.q_len);
    const int b = p.batch_offset + bl;
    const int64_t split_stride = static_cast<int64_t>(p.part_batch) * p.q_len * p.num_heads;
    const int64_t base_row = (static_cast<int64_t>(b) * p.q_len + qi) * p.num_heads + h;
    const float* lse2 = p.part_lse2 + base_row;
    const float* col = p.part_o + base_row * p.dv + c;
    const int64_t split_elems = split_stride * p.dv;

    float mx = -INFINITY, sum = 0.f, acc[kVec] = {};
    for (int s0 = 0; s0 < p.num_splits; s0 += kBatch) {
        float l[kBatch], x[kBatch][kVec];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const bool in = s0 + j < p.num_splits;
            l[j] = in ? lse2[(s0 + j) * split_stride] : -INFINITY;
#pragma unroll
            for (int e = 0; e < kVec; ++e) x[j][e] = 0.f;
            if (in) load_vec<kVec>(col + (s0 + j) * split_elems, x[j]);
        }
        float m = mx;
#pragma unroll
        for (int j = 0; j < kBatch; ++j) m = fmaxf(m, l[j]);  // drops NaN: their weights below are NaN
        if (m != mx) {                                        // the max moved (from -inf: rescale by 0)
            const float rescale = exp2f(mx - m);
            sum *= rescale;
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[e] *= rescale;
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const float w = l[j] == -INFINITY ? 0.f : exp2f(l[j] - m);  // empty splits hold 0 (weight 0)
            sum += w;
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[e] = fmaf(w, x[j][e], acc[e]);
        }
        mx = m;
    }
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    const int64_t out = row_offset(p.oa, b, qi, h) + c;
#pragma unroll
    for (int e = 0; e < kVec; ++e) store_elem(p.o, p.o_dtype, out + e, acc[e] * inv);
    if (c == 0 && p.lse) p.lse[lse_row(p, b, qi) + h * p.lse_sH] = sum == 0.f ? -INFINITY : (mx + log2f(sum)) * kLn2;
}

template <int kVec, int kBatch>
void launch(const CombineParams& p, int64_t items, bool dependent, cudaStream_t stream) {
    LaunchAttrs attrs;
    cudaLaunchConfig_t cfg = make_launch_config(dim3(static_cast<unsigned>((items + kThreads - 1) / kThreads)),
                                                dim3(kThreads), 0, false, dependent, attrs);
    cfg.stream = stream;
    check_cuda(cudaLaunchKernelEx(&cfg, combine_kernel<kVec, kBatch>, p), "launch combine_kernel");
}

}  // namespace

void launch_combine(const CombineParams& p, bool dependent, cudaStream_t stream) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.q_len * p.num_heads;
    // Partial rows start at multiples of dv floats: 16-byte vectors need dv % 4 == 0.
    if (p.dv % 4 == 0 && rows * (p.dv / 4) >= kMinVectorItems) launch<4, 4>(p, rows * (p.dv / 4), dependent, stream);
    // Few splits (the usual case where the batch nearly fills the GPU) take a
    // batch their size: the loop is unrolled for kBatch splits.
    else if (p.num_splits <= 4)
        launch<1, 4>(p, rows * p.dv, dependent, stream);
    else if (p.num_splits <= 8)
        launch<1, 8>(p, rows * p.dv, dependent, stream);
    else
        launch<1, 16>(p, rows * p.dv, dependent, stream);
}

}  // namespace gqla::cuda

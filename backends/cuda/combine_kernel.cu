// Merges the split partials of each (sequence, query token, head) row:
// o = sum_s w_s o_s / sum_s w_s with w_s = 2^(lse2_s - max), and the row's
// natural-log lse. One CTA per row; splits are few (<= kMaxSplits).
#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

__global__ void __launch_bounds__(128) combine_kernel(const __grid_constant__ CombineParams p) {
    __shared__ float weight[kMaxSplits];
    __shared__ float total;
    const int row = blockIdx.x;  // (bl, qi, h) of this launch
    const int h = row % p.num_heads, qi = (row / p.num_heads) % p.q_len, bl = row / (p.num_heads * p.q_len);
    const int b = p.batch_offset + bl;
    const int64_t split_stride = static_cast<int64_t>(p.part_batch) * p.q_len * p.num_heads;
    const int64_t base_row = (static_cast<int64_t>(b) * p.q_len + qi) * p.num_heads + h;

    if (threadIdx.x < 32) {
        float mx = -INFINITY;
        for (int s = threadIdx.x; s < p.num_splits; s += 32) mx = fmaxf(mx, p.part_lse2[s * split_stride + base_row]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.f;
        for (int s = threadIdx.x; s < p.num_splits; s += 32) {
            float l2 = p.part_lse2[s * split_stride + base_row];
            float w = (l2 == -INFINITY) ? 0.f : exp2f(l2 - mx);
            weight[s] = w;
            sum += w;
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (threadIdx.x == 0) {
            total = sum;
            if (p.lse) p.lse[b * p.lse_sB + qi * p.lse_sQ + h * p.lse_sH] = (sum > 0.f) ? (mx + log2f(sum)) * kLn2 : -INFINITY;
        }
    }
    __syncthreads();
    const float inv = total > 0.f ? 1.f / total : 0.f;
    const int64_t out = row_offset(p.oa, b, qi, h);
    // Loads of kBatch splits are issued before any is used: one at a time,
    // a single sequence's 40-odd splits cost as many global-memory latencies
    // in a row (~20 us at B=1, T=32768).
    constexpr int kBatch = 16;
    const float* col0 = p.part_o + base_row * p.dv;
    const int64_t split_elems = split_stride * p.dv;
    for (int c = threadIdx.x; c < p.dv; c += blockDim.x) {
        float acc = 0.f;
        int s = 0;
        for (; s + kBatch <= p.num_splits; s += kBatch) {
            float x[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) x[j] = col0[(s + j) * split_elems + c];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) acc = fmaf(weight[s + j], x[j], acc);  // empty splits hold 0 (weight 0)
        }
        for (; s < p.num_splits; ++s) acc = fmaf(weight[s], col0[s * split_elems + c], acc);
        store_elem(p.o, p.o_dtype, out + c, acc * inv);
    }
}

}  // namespace

void launch_combine(const CombineParams& p, cudaStream_t stream) {
    combine_kernel<<<p.batch * p.q_len * p.num_heads, 128, 0, stream>>>(p);
    check_launch("combine_kernel");
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// Scalar f32 split-KV decode: the exact path for the f32 cache and the
// fallback for dims the tensor-core kernel does not take (not multiples of 8,
// values wider than 512). Same split/partial protocol as the MMA kernel, so
// the combine kernel serves both. Rows: kSimtRows per CTA, tiles of
// kSimtTile tokens; everything in shared memory, f32 throughout. The P V
// sums stop at each row's last visible token, so a masked position's value
// (a NaN or Inf, see nonfinite.cuh) never meets its zero probability.
#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "cuda_status.hpp"
#include "nonfinite.cuh"

namespace gqla::cuda {

namespace {

constexpr int kThreads = 128;

struct SimtLayout {
    int k_stride, v_stride, q_off, k_off, v_off, s_off, o_off, f_off, bytes;
};

__host__ __device__ inline SimtLayout simt_layout(int dk, int dv, bool alias) {
    SimtLayout L{};
    L.k_stride = dk + 1;  // odd stride: threads reading different tokens hit different banks
    L.v_stride = alias ? L.k_stride : dv;
    int off = 0;
    L.q_off = off;
    off += kSimtRows * dk * 4;
    L.k_off = off;
    off += kSimtTile * L.k_stride * 4;
    L.v_off = alias ? L.k_off : off;
    if (!alias) off += kSimtTile * dv * 4;
    L.s_off = off;
    off += kSimtRows * kSimtTile * 4;
    L.o_off = off;
    off += kSimtRows * dv * 4;
    L.f_off = off;
    off += kSimtRows * 4 * 4;
    L.bytes = off;
    return L;
}

__global__ void __launch_bounds__(kThreads) attention_simt_kernel(const __grid_constant__ AttentionParams p) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = dk1 + dk2, dv = p.v.dim;
    const SimtLayout L = simt_layout(dk, dv, p.v_aliases_k1 != 0);
    float* sQ = reinterpret_cast<float*>(smem + L.q_off);
    float* sK = reinterpret_cast<float*>(smem + L.k_off);
    float* sV = reinterpret_cast<float*>(smem + L.v_off);
    float* sS = reinterpret_cast<float*>(smem + L.s_off);
    float* sO = reinterpret_cast<float*>(smem + L.o_off);
    int* sLimit = reinterpret_cast<int*>(smem + L.f_off);
    float* sAlpha = reinterpret_cast<float*>(sLimit + kSimtRows);
    float* sM = sAlpha + kSimtRows;
    float* sL = sM + kSimtRows;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const CtaWork w = cta_work(p, kSimtRows, kSimtTile);
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const SplitRange range = w.range;
    const int cache_dtype = p.cache_dtype;

    for (int i = tid; i < kSimtRows * dk; i += kThreads) {
        int m = i / dk, c = i % dk, mg = rb * kSimtRows + m;
        float v = 0.f;
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, g, mg);
            v = load_elem(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + c);
        }
        sQ[i] = v;
    }
    for (int i = tid; i < kSimtRows * dv; i += kThreads) sO[i] = 0.f;
    if (tid < kSimtRows) {
        int mg = rb * kSimtRows + tid;
        sLimit[tid] = (mg < p.rows) ? length - p.q_len + mg / p.heads_per_group : length - 1;
        sM[tid] = -INFINITY;
        sL[tid] = 0.f;
    }

    for (int tile = range.begin; tile < range.end; ++tile) {
        __syncthreads();
        for (int i = tid; i < kSimtTile * dk; i += kThreads) {
            int r = i / dk, c = i % dk, j = tile * kSimtTile + r;
            float v = 0.f;
            if (j < length) {
                int64_t tb = cta_token(p, w, j);
                v = (c < dk1) ? load_elem(p.k1.base, cache_dtype, pool_offset(p.k1, tb, g) + c)
                              : load_elem(p.k2.base, cache_dtype, pool_offset(p.k2, tb, g) + c - dk1);
            }
            sK[r * L.k_stride + c] = v;
        }
        if (!p.v_aliases_k1) {
            for (int i = tid; i < kSimtTile * dv; i += kThreads) {
                int r = i / dv, c = i % dv, j = tile * kSimtTile + r;
                float v = 0.f;
                if (j < length) {
                    int64_t tb = cta_token(p, w, j);
                    v = load_elem(p.v.base, cache_dtype, pool_offset(p.v, tb, g) + c);
                }
                sV[r * L.v_stride + c] = v;
            }
        }
        __syncthreads();
        for (int i = tid; i < kSimtRows * kSimtTile; i += kThreads) {
            int m = i / kSimtTile, c = i % kSimtTile, j = tile * kSimtTile + c;
            const float* q = sQ + m * dk;
            const float* k = sK + c * L.k_stride;
            float s = 0.f;
            for (int d = 0; d < dk; ++d) s = fmaf(q[d], k[d], s);
            sS[i] = (j <= sLimit[m]) ? s * p.scale_log2 : -INFINITY;
        }
        __syncthreads();
        for (int m = warp; m < kSimtRows; m += kThreads / 32) {  // kSimtTile == 32: one lane per token
            float s = sS[m * kSimtTile + lane];
            float mx = s;
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_old = sM[m], m_new = fmaxf(m_old, mx);
            float alpha = (m_new == -INFINITY) ? 1.f : exp2_ftz(m_old - m_new);
            float e = softmax_weight(s, m_new);
            float sum = e;
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            sS[m * kSimtTile + lane] = e;
            __syncwarp();
            if (lane == 0) {
                sM[m] = m_new;
                sL[m] = sL[m] * alpha + sum;
                sAlpha[m] = alpha;
            }
        }
        __syncthreads();
        for (int i = tid; i < kSimtRows * dv; i += kThreads) {
            int m = i / dv, c = i % dv;
            float o = sO[i] * sAlpha[m];
            const float* pr = sS + m * kSimtTile;
            const int visible = min(kSimtTile, sLimit[m] - tile * kSimtTile + 1);
            for (int j = 0; j < visible; ++j) o = fmaf(pr[j], sV[j * L.v_stride + c], o);
            sO[i] = o;
        }
    }
    __syncthreads();
    for (int i = tid; i < kSimtRows * dv; i += kThreads) {
        int m = i / dv, c = i % dv, mg = rb * kSimtRows + m;
        if (mg >= p.rows) continue;
        const auto [qi, h] = query_head(p, g, mg);
        float l = sL[m];
        write_output(p, split, b, qi, h, c, normalized(sO[i], l));
    }
    if (tid < kSimtRows) {
        int mg = rb * kSimtRows + tid;
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, g, mg);
            write_row_lse(p, split, b, qi, h, sM[tid], sL[tid]);
        }
    }
}

}  // namespace

int simt_smem_bytes(const AttentionParams& p) {
    return simt_layout(p.k1.dim + p.k2.dim, p.v.dim, p.v_aliases_k1 != 0).bytes;
}

int simt_blocks_per_sm(int smem_bytes) {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, attention_simt_kernel, kThreads, smem_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor(simt)");
    return n;
}

void prepare_simt_kernel(int smem_optin) {
    check_cuda(cudaFuncSetAttribute(attention_simt_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin),
               "cudaFuncSetAttribute(attention_simt_kernel)");
}

void launch_attention_simt(const AttentionParams& p, dim3 grid, int smem_bytes, cudaStream_t stream) {
    attention_simt_kernel<<<grid, kThreads, smem_bytes, stream>>>(p);
    check_launch("attention_simt_kernel");
}

}  // namespace gqla::cuda

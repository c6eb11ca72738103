// SPDX-License-Identifier: Apache-2.0
// Instantiation (bf16, f16, e4m3 x pipeline depths) and launch glue of the
// per-warp decode kernel.
#include "attention_kernels.hpp"
#include "attention_warp_kernel.cuh"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

template <typename T, bool FP8 = false>
const void* warp_kernel_of(int stages) {
    switch (stages) {
        case 2:
            return reinterpret_cast<const void*>(&attention_warp_kernel<T, 2, FP8>);
        case 3:
            return reinterpret_cast<const void*>(&attention_warp_kernel<T, 3, FP8>);
        default:
            return reinterpret_cast<const void*>(&attention_warp_kernel<T, 4, FP8>);
    }
}
static_assert(kWarpKernelMinStages == kWarpStagesMin && kWarpKernelMaxStages == kWarpStagesMax && kWarpStagesMin == 2 &&
                  kWarpStagesMax == 4,
              "instantiate every depth above");

const void* warp_kernel(gqla_dtype cache, int stages) {
    if (cache == GQLA_DTYPE_FP8_E4M3) return warp_kernel_of<__half, true>(stages);
    return cache == GQLA_DTYPE_F16 ? warp_kernel_of<__half>(stages) : warp_kernel_of<__nv_bfloat16>(stages);
}

}  // namespace

bool warp_kernel_fits(const AttentionParams& p) {
    return p.rows <= 16 && p.v.dim <= kWarpKernelMaxDv && !p.v_aliases_k1;
}

bool warp_kernel_reads_fp8(const AttentionParams& p) {
    return p.k2.dim == 0 && p.k1.dim % 8 == 0 && p.v.dim % 8 == 0 && p.v.dim <= kWarpKernelMaxDv && !p.v_aliases_k1;
}

int warp_smem_bytes(const AttentionParams& p, int stages) {
    return warp_layout(p.k1.dim + p.k2.dim, p.v.dim, p.v_aliases_k1 != 0, stages, p.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        .bytes;
}

void prepare_warp_kernels(int smem_optin) {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16, GQLA_DTYPE_FP8_E4M3})
        for (int st = kWarpKernelMinStages; st <= kWarpKernelMaxStages; ++st)
            check_cuda(
                cudaFuncSetAttribute(warp_kernel(t, st), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin),
                "cudaFuncSetAttribute(attention_warp_kernel)");
}

int warp_blocks_per_sm(gqla_dtype cache, int stages, int smem_bytes) {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, warp_kernel(cache, stages), kWarpKernelWarps * 32,
                                                             smem_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor(warp)");
    return n;
}

void launch_attention_warp(gqla_dtype cache, int stages, const AttentionParams& p, dim3 grid, int smem_bytes,
                           cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(warp_kernel(cache, stages), grid, dim3(kWarpKernelWarps * 32), args,
                                static_cast<size_t>(smem_bytes), stream),
               "launch attention_warp_kernel");
}

}  // namespace gqla::cuda

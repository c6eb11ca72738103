// SPDX-License-Identifier: Apache-2.0
// Launch glue of the tensor-core decode variants (instantiated per dtype in
// attention_mma_bf16.cu / attention_mma_f16.cu so they compile in parallel).
#include "attention_kernels.hpp"
#include "attention_mma_layout.hpp"
#include "attention_mma_variants.hpp"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

const void* kernel_for(MmaVariant v, gqla_dtype cache) {
    return cache == GQLA_DTYPE_F16 ? mma_kernel_f16(v) : mma_kernel_bf16(v);
}

}  // namespace

MmaShape mma_shape(MmaVariant v) {
    switch (v) {
#define X(name, nw, mr, bn, st, nc) \
    case MmaVariant::name:          \
        return MmaShape{nw, mr, bn, st, (nw / mr) * nc * 16};
        GQLA_MMA_VARIANTS(X)
#undef X
    }
    return MmaShape{};
}

int mma_smem_bytes(MmaVariant v, const AttentionParams& p) {
    MmaShape s = mma_shape(v);
    return mma_layout(p.k1.dim + p.k2.dim, p.v.dim, p.v_aliases_k1 != 0, s.mr * 16, s.bn, s.stages).bytes;
}

void prepare_attention_kernels(int smem_optin) {
    for (int i = 0; i < kNumMmaVariants; ++i)
        for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
            check_cuda(cudaFuncSetAttribute(kernel_for(static_cast<MmaVariant>(i), t),
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin),
                       "cudaFuncSetAttribute(attention_mma_kernel)");
}

int mma_blocks_per_sm(MmaVariant v, gqla_dtype cache, int smem_bytes) {
    int n = 0;
    check_cuda(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_for(v, cache), mma_shape(v).warps * 32, smem_bytes),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return n;
}

void launch_attention_mma(MmaVariant v, gqla_dtype cache, const AttentionParams& p, dim3 grid, int smem_bytes,
                          cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(kernel_for(v, cache), grid, dim3(mma_shape(v).warps * 32), args,
                                static_cast<size_t>(smem_bytes), stream),
               "launch attention_mma_kernel");
}

}  // namespace gqla::cuda

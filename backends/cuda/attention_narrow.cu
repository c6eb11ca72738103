// Instantiation (bf16, f16 x ring sizes) and launch glue of the
// narrow-group decode kernel (<= 8 query rows per group).
#include "attention_kernels.hpp"
#include "attention_narrow_kernel.cuh"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

static_assert(kNarrowRows == kNarrowMaxRows && kNarrowTokens == kNarrowTile, "narrow kernel constants");
static_assert(kNarrowSlotsMin == 3 && kNarrowSlotsMax == 5, "instantiate every ring size below");

template <typename T, bool SWZ>
const void* narrow_kernel_of(int slots) {
    return slots == 3   ? reinterpret_cast<const void*>(&attention_narrow_kernel<T, 3, SWZ>)
           : slots == 4 ? reinterpret_cast<const void*>(&attention_narrow_kernel<T, 4, SWZ>)
                        : reinterpret_cast<const void*>(&attention_narrow_kernel<T, 5, SWZ>);
}

const void* narrow_kernel(gqla_dtype cache, int slots, bool swizzle) {
    if (cache == GQLA_DTYPE_F16)
        return swizzle ? narrow_kernel_of<__half, true>(slots) : narrow_kernel_of<__half, false>(slots);
    return swizzle ? narrow_kernel_of<__nv_bfloat16, true>(slots) : narrow_kernel_of<__nv_bfloat16, false>(slots);
}

}  // namespace

bool narrow_kernel_fits(const AttentionParams& p) {
    return p.rows <= kNarrowMaxRows && p.k1.dim + p.k2.dim <= kNarrowMaxDk && p.v.dim <= kNarrowMaxDv &&
           !p.v_aliases_k1;
}

bool narrow_can_swizzle(const AttentionParams& p) { return narrow_can_swizzle(p.k1.dim + p.k2.dim, p.v.dim); }

int narrow_smem_bytes(const AttentionParams& p, int slots, bool swizzle) {
    return narrow_layout(p.k1.dim + p.k2.dim, p.v.dim, slots, swizzle).bytes;
}

void prepare_narrow_kernels(int smem_optin) {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
        for (int st = kNarrowSlotsMin; st <= kNarrowSlotsMax; ++st)
            for (bool swizzle : {false, true})
                check_cuda(cudaFuncSetAttribute(narrow_kernel(t, st, swizzle),
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin),
                           "cudaFuncSetAttribute(attention_narrow_kernel)");
}

int narrow_blocks_per_sm(gqla_dtype cache, int slots, bool swizzle, int smem_bytes) {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, narrow_kernel(cache, slots, swizzle), kNarrowWarps * 32,
                                                             smem_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor(narrow)");
    return n;
}

void launch_attention_narrow(gqla_dtype cache, int slots, bool swizzle, const AttentionParams& p, dim3 grid, int smem_bytes,
                             cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(narrow_kernel(cache, slots, swizzle && narrow_can_swizzle(p)), grid, dim3(kNarrowWarps * 32), args,
                                static_cast<size_t>(smem_bytes), stream),
               "launch attention_narrow_kernel");
}

}  // namespace gqla::cuda

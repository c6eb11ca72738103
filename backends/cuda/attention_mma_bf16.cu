// SPDX-License-Identifier: Apache-2.0
// Tensor-core decode kernels instantiated for the bf16 cache.
#include "attention_mma_kernel.cuh"
#include "attention_mma_variants.hpp"

namespace gqla::cuda {

const void* mma_kernel_bf16(MmaVariant v) {
    switch (v) {
#define X(name, nw, mr, bn, st, nc) \
    case MmaVariant::name:          \
        return reinterpret_cast<const void*>(&attention_mma_kernel<__nv_bfloat16, nw, mr, bn, st, nc>);
        GQLA_MMA_VARIANTS(X)
#undef X
    }
    return nullptr;
}

}  // namespace gqla::cuda

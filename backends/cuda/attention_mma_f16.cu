// SPDX-License-Identifier: Apache-2.0
// Tensor-core decode kernels instantiated for the f16 cache.
#include "attention_mma_kernel.cuh"
#include "attention_mma_variants.hpp"

namespace gqla::cuda {

const void* mma_kernel_f16(MmaVariant v) {
    switch (v) {
#define X(name, nw, mr, bn, st, nc) \
    case MmaVariant::name:          \
        return reinterpret_cast<const void*>(&attention_mma_kernel<__half, nw, mr, bn, st, nc>);
        GQLA_MMA_VARIANTS(X)
#undef X
    }
    return nullptr;
}

}  // namespace gqla::cuda

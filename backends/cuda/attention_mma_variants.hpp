// SPDX-License-Identifier: Apache-2.0
// The tensor-core variants (warps, MR, BN, STAGES, MAX_NC), instantiated for
// bf16 and f16 only: six kernels keep the module's build time small.
//   Small : GQA decode, n_rep * s_q <= 16 rows, Dv <= 256; 2 CTAs/SM at D=128
//   Medium: up to 32 rows or values up to 512 wide
//   Large : 64 rows (absorb over many heads), values up to 512
#pragma once

#include "attention_kernels.hpp"

#define GQLA_MMA_VARIANTS(X)  \
    X(Small, 4, 1, 32, 4, 4)  \
    X(Medium, 8, 2, 32, 3, 8) \
    X(Large, 8, 4, 32, 3, 16)

namespace gqla::cuda {

const void* mma_kernel_bf16(MmaVariant v);
const void* mma_kernel_f16(MmaVariant v);

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// Reordering kernels around the absorb path's cuBLAS projections. The GEMMs
// run batched over groups, so queries and outputs live in group-major
// workspaces: row(g, b, qi, hi) = ((g*B + b)*s_q + qi)*n_rep + hi.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gqla::cuda {

struct AbsorbLayout {
    int32_t batch, q_len, num_heads, n_rep;
    int32_t nope_dim, rope_dim, latent_dim, value_dim;
};

// q [B, s_q, H, d_c + d_r] (strides in elements, any dtype) ->
//   q_nope [rows][d_c] and the rope columns [r, r + d_r) of q_att [rows][r + d_r],
//   both in `work_dtype` (f32, or the cache's 16-bit type for 16-bit projections).
void launch_absorb_pack_q(const AbsorbLayout& a, const void* q, int32_t q_dtype, const int64_t q_strides[3],
                          void* q_nope, void* q_att, int32_t work_dtype, cudaStream_t stream);

// o_proj [rows][d_v] (f32) -> o [B, s_q, H, d_v] (strides in elements, any dtype).
void launch_absorb_unpack_o(const AbsorbLayout& a, const float* o_proj, void* o, int32_t o_dtype,
                            const int64_t o_strides[3], cudaStream_t stream);

}  // namespace gqla::cuda

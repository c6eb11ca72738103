// SPDX-License-Identifier: Apache-2.0
// The operations behind the CPU vtable, one file each.
#pragma once

#include "backends/cpu/cpu_context.hpp"

namespace gqla::cpu {

// Writes appended rows into the cache (cache_writes.cpp): the GQA kind's K/V,
// or the GQLA latent and rope key (and the expanded rows where they are kept;
// a context without the latent expands each row and drops it).
gqla_status append_tokens(CpuContext* ctx, const gqla_append_args* args);
gqla_status expand_tokens(CpuContext* ctx, const gqla_expand_args* args);
gqla_status copy_pages(CpuContext* ctx, int32_t n, const int32_t* src, const int32_t* dst);
// Copies a sequence's kept rows out in the cache dtype (cache_reads.cpp).
gqla_status read_rows(CpuContext* ctx, const gqla_read_args* args);

// GQA kind and the GQLA GQA path over the kept expanded cache.
gqla_status decode_gqa_form(CpuContext* ctx, const gqla_decode_args* args);
// GQLA absorb path.
gqla_status decode_absorb(CpuContext* ctx, const gqla_decode_args* args);
// GQLA GQA form over latent rows up-projected for the call (args->transient).
gqla_status decode_gqa_transient(CpuContext* ctx, const gqla_decode_args* args);

// out[n][G*(d_c+d_v)] = latent[n][r] * W^T of one layer (oneDNN matmuls
// when built with it, else the kernel table's GEMM), on the context's pool
// (no OpenMP team: see expansion_gemm.cpp).
gqla_status expansion_gemm(CpuContext* ctx, const LayerWeights& w, int64_t n, const float* latent, float* out);
// Which f32 copy expansion_gemm reads: W^T (LayerWeights::wt, the kernel
// table's GEMM) or W (LayerWeights::w, oneDNN reads it as W^T by strides).
bool expansion_reads_wt();

// Fills the factors measured for the CPU kernels (see efficiency.cpp).
void efficiency(const gqla_backend_desc* desc, gqla_backend_efficiency* inout);

}  // namespace gqla::cpu

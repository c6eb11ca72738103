// SPDX-License-Identifier: Apache-2.0
// Compute-bound attention for many query rows per group (prefill chunks) on
// Hopper warpgroup MMAs (wgmma, sm_90a): the GQA kind and the GQLA GQA path
// (kept or transient expanded cache). A group's heads are folded with the
// query tokens into the rows of 128-row blocks (rows = heads per group x
// query tokens, head fastest), so each K/V tile is read once per block of
// 128 rows. Keys 128 or 192 wide (GQA head dim 128; [nope | rope] = 64 + 64
// or 128 + 64), values 128 wide, bf16/f16 caches; 8-bit (e4m3) GQA caches
// of 128-wide keys, widened into bf16 tiles as they stream. Built only when the module
// targets sm_90 (as sm_90a code); other shapes, dtypes and GPUs keep the
// mma.sync kernels. The kernel itself is described in
// sm90a/prefill_wgmma_kernel.cu.
#pragma once

#include <cuda_runtime.h>

#include "attention_kernels.hpp"  // NarrowTmaMaps
#include "attention_params.hpp"
#include "gqla/gqla.h"

namespace gqla::cuda {

constexpr int kPrefillRows = 128;  // query rows per CTA: two warpgroups of 64
constexpr int kPrefillTile = 128;  // tokens per K/V tile
// Fewest query tokens a launch needs before the planner takes this kernel:
// decode (s_q <= 8) keeps the streaming kernels it is tuned for.
constexpr int kPrefillMinQueries = 16;
// Groups of kPrefillHalfRows..kPrefillRows - 1 rows take the kernel too when
// they are that many query tokens of one or two heads (MLA-shaped chunks of
// 64-127 tokens): the second warpgroup's rows are partly or wholly padding,
// yet half-used 64-row MMAs still beat the streaming kernels, whose 8-row
// blocks each re-read the group's keys (DeepSeek-V3, s_q 64: docs/kernels.md).
constexpr int kPrefillHalfRows = 64;

#if GQLA_CUDA_HAS_SM90A
// True when a device of compute capability cc_major.cc_minor can run it
// (exactly 9.0: sm_90a code).
bool prefill_wgmma_available(int cc_major, int cc_minor);
// True when the launch's dims and dtype are ones the kernel is built for.
bool prefill_wgmma_fits(const AttentionParams& p);
// Dynamic shared memory for keys key_dim wide (128 or 192) in a `cache` pool.
int prefill_wgmma_smem_bytes(gqla_dtype cache, int key_dim);
// The most any variant of the kernel takes.
int prefill_wgmma_max_smem_bytes();
// Raises the kernels' shared-memory limit (where available).
void prepare_prefill_wgmma_kernels();
// grid = (groups x row blocks of kPrefillRows, sequences, splits). maps:
// the layer's TMA maps (the narrow kernel's, 16-row boxes), used for the
// tiles every row of a block sees when valid; turns: the consumer
// warpgroups take turns issuing their products.
void launch_prefill_wgmma(gqla_dtype cache, const AttentionParams& p, const NarrowTmaMaps& maps, bool turns, dim3 grid,
                          cudaStream_t stream);
#else
inline bool prefill_wgmma_available(int, int) { return false; }
inline bool prefill_wgmma_fits(const AttentionParams&) { return false; }
inline int prefill_wgmma_smem_bytes(gqla_dtype, int) { return 0; }
inline int prefill_wgmma_max_smem_bytes() { return 0; }
inline void prepare_prefill_wgmma_kernels() {}
inline void launch_prefill_wgmma(gqla_dtype, const AttentionParams&, const NarrowTmaMaps&, bool, dim3, cudaStream_t) {}
#endif

}  // namespace gqla::cuda

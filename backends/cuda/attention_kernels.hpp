// SPDX-License-Identifier: Apache-2.0
// Host-side entry points of the decode kernels (attention, split combine).
// Plans (which variant, how many splits) live in decode_plan.*; these only
// know how to launch a given variant.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain struct: nothing links libcuda)
#include <cuda_runtime.h>

#include "attention_params.hpp"
#include "gqla/gqla.h"

namespace gqla::cuda {

// Tensor-core variants: ROWS = 16*mr query rows per CTA, bn tokens per tile.
enum class MmaVariant { Small = 0, Medium = 1, Large = 2 };
constexpr int kNumMmaVariants = 3;

struct MmaShape {
    int warps, mr, bn, stages, max_value_dim;
};
MmaShape mma_shape(MmaVariant v);

// Dynamic shared memory the variant needs for these dims.
int mma_smem_bytes(MmaVariant v, const AttentionParams& p);
// Raise every variant's dynamic shared-memory limit (once per process/device).
void prepare_attention_kernels(int smem_optin);
// CTAs of the variant that fit one SM (0: does not fit).
int mma_blocks_per_sm(MmaVariant v, gqla_dtype cache, int smem_bytes);
void launch_attention_mma(MmaVariant v, gqla_dtype cache, const AttentionParams& p, dim3 grid, int smem_bytes,
                          cudaStream_t stream);

// Per-warp tensor-core kernel: <= 16 rows per group, values <= 128 wide, no
// value aliasing (the GQA decode shape). 16 rows per CTA, 64-token steps,
// `stages` 16-token chunks of K/V buffered per warp (2..4).
constexpr int kWarpRows = 16;
constexpr int kWarpTile = 64;
constexpr int kWarpStagesMin = 2, kWarpStagesMax = 4;
bool warp_kernel_fits(const AttentionParams& p);
// Whether the per-warp kernel reads this launch's 8-bit (e4m3) cache: one
// key part (GQA kind), key and value widths multiples of 8, values up to
// 128 wide. It reads every such launch the narrow kernel does not take
// (narrow_kernel_reads_fp8); any number of rows per group (in 16-row blocks).
bool warp_kernel_reads_fp8(const AttentionParams& p);
constexpr int kWarpKernelMaxValueDim = 128;
int warp_smem_bytes(const AttentionParams& p, int stages);
void prepare_warp_kernels(int smem_optin);
int warp_blocks_per_sm(gqla_dtype cache, int stages, int smem_bytes);
void launch_attention_warp(gqla_dtype cache, int stages, const AttentionParams& p, dim3 grid, int smem_bytes,
                           cudaStream_t stream);

// Narrow-group kernel: 8 rows of a group (n_rep * s_q) per row block, keys <= 256
// and values <= 128 wide, no value aliasing: transposed MMAs put the rows on
// the n = 8 side. One CTA per group and 8 rows (grid.x = groups x row
// blocks), 64-token steps; each warp streams its K and V halves through a
// ring of `slots` shared-memory slots (or 2-4 row blocks per CTA sharing
// rings: kNarrowSharedWarps).
constexpr int kNarrowRows = 8;
constexpr int kNarrowMaxDk = 256, kNarrowMaxDv = 128;
// Up to 32 rows (4 CTAs per group) by default. Measured on the H200 (bf16,
// llama3-8b 32/8, T = 4096, device time): n_rep * s_q = 16 at B = 64 took
// 330 us against 490 us with the per-warp kernel, 32 rows 632 us against
// 1034 us with the generic kernel (39% against 24% of the read bandwidth:
// each further row block re-reads the tiles, from L2). With the row blocks
// sharing one CTA's rings (Hopper, 128-wide keys and values), gqla-bench
// event us at B = 64, separate / shared: 16 rows 283.0, 290.6 / 256.4,
// 256.9; 32 rows 464.7, 472.7 / 367.7, 366.8.
constexpr int kNarrowMaxRowsDefault = 32;
constexpr int kNarrowSlotsMin = 3, kNarrowSlotsMax = 5;
// Warps per CTA, each taking 16 of every 16 x warps tokens (a CTA step):
// kNarrowWarps, or kNarrowWideWarps in wide CTAs (one per SM; compiled for
// TMA boxes of 128-wide keys and values with a 3-slot ring only,
// narrow_wide_compiled), whose warps merge a whole row block in shared
// memory: where about one row block per SM fills the GPU they need no split
// and no combine pass.
constexpr int kNarrowWarps = 4, kNarrowWideWarps = 16, kNarrowWideSlots = 3;
// Groups of 2-4 row blocks (9-32 rows: s_q > 1) in one CTA of
// kNarrowSharedWarps warps, a ring of kNarrowSharedSlots slots per token
// lane shared by the lane's warp of every row block, so the group's K/V
// leaves L2 once (compiled for TMA boxes of 128-wide keys and values:
// narrow_shared_compiled). One CTA per SM.
constexpr int kNarrowSharedWarps = 16, kNarrowSharedSlots = 5;
constexpr bool narrow_shared_row_blocks(int row_blocks) { return row_blocks == 2 || row_blocks == 4; }
constexpr int narrow_step_tokens(int warps) { return 16 * warps; }
// How K/V rows sit in the slots: padded by 8 elements; swizzled (rows a
// multiple of 64 elements); or swizzled in the boxes TMA loads write
// (Hopper, pages a multiple of 16 tokens, every key/value part a multiple of
// 64 wide, the layer's NarrowTmaMaps valid).
enum class NarrowRows { Padded = 0, Swizzled = 1, TmaBoxes = 2 };

// TMA view of one layer's key parts and value pool for the narrow kernel:
// each pool as [rows][dim] token rows; the row of (page, group, slot) is
// page * page_rows + group * group_rows + slot.
struct PoolRows {
    int32_t page_rows, group_rows;
};
struct NarrowTmaMaps {  // CUtensorMap carries its own 64-byte alignment
    CUtensorMap k1, k2, v;
    PoolRows k1_rows, k2_rows, v_rows;
    int32_t valid;  // 0: this layer's pools cannot be loaded by TMA
};
// Maps of the layer whose pools are k1, k2 (dim 0: none) and v, pools of
// num_pages pages of page_size tokens.
NarrowTmaMaps narrow_tma_maps(gqla_dtype cache, const PoolView& k1, const PoolView& k2, const PoolView& v,
                              int page_size, int64_t num_pages);

// Dims the kernel takes, and at most max_rows rows per group.
bool narrow_kernel_fits(const AttentionParams& p, int max_rows);
// Swizzled K/V rows (instead of padded ones) are possible for these dims.
bool narrow_can_swizzle(const AttentionParams& p);
// row_blocks: row blocks per CTA (shared rings), 1 otherwise.
int narrow_smem_bytes(const AttentionParams& p, int slots, NarrowRows rows, int warps = kNarrowWarps,
                      int row_blocks = 1);
// clusters: the device runs thread-block clusters (compute capability 9.0+).
void prepare_narrow_kernels(int smem_optin, bool clusters);
// Key/value widths the TmaBoxes layout also has kernels compiled for, which
// need fewer registers and instructions: GQA head dim 128 and the GQLA GQA
// path's 64 + 64 keys (128/128), MLA's 128 + 64 keys (192/128). Runtime:
// widths read at run time.
enum class NarrowDims { Runtime = 0, K128V128 = 1, K192V128 = 2 };
constexpr int kNarrowDimsCount = 3;
// The compiled widths of p's keys and values, or Runtime.
NarrowDims narrow_fixed_dims(const AttentionParams& p);
// A wide-CTA kernel (kNarrowWideWarps) is compiled for this ring, layout and dims.
bool narrow_wide_compiled(int slots, NarrowRows rows, NarrowDims dims);
// A shared-ring kernel (kNarrowSharedWarps, row_blocks > 1) is compiled for these.
bool narrow_shared_compiled(int slots, NarrowRows rows, NarrowDims dims, int warps, int row_blocks);
int narrow_blocks_per_sm(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int smem_bytes,
                         int warps = kNarrowWarps, int row_blocks = 1);
// Most splits (CTAs) of a row block that merge in one cluster: the
// non-portable Hopper limit; the host checks that each launch's cluster
// shape fits (narrow_max_active_clusters).
constexpr int kMaxClusterSplits = 16;
// Shared memory a narrow launch with clusters adds past its layout (see
// cluster_merge.cuh): a barrier, then per split its row maxima and sums and
// its values of one CTA's slice of the row block's outputs (at most
// splits x (2 rows + ceil(rows x dv / splits)) floats), and 16 bytes of
// slack for the region's 16-byte alignment.
constexpr int kNarrowClusterMergeFloats = kMaxClusterSplits * (2 * kNarrowRows + 1) + kNarrowRows * kNarrowMaxDv;
constexpr int kNarrowClusterMergeBytes = 16 + 4 * kNarrowClusterMergeFloats + 16;
// Clusters of cluster_splits CTAs of this kernel (one row block's splits,
// merged in distributed shared memory: AttentionParams::cluster_merge) that
// can be resident at once; 0 where none fits. smem_bytes: the layout's (the
// merge region is added here, as at launch).
int narrow_max_active_clusters(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int smem_bytes,
                               int cluster_splits, int warps = kNarrowWarps);
// 8-bit (e4m3) caches (attention_narrow_fp8_kernel.cuh): the narrow kernel
// reads one key part and values multiples of 16 wide, groups of at most
// max_rows rows, dense and sparse calls; one row block per CTA of kNarrowWarps warps,
// padded byte rows (NarrowRows::Padded), no clusters. Its kernels are the
// narrow_kernel() of cache dtype FP8_E4M3 (128/128 widths fixed, any other
// read at run time).
bool narrow_kernel_reads_fp8(const AttentionParams& p, int max_rows);
const void* narrow_fp8_kernel(int slots, NarrowDims dims);
// maps: the layer's (read only by the TmaBoxes layout). p.cluster_merge:
// launched with clusters of grid.z CTAs. warps: kNarrowWarps, or
// kNarrowWideWarps where narrow_wide_compiled. row_blocks > 1: shared rings
// (narrow_shared_compiled; grid.x counts CTAs of row_blocks row blocks).
void launch_attention_narrow(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int warps, int row_blocks,
                             const AttentionParams& p, const NarrowTmaMaps& maps, dim3 grid, int smem_bytes,
                             cudaStream_t stream);

// Scalar f32 kernel: any dtype (the f32 cache), any dims.
constexpr int kSimtRows = 8;
constexpr int kSimtTile = 32;
int simt_smem_bytes(const AttentionParams& p);
int simt_blocks_per_sm(int smem_bytes);
void prepare_simt_kernel(int smem_optin);
void launch_attention_simt(const AttentionParams& p, dim3 grid, int smem_bytes, cudaStream_t stream);

constexpr int kMaxSplits = 128;
// dependent: launch as a programmatic dependent of the preceding kernel in
// the stream (compute capability 9.0+ only).
void launch_combine(const CombineParams& p, bool dependent, cudaStream_t stream);

}  // namespace gqla::cuda

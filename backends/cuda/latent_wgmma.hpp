// SPDX-License-Identifier: Apache-2.0
// Latent-attention decode kernel of the absorb path on Hopper warpgroup MMAs
// (wgmma, sm_90a). Serves the MLA shape: keys = [latent (512) | rope (0 or
// 64)], value = the same latent, up to 64 query rows (heads x s_q) per CTA;
// an 8-bit (e4m3) latent widened tile by tile (64-row blocks in half tiles).
// Built only when the module targets sm_90 (as sm_90a code) and used only on
// a device of compute capability 9.0; other shapes and GPUs keep the
// mma.sync kernels.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain struct: nothing links libcuda)
#include <cuda_runtime.h>

#include "attention_params.hpp"
#include "gqla/gqla.h"

namespace gqla::cuda {

constexpr int kLatentKernelDim = 512;     // the latent width r the kernel is built for (also the value width)
constexpr int kLatentKernelRopeDim = 64;  // and the rope width d_r
constexpr int kLatentRows = 64;           // query rows per CTA (the wgmma M)
// A row block of at most this many query rows takes the transposed kernel
// (tokens and latent columns as the wgmma M, the rows as its N = 32), whose
// products carry no empty rows.
constexpr int kLatentRowsTransposed = 32;
constexpr int kLatentTile = 64;      // tokens per pipeline stage
constexpr int kLatentThreads = 384;  // three warpgroups: scores + softmax, and two halves of the value columns
// Most splits of a row block that merge in one thread-block cluster (the
// portable limit; AttentionParams::cluster_merge).
constexpr int kMaxLatentClusterSplits = 8;

// TMA view of one layer's latent and rope pools ([pool rows][dim]); a box is
// 64 columns x box_rows token rows. box_rows == 0: the kernel copies every
// tile instead. Encoded once per layer at session creation (the pools never
// move), passed to each launch by value.
struct LatentTmaMaps {  // CUtensorMap carries its own 64-byte alignment
    CUtensorMap latent;
    CUtensorMap rope;
    int32_t box_rows;
};

#if GQLA_CUDA_HAS_SM90A
// True when a device of compute capability cc_major.cc_minor can run the
// kernel (exactly 9.0: sm_90a code).
bool latent_wgmma_available(int cc_major, int cc_minor);
// True when the launch's dims are the ones the kernel is built for.
bool latent_wgmma_fits(const AttentionParams& p);
// Shared memory of the kernel for row blocks of rows_per_cta (kLatentRows or
// kLatentRowsTransposed).
int latent_wgmma_smem_bytes(gqla_dtype cache, int rows_per_cta);
// Raises the kernel's shared-memory limit; only where available and the
// device's opt-in limit holds latent_wgmma_smem_bytes().
void prepare_latent_wgmma_kernel();
// Maps of the layer whose pools are `latent` and `rope` (pool_rows token rows
// each); box_rows == 0 where the page size, the pool layout or the driver
// rules TMA out.
LatentTmaMaps latent_tma_maps(gqla_dtype cache, const PoolView& latent, const PoolView& rope, int page_size,
                              int64_t pool_rows);
// Clusters of cluster_splits CTAs (one row block's splits) that can be
// resident at once; 0 where none fits.
int latent_wgmma_max_active_clusters(gqla_dtype cache, int cluster_splits);
// Row blocks of rows_per_cta (kLatentRows or kLatentRowsTransposed, as
// planned). p.cluster_merge: launched with clusters of grid.z CTAs.
// dependent: as a programmatic dependent of the kernel before it (the query
// projection), so its first tiles load while that one finishes; the queries
// are read only once it has completed.
void launch_latent_wgmma(gqla_dtype cache, const AttentionParams& p, const LatentTmaMaps& maps, dim3 grid,
                         int rows_per_cta, bool dependent, cudaStream_t stream);
#else
// Module built without sm_90a code: the mma.sync kernels serve every GPU.
inline bool latent_wgmma_available(int, int) { return false; }
inline bool latent_wgmma_fits(const AttentionParams&) { return false; }
inline int latent_wgmma_smem_bytes(gqla_dtype, int) { return 0; }
inline void prepare_latent_wgmma_kernel() {}
inline LatentTmaMaps latent_tma_maps(gqla_dtype, const PoolView&, const PoolView&, int, int64_t) { return {}; }
inline int latent_wgmma_max_active_clusters(gqla_dtype, int) { return 0; }
inline void launch_latent_wgmma(gqla_dtype, const AttentionParams&, const LatentTmaMaps&, dim3, int, bool,
                                cudaStream_t) {}
#endif

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// How one attention launch is shaped: kernel variant (tensor-core size or the
// f32 SIMT kernel) and the number of KV splits. Splits fill the SMs at small
// batch and are not used when the batch already fills them.
#pragma once

#include "attention_kernels.hpp"
#include "session.hpp"

namespace gqla::cuda {

struct AttentionPlan {
    bool simt = false;
    bool per_warp = false;
    bool narrow = false;
    NarrowRows narrow_rows = NarrowRows::Padded;   // narrow kernel: how K/V rows sit in its slots
    NarrowDims narrow_dims = NarrowDims::Runtime;  // narrow kernel, TmaBoxes: compiled key/value widths
    int narrow_warps = kNarrowWarps;               // narrow kernel: warps per CTA (kNarrowWideWarps: wide CTAs)
    int narrow_row_blocks = 1;                     // narrow kernel: row blocks per CTA (> 1: shared rings)
    bool latent_wgmma = false;                     // absorb path on Hopper warpgroup MMAs
    bool prefill_wgmma = false;                    // many query rows per group on Hopper warpgroup MMAs
    bool reads_fp8 = false;                        // the kernel reads stored e4m3 bytes
    int stages = 0;  // per-warp kernel: K/V chunks buffered per warp; narrow: K/V half-chunk slots
    MmaVariant variant = MmaVariant::Small;
    int rows_per_cta = 0;
    int tile_tokens = 0;
    int smem_bytes = 0;
    int blocks_per_sm = 0;
};

// The kernel a plan launches, for traces.
const char* kernel_name(const AttentionPlan& plan);

// Whether plan_attention gives p the sm_90a latent kernel (the absorb path
// plans around it before p is complete: query_in_place).
bool plans_latent_kernel(const Session& s, const AttentionParams& p);

// Prefill chunks: whether the sm_90a prefill kernel takes the launch p (and
// *plan set for it).
bool plan_prefill_kernel(const Session& s, const AttentionParams& p, AttentionPlan* plan);

// p: dims, dtype (p.cache_dtype: what the launch reads, which for widened
// 8-bit pages is bf16), rows and heads filled in; narrow_tma: the layer's pools
// have valid NarrowTmaMaps; launch_batch: sequences in the largest launch of
// the call; max_len: the call's longest sequence (cached tokens).
AttentionPlan plan_attention(Session& s, const AttentionParams& p, bool narrow_tma, int64_t launch_batch,
                             int64_t max_len);

// A launch whose unsplit CTAs fill at most a quarter of the SMs (a few
// sequences) is split many ways, and short splits pay their prologue (length,
// page table, first loads) against few tiles: with TMA boxes it takes fewer,
// longer splits, 2 CTAs per SM, each with a 4-slot ring that keeps more of
// its own stream in flight. No change for other plans or a pinned ring.
void fit_small_launch(Session& s, const AttentionParams& p, int64_t base_ctas, AttentionPlan* plan);

// Splits for a launch of base_ctas CTAs (before splitting) over sequences of
// up to max_len tokens, at most the session's max_splits. Splits that merge
// in a thread-block cluster (cluster_merge_pays; not with clusters = false)
// are charged less than the combine pass, and only the combine pass is
// bound by combine_cap, the splits the partials workspace holds: a cluster
// merges without it. cost (optional): the chosen count's, in the time one
// warp takes for one 16-token chunk of its tokens.
int choose_splits(const Session& s, const AttentionPlan& plan, int64_t base_ctas, int64_t max_len, int combine_cap,
                  double* cost = nullptr, bool clusters = true);

// A narrow-kernel launch of 128-wide keys and values on TMA boxes takes
// wide CTAs (16 warps, one per SM) instead where its row blocks fill nine
// tenths of the SMs or more, but not all of their 4-warp CTAs' slots: one
// unsplit wave of wide CTAs, merged in shared memory, replaces split CTAs
// and the combine pass. GQLA_CUDA_NARROW_WIDE=0 never takes them, =1
// wherever they are compiled, with their own split count (tests). *splits
// and cost: choose_splits' count and cost for *plan; *splits is replaced
// with the wide plan's.
void fit_wide_ctas(Session& s, const AttentionParams& p, int64_t base_ctas, int64_t max_len, int combine_cap,
                   double cost, AttentionPlan* plan, int* splits);

// The launch's splits (2..kMaxClusterSplits of a row block for the narrow
// kernel, 2..kMaxLatentClusterSplits for the latent kernel) should merge
// inside a thread-block cluster instead of the combine pass: the plan's
// kernel can, the session allows it and the grid is small enough (narrow:
// half the CTA slots; latent: every cluster resident at once).
bool cluster_merge_pays(const Session& s, const AttentionPlan& plan, int64_t base_ctas, int64_t splits);
// cluster_merge_pays, and such a cluster of the plan's kernel fits the GPU (cached).
bool cluster_merge_fits(Session& s, const AttentionPlan& plan, int64_t base_ctas, int splits);

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// See decode_plan.hpp.
#include "decode_plan.hpp"

#include <algorithm>
#include <limits>

#include "latent_wgmma.hpp"
#include "prefill_wgmma.hpp"

namespace gqla::cuda {

namespace {

// Occupancy slots: 0..2 tensor-core variants, 3 SIMT, 4..6 per-warp by
// depth, 7..15 narrow: one run of ring sizes per row layout (padded,
// swizzled, TMA boxes, in NarrowRows order); 16 the narrow kernel's wide
// CTAs; 17, 18 its shared rings of 2 and 4 row blocks.
constexpr int kSimtSlot = 3, kWarpSlot0 = 4, kNarrowSlot0 = 7;
constexpr int kNarrowRingSizes = kNarrowSlotsMax - kNarrowSlotsMin + 1;
constexpr int kNarrowWideSlot = kNarrowSlot0 + 3 * kNarrowRingSizes;
constexpr int kNarrowSharedSlot2 = kNarrowWideSlot + 1, kNarrowSharedSlot4 = kNarrowWideSlot + 2;
static_assert(kNarrowSharedSlot4 + 1 == Session::kOccupancySlots, "occupancy slots");

constexpr int narrow_slot(NarrowRows rows, int slots) {
    return kNarrowSlot0 + static_cast<int>(rows) * kNarrowRingSizes + slots - kNarrowSlotsMin;
}

// dims: the narrow kernel's compiled key/value widths (TMA boxes).
int cached_blocks_per_sm(Session& s, int variant_index, gqla_dtype cache, int smem, bool simt,
                         NarrowDims dims = NarrowDims::Runtime) {
    Session::Occupancy& o = s.occupancy[variant_index][cache == GQLA_DTYPE_F16 ? 1 : 0];
    if (o.smem != smem || o.dims != dims) {
        const int narrow = variant_index - kNarrowSlot0;
        o.blocks =
            variant_index == kNarrowWideSlot
                ? narrow_blocks_per_sm(cache, kNarrowWideSlots, NarrowRows::TmaBoxes, dims, smem, kNarrowWideWarps)
            : variant_index >= kNarrowSharedSlot2
                ? narrow_blocks_per_sm(cache, kNarrowSharedSlots, NarrowRows::TmaBoxes, dims, smem, kNarrowSharedWarps,
                                       variant_index == kNarrowSharedSlot2 ? 2 : 4)
            : narrow >= 0                 ? narrow_blocks_per_sm(cache, kNarrowSlotsMin + narrow % kNarrowRingSizes,
                                                                 static_cast<NarrowRows>(narrow / kNarrowRingSizes), dims, smem)
            : variant_index >= kWarpSlot0 ? warp_blocks_per_sm(cache, kWarpStagesMin + variant_index - kWarpSlot0, smem)
            : simt                        ? simt_blocks_per_sm(smem)
                                          : mma_blocks_per_sm(static_cast<MmaVariant>(variant_index), cache, smem);
        o.smem = smem;
        o.dims = dims;
    }
    return o.blocks;
}

// Depth of a per-warp streaming kernel (narrow-group or per-warp) whose
// depth st in [min_st, max_st] has occupancy slot slot0 + st - min_st: the
// most resident CTAs first, then the deeper pipeline. These kernels are bound
// by each warp's instruction latency, so warps that can issue matter more
// than bytes in flight (H200, GQA 32/8: 2 stages x 3 CTAs per SM beat 3 x 2
// by 7%, and 4 x 1 ran at half speed; the narrow kernel's 3-slot ring at 4
// CTAs per SM beat 4 slots at 3 by 6% at B = 1, T = 32768). Fills stages,
// smem and blocks of *plan; false when no depth fits (or the pinned one does
// not).
template <typename SmemOf>
bool plan_streaming_kernel(Session& s, gqla_dtype cache, int slot0, int min_st, int max_st, SmemOf smem_of,
                           AttentionPlan* plan, NarrowDims dims = NarrowDims::Runtime) {
    int best_blocks = 0;
    for (int st = min_st; st <= max_st; ++st) {
        if (s.pinned_stages != 0 && st != s.pinned_stages) continue;
        const int smem = smem_of(st);
        const int blocks =
            smem <= s.smem_optin ? cached_blocks_per_sm(s, slot0 + st - min_st, cache, smem, false, dims) : 0;
        if (blocks == 0 || blocks < best_blocks) continue;
        best_blocks = blocks;
        plan->stages = st;
        plan->smem_bytes = smem;
        plan->blocks_per_sm = blocks;
    }
    return best_blocks > 0;
}

// Groups of 9-32 rows (2-4 of the narrow kernel's row blocks: s_q > 1)
// take one CTA whose row blocks share the K/V rings, so the group's K/V
// leaves L2 once instead of once per row block. (GQA 32/8 at s_q = 8, B =
// 64: four 8-row CTAs a group moved ~4.3 GB through L2 for a 1.07 GB cache.)
// Three row blocks run as four, the last one without rows.
// Launches whose groups fill less than half the SMs take it only for long
// sequences: there the 8-row CTAs split many ways and merge in thread-block
// clusters, which the shared CTAs (one per SM) do not do, so a short stream
// pays a combine pass for little L2 traffic saved. Measured on the H200
// (gqla-bench event us, GQA 32/8 bf16, 8-row CTAs / shared rings):
//   - groups filling half the SMs (batch 16, 64; T = 4096): s_q 3-8 6-22% faster;
//   - T = 1024, batch 1-8: up to 16% slower at s_q 4 and 8;
//   - 4 row blocks (s_q 8), batch 1 / 4 / 8: T = 2048 19.3 / 20.2, 24.9 /
//     27.1, 38.3 / 38.0; T = 4096 24.4 / 22.9, 38.0 / 37.7, 60.7 / 59.8;
//     faster by 6-11% at T = 8192, 10-22% at 16384, 13-27% at 32768;
//   - 2 row blocks (s_q 4): within 4% either way at T = 2048-8192 but batch
//     8 (up to 7% slower); T = 16384 34.5 / 33.1, 80.7 / 78.3, 138.9 /
//     139.0; T = 32768 53.2 / 48.5, 142.3 / 137.4, 257.0 / 259.5.
constexpr int64_t kSharedRingsMinContext[2] = {16384, 4096};  // [2 row blocks, 3-4]

void fit_shared_rings(Session& s, const AttentionParams& p, int64_t launch_batch, int64_t max_len,
                      AttentionPlan* plan) {
    const int row_blocks = (p.rows + kNarrowRows - 1) / kNarrowRows;
    const int shared = row_blocks <= 2 ? 2 : 4;
    if (s.narrow_shared == 0 || row_blocks < 2 || row_blocks > 4 || s.pinned_stages != 0 ||
        !narrow_shared_compiled(kNarrowSharedSlots, plan->narrow_rows, plan->narrow_dims, kNarrowSharedWarps, shared))
        return;
    const int64_t group_ctas = launch_batch * (p.num_heads / p.heads_per_group);
    const bool pays = 2 * group_ctas >= s.sm_count || max_len >= kSharedRingsMinContext[shared == 2 ? 0 : 1];
    if (s.narrow_shared < 0 && !pays) return;
    const int smem = narrow_smem_bytes(p, kNarrowSharedSlots, NarrowRows::TmaBoxes, kNarrowSharedWarps, shared);
    if (smem > s.smem_optin) return;
    const int blocks = cached_blocks_per_sm(s, shared == 2 ? kNarrowSharedSlot2 : kNarrowSharedSlot4,
                                            s.desc.cache_dtype, smem, false, plan->narrow_dims);
    if (blocks < 1) return;
    plan->narrow_warps = kNarrowSharedWarps;
    plan->narrow_row_blocks = shared;
    plan->stages = kNarrowSharedSlots;
    plan->smem_bytes = smem;
    plan->blocks_per_sm = blocks;
    plan->rows_per_cta = kNarrowRows * shared;
    plan->tile_tokens = narrow_step_tokens(kNarrowSharedWarps / shared);
}

}  // namespace

const char* kernel_name(const AttentionPlan& plan) {
    if (plan.prefill_wgmma) return plan.reads_fp8 ? "prefill-wgmma-fp8" : "prefill-wgmma";
    if (plan.latent_wgmma)
        return plan.rows_per_cta == kLatentRowsTransposed ? "latent-wgmma-transposed" : "latent-wgmma";
    if (plan.narrow && plan.reads_fp8)
        return plan.narrow_dims == NarrowDims::K128V128 ? "narrow-fp8-128/128" : "narrow-fp8";
    if (plan.per_warp && plan.reads_fp8) return "per-warp-fp8";
    if (plan.narrow) {
        if (plan.narrow_rows == NarrowRows::Padded) return "narrow";
        if (plan.narrow_rows == NarrowRows::Swizzled) return "narrow-swizzled";
        if (plan.narrow_row_blocks == 2) return "narrow-tma-128/128-shared-2";
        if (plan.narrow_row_blocks == 4) return "narrow-tma-128/128-shared-4";
        if (plan.narrow_warps != kNarrowWarps) return "narrow-tma-128/128-wide";
        return plan.narrow_dims == NarrowDims::K128V128   ? "narrow-tma-128/128"
               : plan.narrow_dims == NarrowDims::K192V128 ? "narrow-tma-192/128"
                                                          : "narrow-tma";
    }
    if (plan.per_warp) return "per-warp";
    if (plan.simt) return "simt";
    return plan.variant == MmaVariant::Small    ? "mma-small"
           : plan.variant == MmaVariant::Medium ? "mma-medium"
                                                : "mma-large";
}

bool plans_latent_kernel(const Session& s, const AttentionParams& p) {
    return s.use_latent_wgmma && latent_wgmma_fits(p);
}

// Prefill chunks: a full 128-row block per group or more, compute-bound;
// or at least half a block of a chunk of as many query tokens. True (and
// *plan set) where the prefill kernel takes the launch.
bool plan_prefill_kernel(const Session& s, const AttentionParams& p, AttentionPlan* plan) {
    const bool prefill_rows = p.rows >= kPrefillRows || (p.rows >= kPrefillHalfRows && p.q_len >= kPrefillHalfRows);
    if (!s.use_prefill_wgmma || p.q_len < kPrefillMinQueries || !prefill_rows || !prefill_wgmma_fits(p)) return false;
    plan->prefill_wgmma = true;
    plan->rows_per_cta = kPrefillRows;
    plan->tile_tokens = kPrefillTile;
    plan->smem_bytes = prefill_wgmma_smem_bytes(static_cast<gqla_dtype>(p.cache_dtype), p.k1.dim + p.k2.dim);
    plan->blocks_per_sm = 1;
    return true;
}

AttentionPlan plan_attention(Session& s, const AttentionParams& p, bool narrow_tma, int64_t launch_batch,
                             int64_t max_len) {
    AttentionPlan plan;
    const gqla_dtype cache = static_cast<gqla_dtype>(p.cache_dtype);
    const bool mma_dims = p.k1.dim % 8 == 0 && p.k2.dim % 8 == 0 && p.v.dim % 8 == 0;
    const bool tensor_cores = cache != GQLA_DTYPE_F32 && mma_dims;
    if (plans_latent_kernel(s, p)) {
        // Row blocks of at most 32 rows take the transposed products (an
        // 8-bit latent as a 16-bit one: 64-row products over half tiles for
        // larger blocks, latent_wgmma_fp8_rows.cuh).
        plan.latent_wgmma = true;
        plan.reads_fp8 = cache == GQLA_DTYPE_FP8_E4M3;
        const bool transposed =
            s.latent_transposed == 2 || (s.latent_transposed == 1 && p.rows <= kLatentRowsTransposed);
        plan.rows_per_cta = transposed ? kLatentRowsTransposed : kLatentRows;
        plan.tile_tokens = kLatentTile;
        plan.smem_bytes = latent_wgmma_smem_bytes(cache, plan.rows_per_cta);
        plan.blocks_per_sm = 1;
        return plan;
    }
    if (cache == GQLA_DTYPE_FP8_E4M3) {
        plan.reads_fp8 = true;
        if (plan_prefill_kernel(s, p, &plan)) return plan;
        // The narrow kernel reads 8-bit caches of up to narrow_max_rows rows
        // per group with keys and values multiples of 16 wide, like 16-bit
        // ones (its widening in registers keeps it near the read roofline);
        // the per-warp kernel every other shape the session took at create
        // (session.cpp), in blocks of 16 rows per group.
        const NarrowDims dims = s.use_narrow_fixed_dims ? narrow_fixed_dims(p) : NarrowDims::Runtime;
        if (s.use_narrow_kernel && narrow_kernel_reads_fp8(p, s.narrow_max_rows) &&
            plan_streaming_kernel(
                s, cache, narrow_slot(NarrowRows::Padded, kNarrowSlotsMin), kNarrowSlotsMin, kNarrowSlotsMax,
                [&](int st) { return narrow_smem_bytes(p, st, NarrowRows::Padded); }, &plan, dims)) {
            plan.narrow = true;
            plan.narrow_rows = NarrowRows::Padded;
            plan.narrow_dims = dims;
            plan.rows_per_cta = kNarrowRows;
            plan.tile_tokens = narrow_step_tokens(kNarrowWarps);
            return plan;
        }
        if (!warp_kernel_reads_fp8(p) || !plan_streaming_kernel(
                                             s, cache, kWarpSlot0, kWarpStagesMin, kWarpStagesMax,
                                             [&](int st) { return warp_smem_bytes(p, st); }, &plan))
            throw BackendError(GQLA_ERR_UNSUPPORTED, "CUDA decode: no kernel reads this fp8_e4m3 cache's shape");
        plan.per_warp = true;
        plan.rows_per_cta = kWarpRows;
        plan.tile_tokens = kWarpTile;
        return plan;
    }
    if (plan_prefill_kernel(s, p, &plan)) return plan;
    if (tensor_cores && s.use_narrow_kernel && narrow_kernel_fits(p, s.narrow_max_rows)) {
        // Padded or swizzled rows (where the dims allow): the layout that fits
        // more CTAs per SM, ties keeping the padded one. A pinned swizzle
        // takes padded rows only where swizzled ones do not fit. TMA boxes
        // (where the layer has maps) win over both unless they fit fewer CTAs.
        const NarrowDims dims = s.use_narrow_fixed_dims ? narrow_fixed_dims(p) : NarrowDims::Runtime;
        auto plan_layout = [&](NarrowRows rows, AttentionPlan* out) {
            return plan_streaming_kernel(
                s, cache, narrow_slot(rows, kNarrowSlotsMin), kNarrowSlotsMin, kNarrowSlotsMax,
                [&](int st) { return narrow_smem_bytes(p, st, rows); }, out,
                rows == NarrowRows::TmaBoxes ? dims : NarrowDims::Runtime);
        };
        AttentionPlan padded = plan, swizzled = plan, boxes = plan;
        const bool swizzled_ok =
            s.narrow_swizzle != 0 && narrow_can_swizzle(p) && plan_layout(NarrowRows::Swizzled, &swizzled);
        const bool padded_ok = (s.narrow_swizzle != 1 || !swizzled_ok) && plan_layout(NarrowRows::Padded, &padded);
        const bool boxes_ok =
            narrow_tma && s.narrow_swizzle != 0 && narrow_can_swizzle(p) && plan_layout(NarrowRows::TmaBoxes, &boxes);
        if (padded_ok || swizzled_ok || boxes_ok) {
            const bool use_swizzled = swizzled_ok && (!padded_ok || swizzled.blocks_per_sm > padded.blocks_per_sm);
            plan = use_swizzled ? swizzled : padded;
            plan.narrow_rows = use_swizzled ? NarrowRows::Swizzled : NarrowRows::Padded;
            if (boxes_ok && (!(padded_ok || swizzled_ok) || boxes.blocks_per_sm >= plan.blocks_per_sm)) {
                plan = boxes;
                plan.narrow_rows = NarrowRows::TmaBoxes;
                plan.narrow_dims = dims;
            }
            plan.narrow = true;
            plan.rows_per_cta = kNarrowRows;
            plan.tile_tokens = narrow_step_tokens(kNarrowWarps);
            fit_shared_rings(s, p, launch_batch, max_len, &plan);
            return plan;
        }
    }
    if (tensor_cores && s.use_warp_kernel && warp_kernel_fits(p) &&
        plan_streaming_kernel(
            s, cache, kWarpSlot0, kWarpStagesMin, kWarpStagesMax, [&](int st) { return warp_smem_bytes(p, st); },
            &plan)) {
        plan.per_warp = true;
        plan.rows_per_cta = kWarpRows;
        plan.tile_tokens = kWarpTile;
        return plan;
    }
    if (tensor_cores) {
        // Fewest rows per CTA that hold the group's rows, so K/V tiles are shared
        // by as many rows as possible without padding waste.
        MmaVariant order[3];
        if (p.rows <= 16)
            order[0] = MmaVariant::Small, order[1] = MmaVariant::Medium, order[2] = MmaVariant::Large;
        else if (p.rows <= 32)
            order[0] = MmaVariant::Medium, order[1] = MmaVariant::Large, order[2] = MmaVariant::Small;
        else
            order[0] = MmaVariant::Large, order[1] = MmaVariant::Medium, order[2] = MmaVariant::Small;
        for (MmaVariant v : order) {
            MmaShape shape = mma_shape(v);
            int smem = mma_smem_bytes(v, p);
            if (p.v.dim > shape.max_value_dim || smem > s.smem_optin) continue;
            int blocks = cached_blocks_per_sm(s, static_cast<int>(v), cache, smem, false);
            if (blocks == 0) continue;
            plan.variant = v;
            plan.rows_per_cta = shape.mr * 16;
            plan.tile_tokens = shape.bn;
            plan.smem_bytes = smem;
            plan.blocks_per_sm = blocks;
            return plan;
        }
    }
    plan.simt = true;
    plan.rows_per_cta = kSimtRows;
    plan.tile_tokens = kSimtTile;
    plan.smem_bytes = simt_smem_bytes(p);
    if (plan.smem_bytes > s.smem_optin)
        throw BackendError(GQLA_ERR_UNSUPPORTED, "CUDA decode: head dims too large for shared memory (" +
                                                     std::to_string(plan.smem_bytes) + " bytes needed)");
    plan.blocks_per_sm = std::max(1, cached_blocks_per_sm(s, kSimtSlot, cache, plan.smem_bytes, true));
    return plan;
}

void fit_small_launch(Session& s, const AttentionParams& p, int64_t base_ctas, AttentionPlan* plan) {
    // Measured on the H200 (bf16, GQA 32/8, B = 1): T = 32768 took 52.9 us
    // with 3 slots and 66 splits (4 CTAs per SM), 48.5 us with 4 slots and
    // 32 splits (2 per SM, 16 tiles each); T = 1024 (16 one-tile splits)
    // 14.0 -> 13.2 us. At B = 16 of the GQLA GQA path (128 unsplit CTAs)
    // the 4-slot ring was 3% slower, hence only a quarter of the SMs.
    constexpr int kRing = 4, kCtasPerSm = 2;
    if (!plan->narrow || plan->narrow_rows != NarrowRows::TmaBoxes || plan->narrow_row_blocks != 1 ||
        s.pinned_stages != 0 || base_ctas * 4 > s.sm_count)
        return;
    const int smem = narrow_smem_bytes(p, kRing, NarrowRows::TmaBoxes);
    if (smem > s.smem_optin || cached_blocks_per_sm(s, narrow_slot(NarrowRows::TmaBoxes, kRing), s.desc.cache_dtype,
                                                    smem, false, plan->narrow_dims) < kCtasPerSm)
        return;
    plan->stages = kRing;
    plan->smem_bytes = smem;
    plan->blocks_per_sm = kCtasPerSm;  // what the splits fill, not what fits
}

int choose_splits(const Session& s, const AttentionPlan& plan, int64_t base_ctas, int64_t max_len, int combine_cap,
                  double* cost_out, bool clusters) {
    const int64_t slots = static_cast<int64_t>(s.sm_count) * plan.blocks_per_sm;
    const int64_t tiles = std::max<int64_t>(1, (max_len + plan.tile_tokens - 1) / plan.tile_tokens);
    const int64_t cap = std::max<int64_t>(1, std::min<int64_t>({s.max_splits, kMaxSplits, tiles}));
    // Cost in "tile times" of the slowest SM: waves x (tiles per CTA + prologue),
    // plus the merge when splitting: the combine pass (a launch and a global
    // round trip after the whole grid), or a merge inside the cluster
    // through distributed shared memory.
    constexpr double kCombineCost = 2.0, kClusterMergeCost = 0.5;
    // The latent kernel's partial rows are big (64 x 512 f32 a CTA, written
    // and read back: ~3.6 tiles of 64 latent tokens), so their traffic,
    // spread over the SMs, counts too. H200 graph us, DeepSeek-V3 absorb
    // B=1 T=4096 (2 row blocks): 64 splits 44.2, 32 splits 37.2-38.6, 16
    // splits 38.6, 8 merged in clusters 54.
    constexpr double kLatentPartialTiles = 2.0 * 64 * 512 * 4 / (64.0 * 576 * 2);
    // Its cluster merge moves those rows through distributed shared memory
    // instead. At B=8 (2 x 8 row blocks, T=4096), 8 splits and the combine
    // took 54.5-54.8 us, 7-split clusters ~61.5, 4-split clusters 65.6; at
    // LLaMA-3-8B-GQLA B=16 (one row block of 32 heads a sequence) 6-split
    // clusters 53.0 against 4-split ones 58.1.
    constexpr double kLatentClusterMergeCost = 4.0;
    auto merge_cost = [&](int64_t sp, bool in_cluster) {
        if (sp == 1) return 0.0;
        if (in_cluster) return plan.latent_wgmma ? kLatentClusterMergeCost : kClusterMergeCost;
        const double partials = plan.latent_wgmma ? kLatentPartialTiles * static_cast<double>(base_ctas * sp) /
                                                        static_cast<double>(s.sm_count)
                                                  : 0.0;
        return kCombineCost + partials;
    };
    int best = 1;
    double best_cost = std::numeric_limits<double>::max();
    for (int64_t sp = 1; sp <= cap; ++sp) {
        const bool in_cluster = sp > 1 && clusters && cluster_merge_pays(s, plan, base_ctas, sp);
        if (sp > combine_cap && !in_cluster) continue;  // the partials hold no more
        int64_t waves = (base_ctas * sp + slots - 1) / slots;
        int64_t per = (tiles + sp - 1) / sp;
        const double cost = static_cast<double>(waves) * (per + 1) + merge_cost(sp, in_cluster);
        if (cost < best_cost) {
            best_cost = cost;
            best = static_cast<int>(sp);
        }
    }
    if (cost_out) *cost_out = best_cost;
    return best;
}

void fit_wide_ctas(Session& s, const AttentionParams& p, int64_t base_ctas, int64_t max_len, int combine_cap,
                   double cost, AttentionPlan* plan, int* splits) {
    if (s.narrow_wide == 0 || !plan->narrow || plan->narrow_row_blocks != 1 || s.pinned_stages != 0 ||
        !narrow_wide_compiled(kNarrowWideSlots, plan->narrow_rows, plan->narrow_dims))
        return;
    AttentionPlan wide = *plan;
    wide.narrow_warps = kNarrowWideWarps;
    wide.stages = kNarrowWideSlots;
    wide.tile_tokens = narrow_step_tokens(kNarrowWideWarps);
    wide.smem_bytes = narrow_smem_bytes(p, kNarrowWideSlots, NarrowRows::TmaBoxes, kNarrowWideWarps);
    if (wide.smem_bytes > s.smem_optin ||
        cached_blocks_per_sm(s, kNarrowWideSlot, s.desc.cache_dtype, wide.smem_bytes, false, wide.narrow_dims) < 1)
        return;
    wide.blocks_per_sm = 1;
    // Both costs count one warp's 16-token chunks; a wide CTA's step is one
    // chunk per warp, like a 4-warp CTA's.
    double wide_cost = 0.0;
    const int wide_splits = choose_splits(s, wide, base_ctas, max_len, combine_cap, &wide_cost);
    // Only unsplit, in one wave filling nine tenths of the SMs or more. Graph
    // us on the H200 (bf16, page 64), wide CTAs forced / 4-warp CTAs as
    // planned: LLaMA-3-8B-GQLA GQA path B=16 T=4096 (128 row blocks) 55.4 /
    // 58.5 (4 splits and the combine pass); but where the wide CTAs split
    // too, GQA 32/8 B=1 T=32768 41.4, 41.4 / 39.8, 40.0 (16 against 32
    // splits), B=4 T=16384 70.7, 70.9 / 69.2, 68.9, B=1 T=1024 9.0, 9.0 /
    // 8.4, 8.3; and B=64 T=4096 (four waves) 250.1, 250.2 / 250.1, 247.5.
    const bool one_unsplit_wave = wide_splits == 1 && base_ctas <= s.sm_count && base_ctas * 10 >= s.sm_count * 9;
    if (s.narrow_wide == 1 || (one_unsplit_wave && wide_cost < cost)) {
        *plan = wide;
        *splits = wide_splits;
    }
}

bool cluster_merge_pays(const Session& s, const AttentionPlan& plan, int64_t base_ctas, int64_t splits) {
    // A cluster's CTAs are placed together, inside one GPC: a grid that
    // fills most of the GPU's CTA slots loses slots to that placement and
    // runs a second wave. Measured on the H200 (graph us, clusters on / off):
    // GQA 32/8 B=1 T=1024, 128 of 264 slots, 9.0 / 9.7; B=4 T=16384, 256 of
    // 264, 73.7 / 70.1; LLaMA-3-8B-GQLA GQA path B=16, 512 of 528, 75.3 /
    // 60.1. So only grids that leave half the slots free.
    if (!s.use_cluster_merge || splits < 2) return false;
    // The latent kernel (one CTA per SM) merges where every cluster of the
    // launch is resident at once.
    if (plan.latent_wgmma)
        return splits <= kMaxLatentClusterSplits && base_ctas <= s.latent_clusters[static_cast<size_t>(splits)];
    const int64_t slots = static_cast<int64_t>(s.sm_count) * plan.blocks_per_sm;
    return plan.narrow && plan.narrow_row_blocks == 1 && s.desc.cache_dtype != GQLA_DTYPE_FP8_E4M3 &&
           splits <= kMaxClusterSplits && 2 * base_ctas * splits <= slots;
}

bool cluster_merge_fits(Session& s, const AttentionPlan& plan, int64_t base_ctas, int splits) {
    if (!cluster_merge_pays(s, plan, base_ctas, splits)) return false;
    if (plan.latent_wgmma) return true;  // pays: every cluster fits
    const std::array<int, 7> key = {static_cast<int>(s.desc.cache_dtype),
                                    plan.stages,
                                    static_cast<int>(plan.narrow_rows),
                                    static_cast<int>(plan.narrow_dims),
                                    plan.narrow_warps,
                                    plan.smem_bytes,
                                    splits};
    auto it = s.cluster_fits.find(key);
    if (it == s.cluster_fits.end())
        it = s.cluster_fits
                 .emplace(key,
                          narrow_max_active_clusters(s.desc.cache_dtype, plan.stages, plan.narrow_rows,
                                                     plan.narrow_dims, plan.smem_bytes, splits, plan.narrow_warps) > 0)
                 .first;
    return it->second;
}

}  // namespace gqla::cuda

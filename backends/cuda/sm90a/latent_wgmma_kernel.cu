// SPDX-License-Identifier: Apache-2.0
// Absorb-path decode over the latent cache on Hopper warpgroup MMAs.
//
// One CTA = one sequence x 64 query rows (heads x s_q) x one split of the
// tokens, 64-token tiles of [latent (512) | rope (64)] keys whose latent part
// is also the value. Three warpgroups with different roles:
//   WG0 (scores)  S = Q K^T per tile (36 x m64n64k16, both operands in
//                 shared memory), the online softmax, and hands P (bf16/f16)
//                 and the rescale factors to the others.
//   WG1, WG2      O[:, 0:256] and O[:, 256:512] += P V, the latent tile read
//                 transposed as the value (m64n256k16); WG1 also loads.
// WG0 scores tile t + 1 while WG1/WG2 multiply tile t, so the softmax and the
// score products overlap the value products. Shared memory holds Q + two
// 72 KiB tile stages + P; a stage refills as soon as both value products of
// its tile are done. (Queries in registers would make room for a third stage,
// but 144 fragment registers + the scores do not fit the scoring warpgroup
// next to two 128-accumulator warpgroups.)
// Loads: whole tiles by TMA (one lane per page segment issues 9 box loads,
// the hardware swizzles them into the layout wgmma reads); a sequence's
// partial last tile and page sizes TMA cannot box come by 16-byte cp.async
// with zero fill, so no stale pool row ever reaches the products (sparse
// launches copy every tile: their rows are gathered). Either way a tile
// completes its stage's mbarrier when it has landed (a copied tile through
// the hardware's arrivals for each thread's copies), so WG1 never waits for
// its own loads.
// Hand-offs (named barriers: producers arrive, consumers sync):
//   P_READY    WG0 -> WG1/WG2  P and the rescale factors of the tile written
//   P_FREE     WG1/WG2 -> WG0  both products read them; they may be overwritten
//   K_EMPTY    WG2 -> WG1      WG2's product of the tile done; its stage may refill
// WG1/WG2 store their normalised fragments straight to o or to the split's
// partial rows (the common layout the combine kernel reads); WG0 writes the
// log2-sum-exp through write_row_lse. Prologue and epilogue compute each
// row's address once: at one tile per CTA (DeepSeek-V3, B=1) per-element
// address arithmetic made them most of the kernel's time.
// With p.cluster_merge the 2-8 splits of a row block are the CTAs of one
// cluster: each keeps its normalised rows in shared memory and the cluster
// merges them through distributed shared memory (merge_split_rows), writing
// the output and lse directly, with no partial rows and no combine pass.
//
// Transposed variant (kRows = 32: a row block of at most 32 rows, e.g. 32
// heads at s_q = 1 or DeepSeek-V3's 16 heads per GPU under 8-way tensor
// parallelism). With 64-row products half of every product (or more) would
// multiply padding rows, so the roles compute the transposes instead:
//   WG0           S^T = K Q^T (36 x m64n32k16, the tile's 64 tokens as M),
//                 the softmax down each column (its maxima shared by WG0's
//                 warps through shared memory, double-buffered by tile) and
//                 P^T (K-major, the values' B operand).
//   WG1, WG2      O^T[0:256] and O^T[256:512] += V^T P^T, each latent atom
//                 read MN-major as A (4 x 4 m64n32k16 per tile).
// Same loads, stages and hand-offs; the epilogue stages the normalised rows
// in shared memory (transposing them) for the cluster merge or a coalesced
// store. H200, LLaMA-3-8B-GQLA absorb B=64 T=16384 (32 rows), graph us:
// 301.4-305.7 with the 64-row products, 294.4-294.6 transposed.
// Non-finite cache values (see nonfinite.cuh): in the tiles of the causal
// tail (tokens the block's earlier queries may not see) WG0 scrubs those
// tokens' latent rows, which are the values, after their scores and before
// handing P over, and gives each row that may see a scrubbed token a NaN
// probability for it.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "../cuda_status.hpp"
#include "../latent_wgmma.hpp"
#include "../launch_config.hpp"
#include "../tensor_maps.hpp"
#include "latent_wgmma_epilogue.cuh"
#include "latent_wgmma_fp8.cuh"
#include "latent_wgmma_fp8_rows.cuh"

namespace gqla::cuda {

namespace {

using namespace latent;

// WG0's tile `tile` (64-row layout): S = Q K^T once its stage landed, the
// causal tail's scrub, the online softmax and P handed to WG1/WG2.
template <typename T>
__device__ __forceinline__ void score_tile(const AttentionParams& p, const TileStream<T>& ts, const CtaWork& w,
                                           const LatentShared& sh, const Fragment& f, const Operands& d,
                                           int first_hidden, int tile, RowState& st) {
    const uint64_t k_desc = stage_desc(w.range, tile, d.k0, d.k1);
    wait_tile(ts, w, sh, tile);

    float s[32];
    multiply_scores_rows<T>(s, d.q, k_desc);
    const bool tail = in_tail(w, first_hidden, tile);
    uint32_t bad_lo = 0, bad_hi = 0;  // tokens 0-31, 32-63 of the tile
    if (tail) {
        const uint2 bad = share_tail_masks<T>(sh.stages + stage_of(w.range, tile) * kStageBytes, sh.tail_mask, tile,
                                              first_hidden, w.length, f.warp, f.lane);
        bad_lo = bad.x;
        bad_hi = bad.y;
    }
    mask_rows(s, st, tile * kLatentTile, f.c_lane);
    uint32_t pa[16];
    const float2 alpha = softmax_rows<T>(s, pa, st, tile * kLatentTile, f.c_lane, p.scale_log2, tail, bad_lo, bad_hi);
    hand_over_rows(sh.p, sh.scale, pa, alpha, tile > w.range.begin, f);
}

// WG0's tile `tile` (transposed layout): S^T = K Q^T once its stage landed,
// the causal tail's scrub, the softmax down each column (its maxima shared
// by WG0's warps) and P^T handed to WG1/WG2.
template <typename T>
__device__ __forceinline__ void score_tile_transposed(const AttentionParams& p, const TileStream<T>& ts,
                                                      const CtaWork& w, const LatentShared& sh, const Fragment& f,
                                                      const Operands& d, int first_hidden, int tile, ColumnState& st) {
    const uint64_t k_desc = stage_desc(w.range, tile, d.k0, d.k1);
    wait_tile(ts, w, sh, tile);

    float s[16];
    multiply_scores_columns<T>(s, k_desc, d.q);
    // The causal tail: this warp's 16 token rows scrubbed (its own tokens
    // r0, r0 + 8), and which had a non-finite value.
    const bool tail = in_tail(w, first_hidden, tile);
    bool bad0 = false, bad1 = false;
    if (tail) {
        const uint32_t bad = scrub_tail_rows<T>(sh.stages + stage_of(w.range, tile) * kStageBytes, tile, first_hidden,
                                                w.length, f.warp, f.lane);
        bad0 = (bad >> (f.lane >> 2)) & 1;
        bad1 = (bad >> ((f.lane >> 2) + 8)) & 1;
    }
    const int t0 = tile * kLatentTile + f.r0;
    mask_columns(s, st, tile, t0);
    float cm[8];
    column_maxima(s, cm, sh.column_max + (tile & 1) * 4 * 32, f);
    float alpha[8];
    T pt[16];
    softmax_columns<T>(s, cm, st, alpha, pt, t0, p.scale_log2, tail, bad0, bad1);
    hand_over_columns<T>(sh.p, sh.scale, pt, alpha, tile > w.range.begin, f);
}

// kRows = 64: S = Q K^T and O += P V, query rows as the wgmma M (rows past
// the block's end are zero). kRows = 32 (transposed): S^T = K Q^T and
// O^T += V^T P^T, the tile's 64 tokens as the M of the scores and the
// latent columns as the M of the values, so no product carries empty rows;
// the softmax then runs down the columns, its maxima shared by WG0's warps
// through shared memory once per tile.
// FP8 (transposed, T = bf16): the latent is stored in e4m3 with block
// scales and WG1/WG2 widen each tile into its stage (latent_wgmma_fp8.cuh);
// the 64-row form over an 8-bit latent is latent_wgmma_fp8_rows_kernel
// (latent_wgmma_fp8_rows.cuh), on half tiles.
template <typename T, int kRows, bool FP8 = false>
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_wgmma_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ LatentTmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!FP8 || (kRows == kLatentRowsTransposed && std::is_same<T, __nv_bfloat16>::value),
                  "8-bit latent: transposed products over bf16 stages");
    extern __shared__ unsigned char smem_raw[];
    const LatentShared sh = latent_shared<LatentSmem<kRows>>(smem_raw, FP8);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3;
    const CtaWork w = cta_work(p, kRows, kLatentTile);
    const TileStream<T> ts = tile_stream<T>(p, maps, tid);
    Fp8Staged staged;                   // WG1/WG2, 8-bit latent: the staged tile's row
    const int ftid = tid - kWgThreads;  // its thread among WG1/WG2
    if constexpr (FP8) {
        if (wg >= 1) start_fp8_tiles(p, w, sh, ftid, staged);  // the first tile's bytes in flight
    } else if (wg == 1) {
        start_tiles(p, maps, ts, w, sh);  // both stages in flight before the queries are staged
    }
    const int first_hidden = stage_queries<T, kRows>(p, w, sh, tid);

    const Fragment f = fragment_of(wi, lane);
    const int atom0 = (wg - 1) * 4;  // WG1/WG2: their four 64-column latent atoms
    const Operands d = make_operands(sh, atom0);
    // WG1/WG2's tile loops stay in this body, with the rescale's branch
    // outside the phase functions: inside a device function, the tile
    // copies' loop-invariant address terms stayed in the loop and the
    // transposed kernel took 151 registers instead of 146.
    if constexpr (kRows == kLatentRowsTransposed) {
        if (wg == 0) {
            ColumnState st = column_state(sh.limit, f.c_lane);
            for (int tile = w.range.begin; tile < w.range.end; ++tile)
                score_tile_transposed(p, ts, w, sh, f, d, first_hidden, tile, st);
            finish_score_columns(p, w, sh, st, f);
            return;
        }
        float o[4][16];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int i = 0; i < 16; ++i) o[a][i] = 0.f;
        if constexpr (FP8) fill_first_fp8_stages(p, w, sh, ftid, staged);
        for (int tile = w.range.begin; tile < w.range.end; ++tile) {
            const uint64_t v_desc = stage_desc(w.range, tile, d.v0, d.v1);
            wait_values(ts, w, tile);
            float alpha[8];
            if (column_factors(alpha, sh.scale, f.c_lane))
                rescale_columns(o, alpha);  // some column's running max moved
            multiply_values_columns<T>(o, d.p, v_desc);
            if constexpr (FP8)
                release_fp8_tile(p, w, sh, tile, ftid, staged);
            else
                release_tile(p, maps, ts, w, sh, tile, wg);
        }
        end_values();  // WG0's column max / sum visible
        write_value_columns(p, w, sh, o, f, atom0);
    } else {
        if (wg == 0) {
            RowState st = row_state(sh.limit, f);
            for (int tile = w.range.begin; tile < w.range.end; ++tile)
                score_tile(p, ts, w, sh, f, d, first_hidden, tile, st);
            finish_score_rows(p, w, sh, st, f);
            return;
        }
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] = 0.f;
        for (int tile = w.range.begin; tile < w.range.end; ++tile) {
            const uint64_t v_desc = stage_desc(w.range, tile, d.v0, d.v1);
            wait_values(ts, w, tile);
            float2 alpha;
            if (row_factors(alpha, sh.scale, f)) rescale_rows(o, alpha);  // the running max moved
            multiply_values_rows<T>(o, d.p, v_desc);
            release_tile(p, maps, ts, w, sh, tile, wg);
        }
        end_values();  // WG0's row max / sum visible
        write_value_rows(p, w, sh, o, f, atom0);
    }
#endif
}

const void* kernel_for(gqla_dtype cache, int rows_per_cta) {
    if (cache == GQLA_DTYPE_FP8_E4M3)
        return rows_per_cta == kLatentRowsTransposed
                   ? reinterpret_cast<const void*>(&latent_wgmma_kernel<__nv_bfloat16, kLatentRowsTransposed, true>)
                   : reinterpret_cast<const void*>(&latent_wgmma_fp8_rows_kernel);
    if (rows_per_cta == kLatentRowsTransposed)
        return cache == GQLA_DTYPE_F16
                   ? reinterpret_cast<const void*>(&latent_wgmma_kernel<__half, kLatentRowsTransposed>)
                   : reinterpret_cast<const void*>(&latent_wgmma_kernel<__nv_bfloat16, kLatentRowsTransposed>);
    return cache == GQLA_DTYPE_F16 ? reinterpret_cast<const void*>(&latent_wgmma_kernel<__half, kLatentRows>)
                                   : reinterpret_cast<const void*>(&latent_wgmma_kernel<__nv_bfloat16, kLatentRows>);
}

// Rows per TMA box: a whole tile when pages hold whole tiles, one page when
// pages are a multiple of the 8-row swizzle period that divides the tile;
// 0 (copies instead) for any other page size.
int tma_box_rows(int page_size) {
    if (page_size % kLatentTile == 0) return kLatentTile;
    if (page_size >= 8 && page_size % 8 == 0 && kLatentTile % page_size == 0) return page_size;
    return 0;
}

}  // namespace

bool latent_wgmma_available(int cc_major, int cc_minor) {
    return cc_major == 9 && cc_minor == 0;  // sm_90a code runs on exactly this architecture
}

bool latent_wgmma_fits(const AttentionParams& p) {
    return p.v_aliases_k1 && p.k1.dim == kLatentDim && p.v.dim == kLatentDim && p.k2.dim == kRopeDim &&
           (p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16 ||
            p.cache_dtype == GQLA_DTYPE_FP8_E4M3);
}

int latent_wgmma_smem_bytes(gqla_dtype cache, int rows_per_cta) {
    if (cache == GQLA_DTYPE_FP8_E4M3)
        return rows_per_cta == kLatentRowsTransposed ? LatentSmem<kLatentRowsTransposed>::kFp8Bytes
                                                     : Fp8RowsSmem::kBytes;
    return rows_per_cta == kLatentRowsTransposed ? LatentSmem<kLatentRowsTransposed>::kBytes
                                                 : LatentSmem<kLatentRows>::kBytes;
}

void prepare_latent_wgmma_kernel() {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16, GQLA_DTYPE_FP8_E4M3})
        for (int rows : {kLatentRows, kLatentRowsTransposed})
            check_cuda(cudaFuncSetAttribute(kernel_for(t, rows), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            latent_wgmma_smem_bytes(t, rows)),
                       "cudaFuncSetAttribute(latent_wgmma_kernel)");
}

LatentTmaMaps latent_tma_maps(gqla_dtype cache, const PoolView& latent, const PoolView& rope, int page_size,
                              int64_t pool_rows) {
    LatentTmaMaps maps{};
    // The kernel's box coordinates are page * page_size + slot rows of int32.
    const bool fits = latent.dim == kLatentDim && rope.dim == kRopeDim && latent.group_stride == 0 &&
                      rope.group_stride == 0 && latent.page_stride == int64_t(page_size) * latent.row_stride &&
                      rope.page_stride == int64_t(page_size) * rope.row_stride && pool_rows <= INT32_MAX;
    const int box_rows = fits ? tma_box_rows(page_size) : 0;
    if (box_rows > 0 &&
        encode_row_map(&maps.latent, cache, latent.base, latent.dim, pool_rows, latent.row_stride, box_rows) &&
        encode_row_map(&maps.rope, cache, rope.base, rope.dim, pool_rows, rope.row_stride, box_rows))
        maps.box_rows = box_rows;
    return maps;
}

int latent_wgmma_max_active_clusters(gqla_dtype cache, int cluster_splits) {
    // Both kernels hold one CTA per SM; the fewer of their counts serves both.
    int fit = INT32_MAX;
    for (int rows : {kLatentRows, kLatentRowsTransposed})
        fit = std::min(fit, max_active_split_clusters(kernel_for(cache, rows), dim3(kLatentThreads),
                                                      latent_wgmma_smem_bytes(cache, rows), cluster_splits));
    return fit;
}

void launch_latent_wgmma(gqla_dtype cache, const AttentionParams& p, const LatentTmaMaps& maps, dim3 grid,
                         int rows_per_cta, bool dependent, cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p), const_cast<LatentTmaMaps*>(&maps)};
    LaunchAttrs attrs;
    cudaLaunchConfig_t cfg =
        make_launch_config(grid, dim3(kLatentThreads), latent_wgmma_smem_bytes(cache, rows_per_cta),
                           p.cluster_merge != 0, dependent, attrs);
    cfg.stream = stream;
    check_cuda(cudaLaunchKernelExC(&cfg, kernel_for(cache, rows_per_cta), args), "launch latent_wgmma_kernel");
}

}  // namespace gqla::cuda

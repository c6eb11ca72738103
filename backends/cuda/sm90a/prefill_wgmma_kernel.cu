// SPDX-License-Identifier: Apache-2.0
// Prefill attention on Hopper warpgroup MMAs (see prefill_wgmma.hpp).
//
// One CTA = one sequence x one group x 128 query rows (heads x tokens, head
// fastest) x one split of the key tiles those rows may see. Two warpgroups,
// 64 rows each, share every K/V tile of 128 tokens:
//   S = Q K^T     m64n128k16 per 16 key columns, Q and K in shared memory
//   softmax       online, f32, log2 domain, on the accumulators: each
//                 thread holds two rows' 32 scores, a quad holds the row
//   O += P V      m64n128k16 per 16 tokens, P straight from the score
//                 accumulators (registers), V read MN-major (transposed)
// Tiles come by 16-byte cp.async through the page table into the 128B
// swizzle wgmma reads (any page size, slots past the end zero-filled), two
// stages: tile t + 1 loads while tile t is multiplied. Only the tiles that
// hold a position some row of the block may not see are masked (select,
// never arithmetic); tiles past the last row's limit are never loaded.
// Row blocks are scheduled latest-queries first: they see the most tiles.
// Non-finite values (see nonfinite.cuh): in the masked tiles, the value rows
// of positions the block's first row may not see are scrubbed in shared
// memory, and each row that may see a scrubbed position gets probability NaN
// for it, so a NaN/Inf reaches exactly the outputs that attend to it.
#include <cstdint>

#include "../cuda_status.hpp"
#include "../prefill_wgmma.hpp"
#include "../tma_primitives.cuh"
#include "prefill_wgmma_phases.cuh"

namespace gqla::cuda {

namespace {

using namespace prefill;

// 128-wide keys defer each tile's P V to the next iteration, after that
// tile's S = Q K^T is issued, so the softmax of a tile runs on the CUDA cores
// while the tensor cores multiply the previous tile's values; that keeps
// three tiles in shared memory (192-wide keys do not fit three: they
// multiply in order, two stages).
template <int KA>
constexpr bool kDeferPV = KA == 2;
template <int KA>
constexpr int kStages = kDeferPV<KA> ? 3 : 2;

// Shared memory: Q, then per stage K and V, then the scrubbed-token mask.
// Every atom is 1024-byte aligned (the swizzle period), as wgmma requires.
template <int KA>
struct PrefillSmem {
    static constexpr int kQBytes = KA * kAtomBytes;
    static constexpr int kKBytes = KA * kAtomBytes;
    static constexpr int kVBytes = kValueAtoms * kAtomBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;
    static constexpr int kStagesOff = kQBytes;
    static constexpr int kBadOff = kStagesOff + kStages<KA> * kStageBytes;
    static constexpr int kBytes = kBadOff + 64 + 1024;  // + alignment slack of the dynamic base

    unsigned char* base;  // 1024-byte aligned
    __device__ unsigned char* q() const { return base; }
    __device__ unsigned char* k(int st) const { return base + kStagesOff + st * kStageBytes; }
    __device__ unsigned char* v(int st) const { return base + kStagesOff + st * kStageBytes + kKBytes; }
    __device__ uint32_t* bad() const { return reinterpret_cast<uint32_t*>(base + kBadOff); }
};

// One tile of the main loop: wait for it (and refill a stage), scrub its
// hidden value rows, its scores, softmax and P. kPvPending: the previous
// tile's deferred P V goes behind its S (a compile-time flag: no branch
// around the products, whose accumulators must not pass through control
// flow or ptxas serializes every wgmma of the kernel).
template <typename T, int KA, bool kPvPending>
__device__ __forceinline__ void tile_step(const AttentionParams& p, const Work& w, const PrefillSmem<KA>& sm, int tile,
                                          uint64_t q_desc, float (&o)[64], uint32_t (&pa)[8][4], Rows& rows, int tid) {
    const int lane = tid & 31, warp = tid >> 5;
    const int st = (tile - w.tile_begin) % kStages<KA>;
    if constexpr (kDeferPV<KA>) {
        // Tile t landed; after the barrier every thread is done with
        // iteration t - 1, whose product read tile t - 2's values: its
        // stage takes tile t + 1.
        cp_async_wait<0>();
        fence_proxy_async_smem();  // this thread's copies -> wgmma's proxy
        __syncthreads();
        if (tile + 1 < w.tile_end) {
            const int next = (tile + 1 - w.tile_begin) % kStages<KA>;
            copy_tile<T, KA>(p, w, tile + 1, sm.k(next), sm.v(next), tid);
        }
        cp_async_commit();
    } else {
        // The other stage was consumed in the previous iteration (closing barrier).
        if (tile + 1 < w.tile_end) copy_tile<T, KA>(p, w, tile + 1, sm.k(st ^ 1), sm.v(st ^ 1), tid);
        cp_async_commit();
        cp_async_wait<1>();
        fence_proxy_async_smem();
        __syncthreads();
    }

    // Positions of the tile the block's first row may not see, loaded
    // (before the end): their value rows are scrubbed, a run per warp.
    const int tile0 = tile * kPrefillTile;
    const int hidden_begin = max(tile0, w.block_min_limit + 1), hidden_end = min(tile0 + kPrefillTile, w.length);
    const bool scrub = hidden_begin < hidden_end;
    if (scrub) {
        if (tid < kPrefillTile / 32) sm.bad()[tid] = 0;
        __syncthreads();
        const int per_warp = (hidden_end - hidden_begin + kThreads / 32 - 1) / (kThreads / 32);
        const int first = hidden_begin - tile0 + warp * per_warp;
        scrub_value_rows<T>(sm.v(st), sm.bad(), first, min(per_warp, hidden_end - tile0 - first), lane);
        fence_proxy_async_smem();  // scrubbed rows -> wgmma's proxy
        __syncthreads();
    }

    // S = Q K^T; with deferral, the previous tile's O += P V behind it.
    float s[64];
    wgmma_fence();
    issue_scores<T, KA>(s, q_desc, smem_desc_sw128(sm.k(st), 16, kSwizzleGroupBytes));
    if constexpr (kPvPending) {
        issue_values<T>(o, pa, sm.v((tile - 1 - w.tile_begin) % kStages<KA>));
        wgmma_wait<1>();
    } else {
        wgmma_wait<0>();
    }
    fence_accumulators(s);

    // Masked only where some row of the block may not see.
    if (tile0 + kPrefillTile - 1 > w.block_min_limit) mask_scores(s, tile0, lane, rows);
    const float2 alpha = softmax_tile(s, rows, p.scale_log2);
    if (scrub) poison_scrubbed(s, sm.bad(), tile0, lane, rows);

    // The previous tile's product is done: O and P may change.
    if constexpr (kPvPending) {
        wgmma_wait<0>();
        fence_accumulators(o);
        fence_fragments(pa);
    }
    rescale_rows(o, alpha);
    pack_probabilities<T>(s, pa);
    if constexpr (!kDeferPV<KA>) {
        fence_accumulators(o);
        wgmma_fence();
        issue_values<T>(o, pa, sm.v(st));
        wgmma_wait<0>();
        fence_accumulators(o);
        fence_fragments(pa);
        __syncthreads();  // both warpgroups are done with this stage
    }
}

// KA: 64-column atoms of a key row (2: 128 wide, 3: 192 wide).
template <typename T, int KA>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_kernel(const __grid_constant__ AttentionParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const PrefillSmem<KA> sm{
        reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
    allow_dependent_launch();
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, warp_in_wg = (tid >> 5) & 3;
    const Work w = prefill::cta_work(p);  // not the decode kernels' cta_work

    // This thread's two accumulator rows (of the block's 128): r_lo, r_lo + 8.
    const int r_lo = wg * 64 + warp_in_wg * 16 + (lane >> 2);
    Rows rows{row_limit(p, w, r_lo), row_limit(p, w, r_lo + 8), -INFINITY, -INFINITY, 0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    uint32_t pa[8][4];  // P of a tile as the A fragments of its 8 products of 16 tokens

    load_queries<T, KA>(p, w, sm.q(), tid);
    if (w.tile_begin < w.tile_end) copy_tile<T, KA>(p, w, w.tile_begin, sm.k(0), sm.v(0), tid);
    cp_async_commit();
    fence_proxy_async_smem();  // Q stores -> wgmma's proxy (published by the first barrier)

    const uint64_t q_desc = smem_desc_sw128(sm.q() + wg * 64 * kSwizzleRowBytes, 16, kSwizzleGroupBytes);
    if (w.tile_begin < w.tile_end) tile_step<T, KA, false>(p, w, sm, w.tile_begin, q_desc, o, pa, rows, tid);
    for (int tile = w.tile_begin + 1; tile < w.tile_end; ++tile)
        tile_step<T, KA, kDeferPV<KA>>(p, w, sm, tile, q_desc, o, pa, rows, tid);
    if constexpr (kDeferPV<KA>) {
        if (w.tile_end > w.tile_begin) {  // the last tile's product
            fence_accumulators(o);
            wgmma_fence();
            issue_values<T>(o, pa, sm.v((w.tile_end - 1 - w.tile_begin) % kStages<KA>));
            wgmma_wait<0>();
            fence_accumulators(o);
            fence_fragments(pa);
        }
    }
    cp_async_wait<0>();
    write_rows(p, w, o, rows, p.scale_log2, r_lo, lane);
#endif
}

template <int KA>
const void* kernel_for(gqla_dtype cache) {
    return cache == GQLA_DTYPE_F16 ? reinterpret_cast<const void*>(&prefill_wgmma_kernel<__half, KA>)
                                   : reinterpret_cast<const void*>(&prefill_wgmma_kernel<__nv_bfloat16, KA>);
}

const void* kernel_for(gqla_dtype cache, int key_dim) {
    return key_dim == 192 ? kernel_for<3>(cache) : kernel_for<2>(cache);
}

}  // namespace

bool prefill_wgmma_available(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

bool prefill_wgmma_fits(const AttentionParams& p) {
    const int dk = p.k1.dim + p.k2.dim;
    return (p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16) && !p.v_aliases_k1 &&
           p.v.dim == kValueDim && (dk == 128 || dk == 192) && p.k1.dim % 8 == 0 && p.k2.dim % 8 == 0 &&
           p.heads_per_group > 0 && p.num_heads % p.heads_per_group == 0;
}

int prefill_wgmma_smem_bytes(int key_dim) { return key_dim == 192 ? PrefillSmem<3>::kBytes : PrefillSmem<2>::kBytes; }

void prepare_prefill_wgmma_kernels() {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
        for (int dk : {128, 192})
            check_cuda(cudaFuncSetAttribute(kernel_for(t, dk), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            prefill_wgmma_smem_bytes(dk)),
                       "cudaFuncSetAttribute(prefill_wgmma_kernel)");
}

void launch_prefill_wgmma(gqla_dtype cache, const AttentionParams& p, dim3 grid, cudaStream_t stream) {
    const int dk = p.k1.dim + p.k2.dim;
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(kernel_for(cache, dk), grid, dim3(kThreads), args,
                                static_cast<size_t>(prefill_wgmma_smem_bytes(dk)), stream),
               "launch prefill_wgmma_kernel");
}

}  // namespace gqla::cuda

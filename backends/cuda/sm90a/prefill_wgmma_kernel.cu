// SPDX-License-Identifier: Apache-2.0
// Prefill attention on Hopper warpgroup MMAs (see prefill_wgmma.hpp).
//
// One CTA = one sequence x one group x 128 query rows (heads x tokens, head
// fastest) x one split of the key tiles those rows may see. Warp-specialized:
// a producer warpgroup fills the stages with K/V tiles of 128 tokens in the
// 128B swizzle wgmma reads, and signals each stage's "full" barrier when it
// has landed: tiles every row of the block sees by TMA (boxes of 16 tokens
// through the page table, issued by one warp), the others (the diagonal and
// the sequence's end) by 16-byte cp.async from all its threads, slots past
// the end zero-filled. Two consumer warpgroups, 64 rows each, share every
// tile and give its stage back on an "empty" barrier once both products
// that read it are done:
//   S = Q K^T     m64n128k16 per 16 key columns, Q and K in shared memory
//   softmax       online, f32, log2 domain, on the accumulators: each
//                 thread holds two rows' 32 scores, a quad holds the row
//   O += P V      m64n128k16 per 16 tokens, P straight from the score
//                 accumulators (registers), V read MN-major (transposed)
// The consumers take turns issuing their products (two named barriers), so
// one warpgroup's softmax runs on the CUDA cores while the other's products
// run on the tensor cores; 128-wide keys also defer each tile's P V behind
// the next tile's S inside a warpgroup. No CTA-wide barrier in the loop.
// Only the tiles that hold a position some row of the block may not see are
// masked (select, never arithmetic); tiles past the last row's limit are
// never loaded. Row blocks are scheduled latest-queries first: they see the
// most tiles.
// Non-finite values (see nonfinite.cuh): in the masked tiles, the producer
// scrubs the value rows of positions the block's first row may not see once
// they land, and each row that may see a scrubbed position gets probability
// NaN for it, so a NaN/Inf reaches exactly the outputs that attend to it.
#include <cstdint>

#include "../cuda_status.hpp"
#include "../prefill_wgmma.hpp"
#include "../tma_primitives.cuh"
#include "prefill_wgmma_phases.cuh"

namespace gqla::cuda {

namespace {

using namespace prefill;

// 128-wide keys defer each tile's P V to the next iteration, after that
// tile's S = Q K^T is issued, so a warpgroup's own softmax also overlaps its
// previous product; that keeps three tiles in shared memory (192-wide keys
// do not fit three: they multiply in order, two stages).
template <int KA>
constexpr bool kDeferPV = KA == 2;
template <int KA>
constexpr int kStages = kDeferPV<KA> ? 3 : 2;

// Registers per thread after the hand-over (the launch gives 168 each):
// the producer only computes addresses.
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerRegisters * kProducerThreads + kConsumerRegisters * kConsumerThreads <= 65536,
              "register file of one SM");

// Named barriers (0 is __syncthreads): the consumers' turns, the producer's own.
constexpr int kBarTurn = 1;  // + consumer warpgroup
constexpr int kBarProducer = 3;

// Shared memory: Q, then per stage K and V, the scrubbed-token masks and the
// stage barriers. Every atom is 1024-byte aligned (the swizzle period), as
// wgmma requires.
template <int KA>
struct PrefillSmem {
    static constexpr int kQBytes = KA * kAtomBytes;
    static constexpr int kKBytes = KA * kAtomBytes;
    static constexpr int kVBytes = kValueAtoms * kAtomBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;
    static constexpr int kStagesOff = kQBytes;
    static constexpr int kBadOff = kStagesOff + kStages<KA> * kStageBytes;
    static constexpr int kBadWords = kPrefillTile / 32;
    static constexpr int kBarOff = kBadOff + kStages<KA> * kBadWords * 4;
    static constexpr int kBytes = kBarOff + 2 * kStages<KA> * 8 + 1024;  // + alignment slack of the dynamic base

    unsigned char* base;  // 1024-byte aligned
    __device__ unsigned char* q() const { return base; }
    __device__ unsigned char* k(int st) const { return base + kStagesOff + st * kStageBytes; }
    __device__ unsigned char* v(int st) const { return base + kStagesOff + st * kStageBytes + kKBytes; }
    __device__ uint32_t* bad(int st) const { return reinterpret_cast<uint32_t*>(base + kBadOff) + st * kBadWords; }
    __device__ uint64_t* full(int st) const { return reinterpret_cast<uint64_t*>(base + kBarOff) + st; }
    __device__ uint64_t* empty(int st) const { return reinterpret_cast<uint64_t*>(base + kBarOff) + kStages<KA> + st; }
};

// Positions [begin, end) of tile `tile` the block's first row may not see,
// loaded (before the sequence's end): their value rows are scrubbed.
struct HiddenRange {
    int begin, end;
    __device__ bool any() const { return begin < end; }
};
__device__ __forceinline__ HiddenRange hidden_range(const Work& w, int tile) {
    const int tile0 = tile * kPrefillTile;
    return {max(tile0, w.block_min_limit + 1), min(tile0 + kPrefillTile, w.length)};
}

// Tile `tile` as TMA boxes of 64 columns x 16 tokens (the layer's narrow-
// kernel maps) issued by one warp, a box per lane and pass; the 16 tokens
// of a box lie in one page (pages are a multiple of 16 tokens where the maps
// exist), and a box lands at the swizzle position its rows have in the atom.
template <int KA>
__device__ __forceinline__ void load_tile_boxes(const AttentionParams& p, const NarrowTmaMaps& maps, const Work& w,
                                                int tile, unsigned char* dK, unsigned char* dV, uint64_t* bar,
                                                int lane) {
    constexpr int kBoxRows = 16, kChunks = kPrefillTile / kBoxRows;
#pragma unroll
    for (int i = lane; i < (KA + kValueAtoms) * kChunks; i += 32) {
        const int atom = i / kChunks, chunk = i % kChunks;
        const int64_t tb = token_base(w.table, tile * kPrefillTile + chunk * kBoxRows, p.page_size, p.page_shift);
        const int page = static_cast<int>(tb >> 32), slot = static_cast<int>(tb & 0xffffffff);
        const CUtensorMap* map;
        PoolRows rows;
        int x;
        unsigned char* dst;
        if (atom < KA) {
            const int col = atom * 64;
            const bool first = col < p.k1.dim;
            map = first ? &maps.k1 : &maps.k2;
            rows = first ? maps.k1_rows : maps.k2_rows;
            x = first ? col : col - p.k1.dim;
            dst = dK + atom * kAtomBytes;
        } else {
            map = &maps.v;
            rows = maps.v_rows;
            x = (atom - KA) * 64;
            dst = dV + (atom - KA) * kAtomBytes;
        }
        tma_load_2d(dst + chunk * kBoxRows * kSwizzleRowBytes, map, x,
                    page * rows.page_rows + w.g * rows.group_rows + slot, bar);
    }
}

// The producer warpgroup: every tile of the CTA's range into the stages in
// turn, a stage refilled once the consumers gave it back. A tile every row
// of the block sees (all but the last one or two) comes by TMA when the
// layer has maps: one warp, its "full" barrier completing on the bytes.
// Other tiles are copied by all 128 threads with cp.async (slots past the
// sequence's end zero-filled), their hidden value rows scrubbed once the
// copies landed, and the barrier completed by hand.
template <typename T, int KA>
__device__ __forceinline__ void produce_tiles(const AttentionParams& p, const NarrowTmaMaps& maps, const Work& w,
                                              const PrefillSmem<KA>& sm, int ptid) {
    const int lane = ptid & 31, warp = ptid >> 5;
    for (int tile = w.tile_begin; tile < w.tile_end; ++tile) {
        const int i = tile - w.tile_begin, st = i % kStages<KA>;
        // Every producer thread waits for every stage in order, also where
        // only one warp loads it: a parity wait can tell only the current
        // phase from the one before, so no thread may skip phases.
        mbarrier_wait(sm.empty(st), ((i / kStages<KA>)&1) ^ 1);
        if (maps.valid && (tile + 1) * kPrefillTile - 1 <= w.block_min_limit) {
            if (warp == 0) {
                if (lane == 0) mbarrier_arrive_expect_tx(sm.full(st), PrefillSmem<KA>::kStageBytes);
                __syncwarp();
                load_tile_boxes<KA>(p, maps, w, tile, sm.k(st), sm.v(st), sm.full(st), lane);
            }
            continue;
        }
        copy_tile<T, KA>(p, w, tile, sm.k(st), sm.v(st), ptid);
        cp_async_commit();
        cp_async_wait<0>();
        const HiddenRange hidden = hidden_range(w, tile);
        if (hidden.any()) {
            if (ptid < PrefillSmem<KA>::kBadWords) sm.bad(st)[ptid] = 0;
            named_barrier_sync(kBarProducer, kProducerThreads);  // every copy landed, mask cleared
            const int tile0 = tile * kPrefillTile;
            const int per_warp = (hidden.end - hidden.begin + kProducerWarps - 1) / kProducerWarps;
            const int first = hidden.begin - tile0 + warp * per_warp;
            scrub_value_rows<T>(sm.v(st), sm.bad(st), first, min(per_warp, hidden.end - tile0 - first), lane);
        }
        fence_proxy_async_smem();  // copies and scrubbed rows -> wgmma's proxy
        named_barrier_sync(kBarProducer, kProducerThreads);
        if (ptid == 0) mbarrier_arrive(sm.full(st));
    }
}

// One tile of a consumer warpgroup: wait for its stage, take the turn to
// issue S = Q K^T (and, deferred, the previous tile's O += P V), hand the
// turn over, then the softmax and P. kPvPending: the previous tile's P V is
// still to be issued (a compile-time flag: no branch around the products,
// whose accumulators must not pass through control flow or ptxas
// serializes every wgmma of the kernel).
template <typename T, int KA, bool kPvPending>
__device__ __forceinline__ void consume_tile(const AttentionParams& p, const Work& w, const PrefillSmem<KA>& sm,
                                             int tile, uint64_t q_desc, float (&o)[64], uint32_t (&pa)[8][4],
                                             Rows& rows, bool turns, int wg, int lane) {
    const int i = tile - w.tile_begin, st = i % kStages<KA>;
    const int prev_st = (i + kStages<KA> - 1) % kStages<KA>;
    mbarrier_wait(sm.full(st), (i / kStages<KA>)&1);
    fence_proxy_async_smem();  // the producer's copies -> wgmma's proxy

    float s[64];
    if (turns) named_barrier_sync(kBarTurn + wg, kConsumerThreads);
    wgmma_fence();
    issue_scores<T, KA>(s, q_desc, smem_desc_sw128(sm.k(st), 16, kSwizzleGroupBytes));
    if constexpr (kPvPending) issue_values<T>(o, pa, sm.v(prev_st));
    // The other warpgroup's turn; the second one skips its last hand-over,
    // which nobody would wait for.
    if (turns && (wg == 0 || tile + 1 < w.tile_end)) named_barrier_arrive(kBarTurn + (wg ^ 1), kConsumerThreads);
    if constexpr (kPvPending) {
        wgmma_wait<1>();
    } else {
        wgmma_wait<0>();
    }
    fence_accumulators(s);

    // Masked only where some row of the block may not see.
    const int tile0 = tile * kPrefillTile;
    if (tile0 + kPrefillTile - 1 > w.block_min_limit) mask_scores(s, tile0, lane, rows);
    const float2 alpha = softmax_tile(s, rows, p.scale_log2);
    if (hidden_range(w, tile).any()) poison_scrubbed(s, sm.bad(st), tile0, lane, rows);

    if constexpr (kPvPending) {
        // The previous tile's product is done: O and P may change, its stage goes back.
        wgmma_wait<0>();
        fence_accumulators(o);
        fence_fragments(pa);
        if (lane == 0) mbarrier_arrive(sm.empty(prev_st));
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
        if (lane == 0) mbarrier_arrive(sm.empty(st));
    }
}

// KA: 64-column atoms of a key row (2: 128 wide, 3: 192 wide).
template <typename T, int KA>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ NarrowTmaMaps maps,
                         int turns) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    const PrefillSmem<KA> sm{
        reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
    allow_dependent_launch();
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, warp_in_wg = (tid >> 5) & 3;
    const Work w = prefill::cta_work(p);  // not the decode kernels' cta_work

    if (tid == 0) {
        for (int st = 0; st < kStages<KA>; ++st) {
            mbarrier_init(sm.full(st), 1);
            mbarrier_init(sm.empty(st), kConsumerWarps);
        }
        mbarrier_init_fence();
    }
    load_queries<T, KA>(p, w, sm.q(), tid);
    fence_proxy_async_smem();  // Q stores -> wgmma's proxy
    __syncthreads();

    if (tid >= kConsumerThreads) {
        warpgroup_release_registers<kProducerRegisters>();
        produce_tiles<T, KA>(p, maps, w, sm, tid - kConsumerThreads);
        return;
    }
    warpgroup_claim_registers<kConsumerRegisters>();

    // This thread's two accumulator rows (of the block's 128): r_lo, r_lo + 8.
    const int r_lo = wg * 64 + warp_in_wg * 16 + (lane >> 2);
    Rows rows{row_limit(p, w, r_lo), row_limit(p, w, r_lo + 8), -INFINITY, -INFINITY, 0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    uint32_t pa[8][4];  // P of a tile as the A fragments of its 8 products of 16 tokens

    const uint64_t q_desc = smem_desc_sw128(sm.q() + wg * 64 * kSwizzleRowBytes, 16, kSwizzleGroupBytes);
    if (w.tile_begin < w.tile_end) {
        if (turns && wg == 1) named_barrier_arrive(kBarTurn, kConsumerThreads);  // the first warpgroup goes first
        consume_tile<T, KA, false>(p, w, sm, w.tile_begin, q_desc, o, pa, rows, turns != 0, wg, lane);
    }
    for (int tile = w.tile_begin + 1; tile < w.tile_end; ++tile)
        consume_tile<T, KA, kDeferPV<KA>>(p, w, sm, tile, q_desc, o, pa, rows, turns != 0, wg, lane);
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

void launch_prefill_wgmma(gqla_dtype cache, const AttentionParams& p, const NarrowTmaMaps& maps, bool turns, dim3 grid,
                          cudaStream_t stream) {
    const int dk = p.k1.dim + p.k2.dim;
    int turns_arg = turns ? 1 : 0;
    void* args[] = {const_cast<AttentionParams*>(&p), const_cast<NarrowTmaMaps*>(&maps), &turns_arg};
    check_cuda(cudaLaunchKernel(kernel_for(cache, dk), grid, dim3(kThreads), args,
                                static_cast<size_t>(prefill_wgmma_smem_bytes(dk)), stream),
               "launch prefill_wgmma_kernel");
}

}  // namespace gqla::cuda

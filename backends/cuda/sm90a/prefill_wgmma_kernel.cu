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
// 8-bit (e4m3) GQA caches of 128-wide keys (FP8 = true): the producer
// copies each tile's stored bytes and scales into staging buffers by
// cp.async and widens them into the bf16 stages the same consumers read
// (prefill_wgmma_fp8.cuh); two stages, P V in order.
// Non-finite values (see nonfinite.cuh): in the masked tiles, the producer
// scrubs the value rows of positions the block's first row may not see once
// they land, and each row that may see a scrubbed position gets probability
// NaN for it, so a NaN/Inf reaches exactly the outputs that attend to it.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../cuda_status.hpp"
#include "../prefill_wgmma.hpp"
#include "../tma_primitives.cuh"
#include "prefill_wgmma_fp8.cuh"
#include "prefill_wgmma_phases.cuh"

namespace gqla::cuda {

namespace {

using namespace prefill;

// 128-wide keys defer each tile's P V to the next iteration, after that
// tile's S = Q K^T is issued, so a warpgroup's own softmax also overlaps its
// previous product; that keeps three tiles in shared memory (192-wide keys
// do not fit three: they multiply in order, two stages). An 8-bit cache
// (FP8) also takes two stages: its staging buffers take the third's room,
// and in order a stage frees a whole tile earlier, which its widening needs.
template <int KA, bool FP8>
constexpr bool kDeferPV = KA == 2 && !FP8;
template <int KA, bool FP8>
constexpr int kStages = kDeferPV<KA, FP8> ? 3 : 2;

// Registers per thread after the hand-over: the launch gives each thread
// 168 (65536 / 384, in steps of 8), and the consumers can only claim what
// the producer gave back (setmaxnreg moves registers within the CTA), so
// the producer, which only computes addresses (or widens 8-bit rows), keeps
// 56 and the consumers get 224.
constexpr int kLaunchRegisters = 168;
constexpr int kProducerRegisters = 56;
constexpr int kConsumerRegisters = 224;
static_assert(kProducerThreads * (kLaunchRegisters - kProducerRegisters) >=
                  kConsumerThreads * (kConsumerRegisters - kLaunchRegisters),
              "the consumers' registers come from the producer's");

// Named barriers (0 is __syncthreads): the consumers' turns, the producer's own.
constexpr int kBarTurn = 1;  // + consumer warpgroup
constexpr int kBarProducer = 3;

// Shared memory: Q, then per stage K and V, the scrubbed-token masks and the
// stage barriers; for an 8-bit cache then two staging buffers of stored
// bytes and one of scales. Every atom is 1024-byte aligned (the swizzle
// period), as wgmma requires.
template <int KA, bool FP8>
struct PrefillSmem {
    static constexpr int kQBytes = KA * kAtomBytes;
    static constexpr int kKBytes = KA * kAtomBytes;
    static constexpr int kVBytes = kValueAtoms * kAtomBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;
    static constexpr int kStagesOff = kQBytes;
    static constexpr int kBadOff = kStagesOff + kStages<KA, FP8> * kStageBytes;
    static constexpr int kBadWords = kPrefillTile / 32;
    static constexpr int kBarOff = kBadOff + kStages<KA, FP8> * kBadWords * 4;
    static constexpr int kStagingOff = kBarOff + 2 * kStages<KA, FP8> * 8;
    static constexpr int kScalesOff = kStagingOff + (FP8 ? 2 * kFp8StagingBytes : 0);
    static constexpr int kUsed = kScalesOff + (FP8 ? kFp8ScaleBytes : 0);
    static constexpr int kBytes = kUsed + 1024;  // + alignment slack of the dynamic base
    static_assert(kBytes <= 227 * 1024, "shared memory of one CTA");
    static_assert(!FP8 || KA == 2, "8-bit caches: keys 128 wide");

    unsigned char* base;  // 1024-byte aligned
    __device__ unsigned char* q() const { return base; }
    __device__ unsigned char* k(int st) const { return base + kStagesOff + st * kStageBytes; }
    __device__ unsigned char* v(int st) const { return base + kStagesOff + st * kStageBytes + kKBytes; }
    __device__ uint32_t* bad(int st) const { return reinterpret_cast<uint32_t*>(base + kBadOff) + st * kBadWords; }
    __device__ uint64_t* full(int st) const { return reinterpret_cast<uint64_t*>(base + kBarOff) + st; }
    __device__ uint64_t* empty(int st) const {
        return reinterpret_cast<uint64_t*>(base + kBarOff) + kStages<KA, FP8> + st;
    }
    __device__ unsigned char* staging(int buf) const { return base + kStagingOff + buf * kFp8StagingBytes; }
    __device__ float* scales() const { return reinterpret_cast<float*>(base + kScalesOff); }
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

// A stage the producer's threads wrote themselves (copied, or widened from
// 8-bit bytes) once each thread's part is in place: the value rows the
// block's first row may not see scrubbed (their bits in the stage's mask),
// the writes ordered before wgmma's reads, the "full" barrier completed.
template <typename T, int KA, bool FP8>
__device__ __forceinline__ void complete_written_stage(const Work& w, const PrefillSmem<KA, FP8>& sm, int tile, int st,
                                                       int ptid) {
    const int lane = ptid & 31, warp = ptid >> 5;
    const HiddenRange hidden = hidden_range(w, tile);
    if (hidden.any()) {
        if (ptid < PrefillSmem<KA, FP8>::kBadWords) sm.bad(st)[ptid] = 0;
        named_barrier_sync(kBarProducer, kProducerThreads);  // every row in place, mask cleared
        const int tile0 = tile * kPrefillTile;
        const int per_warp = (hidden.end - hidden.begin + kProducerWarps - 1) / kProducerWarps;
        const int first = hidden.begin - tile0 + warp * per_warp;
        scrub_value_rows<T>(sm.v(st), sm.bad(st), first, min(per_warp, hidden.end - tile0 - first), lane);
    }
    fence_proxy_async_smem();  // copies, widened and scrubbed rows -> wgmma's proxy
    named_barrier_sync(kBarProducer, kProducerThreads);
    if (ptid == 0) mbarrier_arrive(sm.full(st));
}

// The producer warpgroup: every tile of the CTA's range into the stages in
// turn, a stage refilled once the consumers gave it back. A tile every row
// of the block sees (all but the last one or two) comes by TMA when the
// layer has maps: one warp, its "full" barrier completing on the bytes.
// Other tiles are copied by all 128 threads with cp.async (slots past the
// sequence's end zero-filled), their hidden value rows scrubbed once the
// copies landed, and the barrier completed by hand.
template <typename T, int KA, bool FP8>
__device__ __forceinline__ void produce_tiles(const AttentionParams& p, const NarrowTmaMaps& maps, const Work& w,
                                              const PrefillSmem<KA, FP8>& sm, int ptid) {
    const int lane = ptid & 31, warp = ptid >> 5;
    for (int tile = w.tile_begin; tile < w.tile_end; ++tile) {
        const int i = tile - w.tile_begin, st = i % kStages<KA, FP8>;
        // Every producer thread waits for every stage in order, also where
        // only one warp loads it: a parity wait can tell only the current
        // phase from the one before, so no thread may skip phases.
        mbarrier_wait(sm.empty(st), ((i / kStages<KA, FP8>)&1) ^ 1);
        if (maps.valid && (tile + 1) * kPrefillTile - 1 <= w.block_min_limit) {
            if (warp == 0) {
                if (lane == 0) mbarrier_arrive_expect_tx(sm.full(st), PrefillSmem<KA, FP8>::kStageBytes);
                __syncwarp();
                load_tile_boxes<KA>(p, maps, w, tile, sm.k(st), sm.v(st), sm.full(st), lane);
            }
            continue;
        }
        copy_tile<T, KA>(p, w, tile, sm.k(st), sm.v(st), ptid);
        cp_async_commit();
        cp_async_wait<0>();
        complete_written_stage<T, KA, FP8>(w, sm, tile, st, ptid);
    }
}

// The producer warpgroup over an 8-bit cache: each tile's stored bytes and
// scales come by cp.async into staging (the bytes of the next two tiles in
// flight, two buffers; the scales of the next one, one buffer), and once a
// stage is free the tile is widened into it in bf16 with its scales. The
// cp.async groups, oldest first: bytes 0, scales 0, bytes 1, then per tile
// i: scales i + 1, bytes i + 2; so when tile i is widened, all but the
// newest group (bytes i + 1) must have landed.
template <int KA, bool FP8>
__device__ __forceinline__ void produce_fp8_tiles(const AttentionParams& p, const Work& w,
                                                  const PrefillSmem<KA, FP8>& sm, int ptid) {
    const int n = w.tile_end - w.tile_begin;
    if (n <= 0) return;
    copy_fp8_rows(p, w, w.tile_begin, sm.staging(0), ptid);
    cp_async_commit();
    copy_fp8_scales(p, w, w.tile_begin, sm.scales(), ptid);
    cp_async_commit();
    if (n > 1) copy_fp8_rows(p, w, w.tile_begin + 1, sm.staging(1), ptid);
    cp_async_commit();  // empty when n == 1: the group count stays the same
    for (int i = 0; i < n; ++i) {
        const int tile = w.tile_begin + i, st = i % kStages<KA, FP8>;
        cp_async_wait<1>();
        named_barrier_sync(kBarProducer, kProducerThreads);  // every thread's copies of tile i landed
        const Fp8RowScales sc = read_fp8_scales(sm.scales(), ptid);
        named_barrier_sync(kBarProducer, kProducerThreads);  // the scale buffer may refill
        if (i + 1 < n) copy_fp8_scales(p, w, tile + 1, sm.scales(), ptid);
        cp_async_commit();
        mbarrier_wait(sm.empty(st), ((i / kStages<KA, FP8>)&1) ^ 1);
        widen_fp8_tile(sm.staging(i & 1), sc, sm.k(st), sm.v(st), ptid);
        complete_written_stage<__nv_bfloat16, KA, FP8>(w, sm, tile, st, ptid);  // its barrier: staging i read by all
        if (i + 2 < n) copy_fp8_rows(p, w, tile + 2, sm.staging(i & 1), ptid);
        cp_async_commit();
    }
    cp_async_wait<0>();
}

// One tile of a consumer warpgroup: wait for its stage, take the turn to
// issue S = Q K^T (and, deferred, the previous tile's O += P V), hand the
// turn over, then the softmax and P. kPvPending: the previous tile's P V is
// still to be issued (a compile-time flag: no branch around the products,
// whose accumulators must not pass through control flow or ptxas
// serializes every wgmma of the kernel).
template <typename T, int KA, bool FP8, bool kPvPending>
__device__ __forceinline__ void consume_tile(const AttentionParams& p, const Work& w, const PrefillSmem<KA, FP8>& sm,
                                             int tile, uint64_t q_desc, float (&o)[64], uint32_t (&pa)[8][4],
                                             Rows& rows, bool turns, int wg, int lane) {
    const int i = tile - w.tile_begin, st = i % kStages<KA, FP8>;
    const int prev_st = (i + kStages<KA, FP8> - 1) % kStages<KA, FP8>;
    mbarrier_wait(sm.full(st), (i / kStages<KA, FP8>)&1);
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
    if constexpr (!kDeferPV<KA, FP8>) {
        fence_accumulators(o);
        wgmma_fence();
        issue_values<T>(o, pa, sm.v(st));
        wgmma_wait<0>();
        fence_accumulators(o);
        fence_fragments(pa);
        if (lane == 0) mbarrier_arrive(sm.empty(st));
    }
}

// KA: 64-column atoms of a key row (2: 128 wide, 3: 192 wide). FP8: the
// cache is e4m3 (T = bf16: the tiles it is widened into).
template <typename T, int KA, bool FP8>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ NarrowTmaMaps maps,
                         int turns) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    static_assert(!FP8 || std::is_same<T, __nv_bfloat16>::value, "8-bit caches widen to bf16");
    const PrefillSmem<KA, FP8> sm{
        reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
    allow_dependent_launch();
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, warp_in_wg = (tid >> 5) & 3;
    const Work w = prefill::cta_work(p);  // not the decode kernels' cta_work

    if (tid == 0) {
        for (int st = 0; st < kStages<KA, FP8>; ++st) {
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
        if constexpr (FP8) {
            produce_fp8_tiles<KA, FP8>(p, w, sm, tid - kConsumerThreads);
        } else {
            produce_tiles<T, KA, FP8>(p, maps, w, sm, tid - kConsumerThreads);
        }
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
        consume_tile<T, KA, FP8, false>(p, w, sm, w.tile_begin, q_desc, o, pa, rows, turns != 0, wg, lane);
    }
    for (int tile = w.tile_begin + 1; tile < w.tile_end; ++tile)
        consume_tile<T, KA, FP8, kDeferPV<KA, FP8>>(p, w, sm, tile, q_desc, o, pa, rows, turns != 0, wg, lane);
    if constexpr (kDeferPV<KA, FP8>) {
        if (w.tile_end > w.tile_begin) {  // the last tile's product
            fence_accumulators(o);
            wgmma_fence();
            issue_values<T>(o, pa, sm.v((w.tile_end - 1 - w.tile_begin) % kStages<KA, FP8>));
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
    return cache == GQLA_DTYPE_F16 ? reinterpret_cast<const void*>(&prefill_wgmma_kernel<__half, KA, false>)
                                   : reinterpret_cast<const void*>(&prefill_wgmma_kernel<__nv_bfloat16, KA, false>);
}

const void* kernel_for(gqla_dtype cache, int key_dim) {
    if (cache == GQLA_DTYPE_FP8_E4M3)
        return reinterpret_cast<const void*>(&prefill_wgmma_kernel<__nv_bfloat16, 2, true>);
    return key_dim == 192 ? kernel_for<3>(cache) : kernel_for<2>(cache);
}

// The dtypes and key widths the kernel is built for.
struct PrefillVariant {
    gqla_dtype cache;
    int key_dim;
};
constexpr PrefillVariant kVariants[] = {{GQLA_DTYPE_BF16, 128},
                                        {GQLA_DTYPE_BF16, 192},
                                        {GQLA_DTYPE_F16, 128},
                                        {GQLA_DTYPE_F16, 192},
                                        {GQLA_DTYPE_FP8_E4M3, 128}};

}  // namespace

bool prefill_wgmma_available(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

bool prefill_wgmma_fits(const AttentionParams& p) {
    const int dk = p.k1.dim + p.k2.dim;
    // 8-bit caches: the GQA kind's 128-wide keys (no rope part).
    const bool dtype_ok = p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16 ||
                          (p.cache_dtype == GQLA_DTYPE_FP8_E4M3 && p.k1.dim == 128 && p.k2.dim == 0);
    return dtype_ok && !p.v_aliases_k1 && p.v.dim == kValueDim && (dk == 128 || dk == 192) && p.k1.dim % 8 == 0 &&
           p.k2.dim % 8 == 0 && p.heads_per_group > 0 && p.num_heads % p.heads_per_group == 0;
}

int prefill_wgmma_smem_bytes(gqla_dtype cache, int key_dim) {
    if (cache == GQLA_DTYPE_FP8_E4M3) return PrefillSmem<2, true>::kBytes;
    return key_dim == 192 ? PrefillSmem<3, false>::kBytes : PrefillSmem<2, false>::kBytes;
}

int prefill_wgmma_max_smem_bytes() {
    int most = 0;
    for (const PrefillVariant& v : kVariants) most = std::max(most, prefill_wgmma_smem_bytes(v.cache, v.key_dim));
    return most;
}

void prepare_prefill_wgmma_kernels() {
    for (const PrefillVariant& v : kVariants)
        check_cuda(cudaFuncSetAttribute(kernel_for(v.cache, v.key_dim), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        prefill_wgmma_smem_bytes(v.cache, v.key_dim)),
                   "cudaFuncSetAttribute(prefill_wgmma_kernel)");
}

void launch_prefill_wgmma(gqla_dtype cache, const AttentionParams& p, const NarrowTmaMaps& maps, bool turns, dim3 grid,
                          cudaStream_t stream) {
    const int dk = p.k1.dim + p.k2.dim;
    int turns_arg = turns ? 1 : 0;
    void* args[] = {const_cast<AttentionParams*>(&p), const_cast<NarrowTmaMaps*>(&maps), &turns_arg};
    check_cuda(cudaLaunchKernel(kernel_for(cache, dk), grid, dim3(kThreads), args,
                                static_cast<size_t>(prefill_wgmma_smem_bytes(cache, dk)), stream),
               "launch prefill_wgmma_kernel");
}

}  // namespace gqla::cuda

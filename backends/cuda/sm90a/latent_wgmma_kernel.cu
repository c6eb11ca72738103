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
// with zero fill, so no stale pool row ever reaches the products.
// Hand-offs (named barriers: producers arrive, consumers sync):
//   K_FULL_CP  WG1 -> WG0      a copied (not TMA) tile landed; TMA tiles
//                              complete on their stage's mbarrier instead
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
#include <cooperative_groups.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "../attention_common.cuh"
#include "../cuda_status.hpp"
#include "../latent_wgmma.hpp"
#include "../launch_config.hpp"
#include "../nonfinite.cuh"
#include "../tensor_maps.hpp"
#include "../tma_primitives.cuh"
#include "wgmma_primitives.cuh"

namespace gqla::cuda {

namespace {

constexpr int kLatentDim = 512;                             // value width = latent width
constexpr int kAtomBytes = kLatentRows * kSwizzleRowBytes;  // 64 rows x 64 columns
constexpr int kRopeDim = 64;
constexpr int kKeyAtoms = (kLatentDim + kRopeDim) / 64;  // 9: compile-time trip counts keep wgmma asynchronous
constexpr int kKeySteps = kKeyAtoms * 4;                 // k16 steps of the score product
constexpr int kStages = 2;
constexpr int kStageBytes = kKeyAtoms * kAtomBytes;
constexpr int kWgThreads = 128;
// Shared memory of the kernel for kRows query rows (64, or 32 for the
// transposed products): Q (kRows x 576), the two tile stages, P (kRows x 64
// tokens, or its transpose), then rescale [64], row max [64], row sum [64],
// limit [64] and, transposed, the warps' column maxima [2][4][32] and sums
// [4][32]; the causal tail's scrubbed-token masks [2][4]; one mbarrier per
// stage.
template <int kRows>
struct LatentSmem {
    static constexpr int kQAtomBytes = kRows * kSwizzleRowBytes;  // kRows rows x 64 columns
    static constexpr int kQOff = 0;
    static constexpr int kKOff = kQOff + kKeyAtoms * kQAtomBytes;
    static constexpr int kPOff = kKOff + kStages * kStageBytes;
    static constexpr int kXOff = kPOff + kQAtomBytes;
    static constexpr int kXBytes = 4 * 64 * 4 + (kRows == 64 ? 0 : 3 * 4 * 32 * 4);
    static constexpr int kTailOff = kXOff + kXBytes;
    static constexpr int kBarOff = kTailOff + 2 * 4 * 4;
    static constexpr int kUsed = kBarOff + kStages * 8;
    static constexpr int kBytes = kUsed + 1024;  // slack to align the base to the swizzle period
    static_assert(kRows == 64 || kRows == 32, "query rows per CTA");
    static_assert(kQAtomBytes % 1024 == 0 && kKOff % 1024 == 0 && kPOff % 1024 == 0, "swizzle-period alignment");
    static_assert(kBytes <= 227 * 1024, "shared memory of one CTA");
};
// Split merge in a cluster: the staged rows [64][520] f32 fill the first 130
// KiB of the stages (8 floats of padding per row, so the fragment stores of
// 8 rows at a time meet no bank conflict), its weights and row offsets follow.
constexpr int kStagedRowFloats = kLatentDim + 8;
constexpr int kMergeScratchOff = kLatentRows * kStagedRowFloats * 4;
constexpr int kMergeOffsetsOff = kMergeScratchOff + kLatentRows * kMaxLatentClusterSplits * 4;
static_assert(kMergeOffsetsOff % 8 == 0 && kMergeOffsetsOff + kLatentRows * 8 <= kStages * kStageBytes,
              "merge scratch");
static_assert(kLatentRows == 64 && kLatentTile == 64 && kLatentThreads == 3 * kWgThreads, "tiling constants");
static_assert(kLatentRowsTransposed == 32, "the transposed products are m64n32");

// Named barrier ids (0 is __syncthreads).
constexpr int kBarKFullCopy = 1;
constexpr int kBarPReady = 2;
constexpr int kBarPFree = 3;
constexpr int kBarKEmpty = 4;
constexpr int kBarColumnMax = 5;  // WG0 (transposed): the warps' column maxima written
constexpr int kBarEnd = 6;        // all: products done, row max / sum written
constexpr int kBarMerge = 7;      // all: cluster merge weights written
constexpr int kBarTailMask = 8;   // WG0 (64-row products): the warps' scrubbed-token masks written

template <typename T>
__device__ __forceinline__ uint32_t pack_two(float lo, float hi) {
    return pack_pair(lo, hi, static_cast<T*>(nullptr));
}

// Called by a whole warp of WG0 after the scores of `tile`, with its stage
// landed: zeroes the non-finite latent elements (the values) of the tile's
// rows 16 wi .. 16 wi + 15 whose tokens lie in [first_hidden, length), and
// returns (to every lane) a mask of those rows that had one (bit k: row
// 16 wi + k).
template <typename T>
__device__ __forceinline__ uint32_t scrub_tail_rows(unsigned char* stage, int tile, int first_hidden, int length,
                                                    int wi, int lane) {
    constexpr int kPiecesPerRow = kLatentDim / 8;  // 16-byte pieces of a latent row
    const int tile_first = tile * kLatentTile;
    const int r_begin = max(16 * wi, first_hidden - tile_first), r_end = min(16 * wi + 16, length - tile_first);
    uint32_t bad_rows = 0;
    for (int i = lane; i < (r_end - r_begin) * kPiecesPerRow; i += 32) {
        const int r = r_begin + i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4* at = reinterpret_cast<uint4*>(stage + (piece >> 3) * kAtomBytes + swizzled_offset(r, piece & 7));
        uint4 v = *at;
        if (scrub_pair<T>(v.x) | scrub_pair<T>(v.y) | scrub_pair<T>(v.z) | scrub_pair<T>(v.w)) {
            *at = v;
            bad_rows |= 1u << (r - 16 * wi);
        }
    }
    return __reduce_or_sync(0xffffffffu, bad_rows);
}

// The splits of this row block are the CTAs of the cluster (rank = split);
// each holds its rows normalised in sO [64][kStagedRowFloats] and their log2
// max / sum in sMax / sSum. Every thread of every CTA calls this: the CTA of
// rank r merges rows r, r + splits, ... into p.o and p.lse. sW: 64 x
// kMaxLatentClusterSplits floats and sOff: 64 int64 of scratch. A merge
// that loaded every split's max and sum for each element (as the narrow
// kernel's once did) took 4-16 us longer on the H200 at H=32, B=64 (64 x 512
// elements a row block; the narrow kernel has 8 x 128), so here the weights
// and output offsets are computed once per row, and each thread merges 8
// columns at a time. (The narrow kernel's push merge, cluster_merge.cuh,
// would need the 128 KiB of a row block's partials in a second buffer.)
template <int kRows>
__device__ __forceinline__ void merge_split_rows(const AttentionParams& p, int rb, int g, int b, const float* sO,
                                                 const float* sMax, const float* sSum, float* sW, int64_t* sOff) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every split's rows staged and visible cluster-wide
    const int splits = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
    const int rows = min(kRows, p.rows - rb * kRows);
    const int mine = rows > rank ? (rows - rank + splits - 1) / splits : 0;  // rows rank + splits * k
    // Per row: each split's weight exp2(m_s - max) l_s over their sum, the lse
    // and where the row goes in o.
    for (int k = threadIdx.x; k < mine; k += blockDim.x) {
        const int m = rank + k * splits;
        float ms[kMaxLatentClusterSplits], ls[kMaxLatentClusterSplits], mx = -INFINITY;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            if (sp < splits) {
                ms[sp] = *cluster.map_shared_rank(sMax + m, sp);
                ls[sp] = *cluster.map_shared_rank(sSum + m, sp);
                mx = fmaxf(mx, ms[sp]);
            }
        }
        float sum = 0.f;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            // A split that saw no token (sum 0) weighs 0; NaN sums stay NaN.
            const float wgt = sp < splits && ls[sp] != 0.f ? exp2f(ms[sp] - mx) * ls[sp] : 0.f;
            sW[k * kMaxLatentClusterSplits + sp] = wgt;
            sum += wgt;
        }
        const float inv = sum == 0.f ? 0.f : 1.f / sum;
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) sW[k * kMaxLatentClusterSplits + sp] *= inv;
        const QueryHead r = query_head(p, g, rb * kRows + m);
        sOff[k] = row_offset(p.oa, b, r.qi, r.h);
        if (p.lse) p.lse[lse_index(p, b, r.qi, r.h)] = sum == 0.f ? -INFINITY : (mx + log2f(sum)) * kLn2;
    }
    named_barrier_sync(kBarMerge, kLatentThreads);  // the roles call this from different places
    constexpr int kPieces = kLatentDim / 8;
    for (int e = threadIdx.x; e < mine * kPieces; e += blockDim.x) {
        const int k = e / kPieces, c = (e - k * kPieces) * 8, m = rank + k * splits;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int sp = 0; sp < kMaxLatentClusterSplits; ++sp) {
            if (sp < splits) {
                const float wgt = sW[k * kMaxLatentClusterSplits + sp];
                const float4* src =
                    reinterpret_cast<const float4*>(cluster.map_shared_rank(sO + m * kStagedRowFloats + c, sp));
                const float4 lo = src[0], hi = src[1];
                acc[0] = fmaf(wgt, lo.x, acc[0]);
                acc[1] = fmaf(wgt, lo.y, acc[1]);
                acc[2] = fmaf(wgt, lo.z, acc[2]);
                acc[3] = fmaf(wgt, lo.w, acc[3]);
                acc[4] = fmaf(wgt, hi.x, acc[4]);
                acc[5] = fmaf(wgt, hi.y, acc[5]);
                acc[6] = fmaf(wgt, hi.z, acc[6]);
                acc[7] = fmaf(wgt, hi.w, acc[7]);
            }
        }
        store_elems8(p.o, p.o_dtype, sOff[k] + c, 8, acc);
    }
    cluster.sync();  // no CTA leaves while others still read its shared memory
#endif
}

// The transposed kernel's epilogue without a cluster merge: row block rb's
// rows, normalised in sO [rows][kStagedRowFloats], go to o or to the
// split's partial rows, 8 columns a thread, coalesced. Every thread calls
// this.
__device__ __forceinline__ void store_staged_rows(const AttentionParams& p, int rb, int g, int b, int split,
                                                  const float* sO) {
    named_barrier_sync(kBarMerge, kLatentThreads);  // the roles call this from different places
    constexpr int kPieces = kLatentDim / 8;
    const int rows = min(kLatentRowsTransposed, p.rows - rb * kLatentRowsTransposed);
    for (int e = threadIdx.x; e < rows * kPieces; e += blockDim.x) {
        const int m = e / kPieces, c = (e - m * kPieces) * 8;
        const float4 lo = *reinterpret_cast<const float4*>(sO + m * kStagedRowFloats + c);
        const float4 hi = *reinterpret_cast<const float4*>(sO + m * kStagedRowFloats + c + 4);
        const QueryHead r = query_head(p, g, rb * kLatentRowsTransposed + m);
        if (p.num_splits > 1) {
            float4* dst = reinterpret_cast<float4*>(p.part_o + partial_row(p, split, b, r.qi, r.h) * p.v.dim + c);
            dst[0] = lo;
            dst[1] = hi;
        } else {
            const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            store_elems8(p.o, p.o_dtype, row_offset(p.oa, b, r.qi, r.h) + c, 8, v);
        }
    }
}

// kRows = 64: S = Q K^T and O += P V, query rows as the wgmma M (rows past
// the block's end are zero). kRows = 32 (transposed): S^T = K Q^T and
// O^T += V^T P^T, the tile's 64 tokens as the M of the scores and the
// latent columns as the M of the values, so no product carries empty rows;
// the softmax then runs down the columns, its maxima shared by WG0's warps
// through shared memory once per tile.
template <typename T, int kRows>
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_wgmma_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ LatentTmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = LatentSmem<kRows>;
    constexpr bool kTransposed = kRows == kLatentRowsTransposed;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    unsigned char* sK = smem + L::kKOff;
    unsigned char* sP = smem + L::kPOff;
    float* sScale = reinterpret_cast<float*>(smem + L::kXOff);
    float* sMax = sScale + 64;
    float* sSum = sMax + 64;
    int* sLimit = reinterpret_cast<int*>(sSum + 64);
    float* sColumnMax = reinterpret_cast<float*>(sLimit + 64);              // transposed: [2][4][32], then sums [4][32]
    uint32_t* sTailMask = reinterpret_cast<uint32_t*>(smem + L::kTailOff);  // [tile % 2][warp of WG0]
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::kBarOff);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3;
    const CtaWork w = cta_work(p, kRows, kLatentTile);
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const int32_t* table = w.table;
    const SplitRange range = w.range;
    auto stage_of = [&](int tile) { return (tile - range.begin) % kStages; };
    auto phase_of = [&](int tile) { return static_cast<uint32_t>((tile - range.begin) / kStages) & 1u; };

    // Tile copies (WG1): 8 threads per token row (piece = tid % 8 of every
    // 128-byte atom row), rows tid/8 + 16 i of the tile.
    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const int ltid = tid & (kWgThreads - 1), piece = ltid & 7, row0 = ltid >> 3;
    constexpr int kRowsPerThread = kLatentTile / (kWgThreads / 8);
    // Rows past the sequence's end are zero-filled.
    auto copy_tile = [&](int tile, int stage) {
        unsigned char* dst = sK + stage * kStageBytes;
        int64_t tb[kRowsPerThread];  // all page lookups first: one latency, not four
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int j = tile * kLatentTile + row0 + 16 * i;
            tb[i] = j < length ? cta_token(p, w, j) : -1;
        }
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int r = row0 + 16 * i;
            const bool valid = tb[i] >= 0;
            const int64_t base = valid ? tb[i] : 0;
            const T* s1 = k1 + pool_offset(p.k1, base, g) + piece * 8;
            const int off = swizzled_offset(r, piece);
#pragma unroll
            for (int a = 0; a < kLatentDim / 64; ++a)
                cp_async_16(dst + a * kAtomBytes + off, valid ? s1 + a * 64 : k1, valid);
            const T* s2 = k2 + pool_offset(p.k2, base, g) + piece * 8;
            cp_async_16(dst + (kLatentDim / 64) * kAtomBytes + off, valid ? s2 : k2, valid);
        }
    };
    // TMA serves whole tiles when pages split a tile into whole boxes; the
    // n-th tile of a stage completes phase n % 2 of that stage's barrier.
    const int box_rows = maps.box_rows;
    // (Sparse launches gather single rows: always copied.)
    auto by_tma = [&](int tile) { return box_rows > 0 && !w.list && (tile + 1) * kLatentTile <= length; };
    // Called by all of WG1 (and at most once per tile).
    auto issue_tile = [&](int tile) {
        if (tile >= range.end) return;
        const int stage = stage_of(tile);
        if (!by_tma(tile)) {
            copy_tile(tile, stage);
            return;
        }
        if (ltid >= 32) return;  // one warp issues the boxes
        unsigned char* dst = sK + stage * kStageBytes;
        if (ltid == 0) mbarrier_arrive_expect_tx(bars + stage, kStageBytes);
        __syncwarp();
        const int segment = ltid;
        if (segment < kLatentTile / box_rows) {
            const int j = tile * kLatentTile + segment * box_rows;
            const int64_t tbs = token_base(table, j, p.page_size, p.page_shift);
            const int row = static_cast<int>((tbs >> 32) * p.page_size + (tbs & 0xffffffff));
            unsigned char* d = dst + segment * box_rows * kSwizzleRowBytes;
#pragma unroll
            for (int a = 0; a < kLatentDim / 64; ++a)
                tma_load_2d(d + a * kAtomBytes, &maps.latent, a * 64, row, bars + stage);
            tma_load_2d(d + (kLatentDim / 64) * kAtomBytes, &maps.rope, 0, row, bars + stage);
        }
    };
    // WG1 after its copies of `tile` landed: lets WG0 read a copied tile.
    auto publish_copied = [&](int tile) {
        if (tile < range.end && !by_tma(tile)) {
            fence_proxy_async_smem();  // this thread's copies -> wgmma's proxy
            named_barrier_arrive(kBarKFullCopy, 2 * kWgThreads);
        }
    };
    // WG0 before the scores of `tile`: its stage has landed.
    auto wait_tile = [&](int tile) {
        if (by_tma(tile))
            mbarrier_wait(bars + stage_of(tile), phase_of(tile));
        else
            named_barrier_sync(kBarKFullCopy, 2 * kWgThreads);
    };
    // The operand descriptor of `tile`'s stage, of the two built per stage.
    auto stage_desc = [&](int tile, uint64_t stage0, uint64_t stage1) { return stage_of(tile) ? stage1 : stage0; };
    // WG1/WG2 after their value products of `tile`: P may be overwritten;
    // the stage refills with tile + 2 once both are done with it (WG1
    // issues), then WG1 publishes tile + 1 if it was copied.
    auto release_tile = [&](int tile) {
        if (tile + 1 < range.end) named_barrier_arrive(kBarPFree, kLatentThreads);
        if (wg == 2) {
            if (tile + kStages < range.end) named_barrier_arrive(kBarKEmpty, 2 * kWgThreads);
        } else {
            if (tile + kStages < range.end) {
                named_barrier_sync(kBarKEmpty, 2 * kWgThreads);
                issue_tile(tile + kStages);
            }
            cp_async_commit();
            cp_async_wait<kStages - 1>();
            publish_copied(tile + 1);
        }
    };
    if (wg == 1) {  // both stages in flight before the queries are staged
        if (ltid == 0) {
            for (int st = 0; st < kStages; ++st) mbarrier_init(bars + st, 1);
            mbarrier_init_fence();
        }
        __syncwarp();
        issue_tile(range.begin);
        cp_async_commit();
        issue_tile(range.begin + 1);
        cp_async_commit();
    }
    // Launched as a programmatic dependent of the query projection: all of
    // the above reads what was there before it (lengths, page tables, the
    // cache), the queries are its output.
    grid_dependency_wait();

    // Queries -> shared memory, swizzled, padding rows zero: 6 threads per
    // row, each with its row's address computed once and its 12 pieces loaded
    // before any is stored (one memory latency). Queries in T (the absorb
    // path's latent queries) move as raw 16-byte pieces; others convert.
    // With p.q_rope the rope pieces come from the caller's q rows (in T,
    // 16-byte aligned: the host's query_in_place) instead of the columns
    // past the latent.
    unsigned char* sQ = smem + L::kQOff;
    {
        constexpr int kThreadsPerRow = kLatentThreads / kRows, kRowPieces = kKeyAtoms * 8;
        constexpr int kPiecesPerThread = kRowPieces / kThreadsPerRow, kLatentPieces = kLatentDim / 8;
        static_assert(kThreadsPerRow * kRows == kLatentThreads && kPiecesPerThread * kThreadsPerRow == kRowPieces,
                      "whole query rows per thread group");
        const int m = tid / kThreadsPerRow, sub = tid - m * kThreadsPerRow, mg = rb * kRows + m;
        const bool valid = mg < p.rows;
        int64_t off = 0, rope_off = 0;
        if (valid) {
            const QueryHead r = query_head(p, g, mg);
            off = row_offset(p.qa, b, r.qi, r.h);
            if (p.q_rope) rope_off = row_offset(p.q_rope_a, b, r.qi, r.h);
        }
        constexpr int kOwnDtype = std::is_same<T, __half>::value ? GQLA_DTYPE_F16 : GQLA_DTYPE_BF16;
        const T* qrow = static_cast<const T*>(p.q) + off;
        if (p.q_dtype == kOwnDtype && (reinterpret_cast<uintptr_t>(qrow) & 15) == 0) {
            // The rope pieces follow the latent ones in qrow, or lie in q_rope.
            const uint4* latent4 = reinterpret_cast<const uint4*>(qrow);
            const uint4* rope4 = p.q_rope ? reinterpret_cast<const uint4*>(static_cast<const T*>(p.q_rope) + rope_off)
                                          : latent4 + kLatentPieces;
            uint4 v[kPiecesPerThread];
#pragma unroll
            for (int k = 0; k < kPiecesPerThread; ++k) {
                const int pc = sub + k * kThreadsPerRow;
                const uint4* src = pc < kLatentPieces ? latent4 + pc : rope4 + (pc - kLatentPieces);
                v[k] = valid ? __ldg(src) : uint4{0, 0, 0, 0};
            }
#pragma unroll
            for (int k = 0; k < kPiecesPerThread; ++k) {
                const int pc = sub + k * kThreadsPerRow;
                *reinterpret_cast<uint4*>(sQ + (pc >> 3) * L::kQAtomBytes + swizzled_offset(m, pc & 7)) = v[k];
            }
        } else {
            constexpr int kBatch = kPiecesPerThread / 2;
            for (int k0 = 0; k0 < kPiecesPerThread; k0 += kBatch) {
                float v[kBatch][8];
#pragma unroll
                for (int k = 0; k < kBatch; ++k) {
                    const int pc = sub + (k0 + k) * kThreadsPerRow;
                    if (p.q_rope && pc >= kLatentPieces)
                        load_elems8(p.q_rope, kOwnDtype, rope_off + (pc - kLatentPieces) * 8, valid ? 8 : 0, v[k]);
                    else
                        load_elems8(p.q, p.q_dtype, off + pc * 8, valid ? 8 : 0, v[k]);
                }
#pragma unroll
                for (int k = 0; k < kBatch; ++k) {
                    const int pc = sub + (k0 + k) * kThreadsPerRow;
                    *reinterpret_cast<uint4*>(sQ + (pc >> 3) * L::kQAtomBytes + swizzled_offset(m, pc & 7)) =
                        pack_eight<T>(v[k]);
                }
            }
        }
    }
    for (int m = tid; m < kRows; m += kLatentThreads) {
        const int mg = rb * kRows + m;
        sLimit[m] = (mg < p.rows) ? length - p.q_len + mg / p.heads_per_group : length - 1;
    }
    fence_proxy_async_smem();  // Q stores -> wgmma's proxy
    __syncthreads();
    // First token some row of this block may not see (its first row has the
    // earliest limit; rows past the block's end see everything).
    const int first_hidden = sLimit[0] + 1;
    // Tiles holding such tokens, loaded (before the end): the causal tail.
    auto in_tail = [&](int tile) { return (tile + 1) * kLatentTile > first_hidden && first_hidden < length; };

    // Accumulator fragment of wgmma m64nN: this thread holds rows r0 and r0 + 8,
    // columns 8j + 2*(lane % 4) + {0, 1} in registers 4j + {0, 1} / 4j + {2, 3}.
    const int r0 = wi * 16 + (lane >> 2), r1 = r0 + 8;
    const int c_lane = 2 * (lane & 3);
    // WG0's score operands, K-major: Q and each stage's tile (a k-step only
    // adds a constant to the start address field).
    const uint64_t q_desc = smem_desc_sw128(sQ, 16, kSwizzleGroupBytes);
    const uint64_t k_desc0 = smem_desc_sw128(sK, 16, kSwizzleGroupBytes);
    const uint64_t k_desc1 = smem_desc_sw128(sK + kStageBytes, 16, kSwizzleGroupBytes);
    static_assert(kStages == 2, "one descriptor per stage");
    // WG1/WG2's value operands: P (or P^T) and their four 64-column latent
    // atoms of each stage, read MN-major; WG1 first publishes tile 0 if it
    // was copied.
    const int atom0 = (wg - 1) * 4;
    const uint64_t p_desc = smem_desc_sw128(sP, 16, kSwizzleGroupBytes);
    const uint64_t v_desc0 = smem_desc_sw128(sK + atom0 * kAtomBytes, kAtomBytes, kSwizzleGroupBytes);
    const uint64_t v_desc1 = smem_desc_sw128(sK + kStageBytes + atom0 * kAtomBytes, kAtomBytes, kSwizzleGroupBytes);
    auto begin_values = [&]() {
        if (wg == 1) {
            cp_async_wait<kStages - 1>();
            publish_copied(range.begin);
        }
    };

    if constexpr (kTransposed) {
        // Here r0 / r1 are a tile's token rows (scores) or latent columns
        // (values) and this thread's query rows are the columns
        // 8j + c_lane + e (j < 4, e < 2), index 2j + e of its arrays below.
        if (wg == 0) {
            float* sColumnSum = sColumnMax + 2 * 4 * 32;
            float m[8], l[8];
            int lim[8], min_lim = INT32_MAX;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                m[i] = -INFINITY;
                l[i] = 0.f;
                lim[i] = sLimit[8 * (i >> 1) + c_lane + (i & 1)];
                min_lim = min(min_lim, lim[i]);
            }
            for (int tile = range.begin; tile < range.end; ++tile) {
                const uint64_t k_desc = stage_desc(tile, k_desc0, k_desc1);
                wait_tile(tile);

                float s[16];
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < kKeySteps; ++ks) {
                    const uint32_t in_row = (ks & 3) * 32;
                    wgmma_m64n32k16<T>(s, desc_advance(k_desc, (ks >> 2) * kAtomBytes + in_row),
                                       desc_advance(q_desc, (ks >> 2) * L::kQAtomBytes + in_row), ks != 0);
                }
                wgmma_commit();
                wgmma_wait<0>();
                fence_accumulators(s);

                // The causal tail: this warp's 16 token rows scrubbed (its
                // own tokens r0, r0 + 8), and which had a non-finite value.
                const bool tail = in_tail(tile);
                bool bad0 = false, bad1 = false;
                if (tail) {
                    const uint32_t bad =
                        scrub_tail_rows<T>(sK + stage_of(tile) * kStageBytes, tile, first_hidden, length, wi, lane);
                    bad0 = (bad >> (lane >> 2)) & 1;
                    bad1 = (bad >> ((lane >> 2) + 8)) & 1;
                }
                // Mask tokens past a column's last visible one (only in a tile
                // that reaches past some column's limit).
                const int t0 = tile * kLatentTile + r0;
                if (tile * kLatentTile + kLatentTile - 1 > min_lim) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const int x = 4 * (i >> 1) + (i & 1);
                        if (t0 > lim[i]) s[x] = -INFINITY;
                        if (t0 + 8 > lim[i]) s[x + 2] = -INFINITY;
                    }
                }
                // Column maxima: over this thread's two tokens, the 8 lanes of
                // its columns, then WG0's four warps (double-buffered by tile).
                float cm[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int x = 4 * (i >> 1) + (i & 1);
                    cm[i] = fmaxf(s[x], s[x + 2]);
                }
#pragma unroll
                for (int off = 4; off < 32; off <<= 1)
#pragma unroll
                    for (int i = 0; i < 8; ++i) cm[i] = fmaxf(cm[i], __shfl_xor_sync(0xffffffffu, cm[i], off));
                float* red = sColumnMax + (tile & 1) * 4 * 32;
                if (lane < 4) {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        *reinterpret_cast<float2*>(red + wi * 32 + 8 * j + c_lane) =
                            make_float2(cm[2 * j], cm[2 * j + 1]);
                }
                named_barrier_sync(kBarColumnMax, kWgThreads);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
#pragma unroll
                    for (int ww = 0; ww < 4; ++ww) {
                        const float2 v = *reinterpret_cast<const float2*>(red + ww * 32 + 8 * j + c_lane);
                        cm[2 * j] = ww ? fmaxf(cm[2 * j], v.x) : v.x;
                        cm[2 * j + 1] = ww ? fmaxf(cm[2 * j + 1], v.y) : v.y;
                    }
                }
                const float scale = p.scale_log2;
                float alpha[8];
                T pt[16];  // P^T of rows r0 (2j + e) and r1 (8 + 2j + e)
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float n = fmaxf(m[i], cm[i] * scale);
                    alpha[i] = n == -INFINITY ? 1.f : exp2_ftz(m[i] - n);
                    m[i] = n;
                    const float base = n == -INFINITY ? 0.f : n;  // exp2(-inf - 0) = 0
                    const int x = 4 * (i >> 1) + (i & 1);
                    float e0 = exp2_ftz(fmaf(s[x], scale, -base)), e1 = exp2_ftz(fmaf(s[x + 2], scale, -base));
                    l[i] = l[i] * alpha[i] + (e0 + e1);
                    if (tail) {  // a scrubbed value this column may see
                        if (bad0 && t0 <= lim[i]) e0 = quiet_nan();
                        if (bad1 && t0 + 8 <= lim[i]) e1 = quiet_nan();
                    }
                    pt[i] = from_float<T>(e0);
                    pt[8 + i] = from_float<T>(e1);
                }
                // P^T as the values' B operand, K-major: query row c's 64
                // tokens are one 128-byte swizzled row.
                if (tile > range.begin) named_barrier_sync(kBarPFree, kLatentThreads);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int c = 8 * (i >> 1) + c_lane + (i & 1);
                    *reinterpret_cast<T*>(sP + swizzled_offset(c, r0 >> 3) + (r0 & 7) * 2) = pt[i];
                    *reinterpret_cast<T*>(sP + swizzled_offset(c, (r0 >> 3) + 1) + (r0 & 7) * 2) = pt[8 + i];
                }
                if (wi == 0 && lane < 4) {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        *reinterpret_cast<float2*>(sScale + 8 * j + c_lane) =
                            make_float2(alpha[2 * j], alpha[2 * j + 1]);
                }
                fence_proxy_async_smem();
                named_barrier_arrive(kBarPReady, kLatentThreads);
            }
            // Column sums over this thread's lanes, then the warps.
#pragma unroll
            for (int off = 4; off < 32; off <<= 1)
#pragma unroll
                for (int i = 0; i < 8; ++i) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
            if (lane < 4) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    *reinterpret_cast<float2*>(sColumnSum + wi * 32 + 8 * j + c_lane) =
                        make_float2(l[2 * j], l[2 * j + 1]);
            }
            named_barrier_sync(kBarColumnMax, kWgThreads);
            if (wi == 0 && lane < 4) {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int c = 8 * (i >> 1) + c_lane + (i & 1);
                    const float sum = sColumnSum[c] + sColumnSum[32 + c] + sColumnSum[64 + c] + sColumnSum[96 + c];
                    sMax[c] = m[i];
                    sSum[c] = sum;
                    if (!p.cluster_merge && rb * kRows + c < p.rows) {
                        const QueryHead r = query_head(p, g, rb * kRows + c);
                        write_row_lse(p, split, b, r.qi, r.h, m[i], sum);
                    }
                }
            }
            named_barrier_sync(kBarEnd, kLatentThreads);  // column max / sum visible
            if (p.cluster_merge)
                merge_split_rows<kRows>(p, rb, g, b, reinterpret_cast<const float*>(sK), sMax, sSum,
                                        reinterpret_cast<float*>(sK + kMergeScratchOff),
                                        reinterpret_cast<int64_t*>(sK + kMergeOffsetsOff));
            else
                store_staged_rows(p, rb, g, b, split, reinterpret_cast<const float*>(sK));
            return;
        }

        // WG1 / WG2: O^T[256 latent columns of this warpgroup][32] += V^T P^T,
        // four 64-column atoms of the tile read MN-major as A.
        float o[4][16];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int i = 0; i < 16; ++i) o[a][i] = 0.f;
        begin_values();
        for (int tile = range.begin; tile < range.end; ++tile) {
            const uint64_t v_desc = stage_desc(tile, v_desc0, v_desc1);
            named_barrier_sync(kBarPReady, kLatentThreads);
            float alpha[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 v = *reinterpret_cast<const float2*>(sScale + 8 * j + c_lane);
                alpha[2 * j] = v.x;
                alpha[2 * j + 1] = v.y;
            }
            bool moved = false;
#pragma unroll
            for (int i = 0; i < 8; ++i) moved |= alpha[i] != 1.f;
            if (__any_sync(0xffffffffu, moved)) {  // some column's running max moved
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int x = 0; x < 16; ++x) o[a][x] *= alpha[2 * (x >> 2) + (x & 1)];
            }
#pragma unroll
            for (int a = 0; a < 4; ++a) fence_accumulators(o[a]);
            wgmma_fence();
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int kk = 0; kk < kLatentTile / 16; ++kk)
                    wgmma_m64n32k16_at<T>(o[a], desc_advance(v_desc, a * kAtomBytes + kk * 16 * kSwizzleRowBytes),
                                          desc_advance(p_desc, kk * 32), 1);
            wgmma_commit();
            wgmma_wait<0>();
#pragma unroll
            for (int a = 0; a < 4; ++a) fence_accumulators(o[a]);
            release_tile(tile);
        }
        if (wg == 1) cp_async_wait<0>();
        named_barrier_sync(kBarEnd, kLatentThreads);  // every product done; WG0's column max / sum visible
        // Normalised rows [query row][latent column] into the freed stages,
        // where the cluster merge or the coalesced store reads them.
        float inv[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float sum = sSum[8 * (i >> 1) + c_lane + (i & 1)];
            inv[i] = sum == 0.f ? 0.f : 1.f / sum;
        }
        float* sO = reinterpret_cast<float*>(sK);  // [rows][kStagedRowFloats]
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            const int col = (atom0 + a) * 64 + r0;
#pragma unroll
            for (int x = 0; x < 16; ++x) {
                const int i = 2 * (x >> 2) + (x & 1), c = 8 * (x >> 2) + c_lane + (x & 1);
                sO[c * kStagedRowFloats + col + ((x & 2) ? 8 : 0)] = o[a][x] * inv[i];
            }
        }
        if (p.cluster_merge)
            merge_split_rows<kRows>(p, rb, g, b, sO, sMax, sSum, reinterpret_cast<float*>(sK + kMergeScratchOff),
                                    reinterpret_cast<int64_t*>(sK + kMergeOffsetsOff));
        else
            store_staged_rows(p, rb, g, b, split, sO);
    } else {
        if (wg == 0) {
            float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
            const int lim0 = sLimit[r0], lim1 = sLimit[r1];
            for (int tile = range.begin; tile < range.end; ++tile) {
                const uint64_t k_desc = stage_desc(tile, k_desc0, k_desc1);
                wait_tile(tile);

                float s[32];
                wgmma_fence();
#pragma unroll
                for (int ks = 0; ks < kKeySteps; ++ks) {
                    const uint32_t off = (ks >> 2) * kAtomBytes + (ks & 3) * 32;
                    wgmma_m64n64k16<T>(s, desc_advance(q_desc, off), desc_advance(k_desc, off), ks != 0);
                }
                wgmma_commit();
                wgmma_wait<0>();
                fence_accumulators(s);

                // The causal tail: this warp's 16 token rows scrubbed, and the
                // warps' masks of those that had a non-finite value shared
                // (double-buffered by tile: the tail's tiles are consecutive).
                const bool tail = in_tail(tile);
                uint32_t bad_lo = 0, bad_hi = 0;  // tokens 0-31, 32-63 of the tile
                if (tail) {
                    const uint32_t bad =
                        scrub_tail_rows<T>(sK + stage_of(tile) * kStageBytes, tile, first_hidden, length, wi, lane);
                    uint32_t* masks = sTailMask + (tile & 1) * 4;
                    if (lane == 0) masks[wi] = bad;
                    named_barrier_sync(kBarTailMask, kWgThreads);
                    bad_lo = masks[0] | (masks[1] << 16);
                    bad_hi = masks[2] | (masks[3] << 16);
                }
                // The causal/length mask only where the tile reaches past a row's
                // last visible token. Scores stay unscaled: the scale (> 0) goes
                // into the row max and the exponent's fma.
                const int j_base = tile * kLatentTile + c_lane;
                const float scale = p.scale_log2;
                if (tile * kLatentTile + kLatentTile - 1 > min(lim0, lim1)) {
#pragma unroll
                    for (int j = 0; j < 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int jj = j_base + 8 * j + e;
                            if (jj > lim0) s[4 * j + e] = -INFINITY;
                            if (jj > lim1) s[4 * j + 2 + e] = -INFINITY;
                        }
                }
                float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
                    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
                }
#pragma unroll
                for (int off = 1; off < 4; off <<= 1) {
                    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
                    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
                }
                const float n0 = fmaxf(m0, mx0 * scale), n1 = fmaxf(m1, mx1 * scale);
                const float alpha0 = n0 == -INFINITY ? 1.f : exp2_ftz(m0 - n0);
                const float alpha1 = n1 == -INFINITY ? 1.f : exp2_ftz(m1 - n1);
                m0 = n0;
                m1 = n1;
                const float b0 = n0 == -INFINITY ? 0.f : n0, b1 = n1 == -INFINITY ? 0.f : n1;  // exp2(-inf - 0) = 0
                uint32_t pa[16];
                float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    float e0 = exp2_ftz(fmaf(s[4 * j], scale, -b0)), e1 = exp2_ftz(fmaf(s[4 * j + 1], scale, -b0));
                    float e2 = exp2_ftz(fmaf(s[4 * j + 2], scale, -b1)), e3 = exp2_ftz(fmaf(s[4 * j + 3], scale, -b1));
                    sum0 += e0 + e1;
                    sum1 += e2 + e3;
                    if (tail) {  // scrubbed values rows r0 / r1 may see: tokens 8j + c_lane, + 1
                        const uint32_t bits = ((j < 4 ? bad_lo : bad_hi) >> ((8 * j + c_lane) & 31)) & 3u;
                        const int jj = j_base + 8 * j;
                        if ((bits & 1) && jj <= lim0) e0 = quiet_nan();
                        if ((bits & 2) && jj + 1 <= lim0) e1 = quiet_nan();
                        if ((bits & 1) && jj <= lim1) e2 = quiet_nan();
                        if ((bits & 2) && jj + 1 <= lim1) e3 = quiet_nan();
                    }
                    pa[2 * j] = pack_two<T>(e0, e1);
                    pa[2 * j + 1] = pack_two<T>(e2, e3);
                }
                l0 = l0 * alpha0 + sum0;
                l1 = l1 * alpha1 + sum1;

                // Hand P and the rescale factors over once the previous ones were consumed.
                if (tile > range.begin) named_barrier_sync(kBarPFree, kLatentThreads);
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int c = 8 * j + c_lane;
                    *reinterpret_cast<uint32_t*>(sP + swizzled_offset(r0, c >> 3) + (c & 7) * 2) = pa[2 * j];
                    *reinterpret_cast<uint32_t*>(sP + swizzled_offset(r1, c >> 3) + (c & 7) * 2) = pa[2 * j + 1];
                }
                if ((lane & 3) == 0) {
                    sScale[r0] = alpha0;
                    sScale[r1] = alpha1;
                }
                fence_proxy_async_smem();
                named_barrier_arrive(kBarPReady, kLatentThreads);
            }
            // Row sums over the 4 lanes of a row; WG0's softmax state is the CTA's.
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                l0 += __shfl_xor_sync(0xffffffffu, l0, off);
                l1 += __shfl_xor_sync(0xffffffffu, l1, off);
            }
            if ((lane & 3) == 0) {
                sMax[r0] = m0;
                sMax[r1] = m1;
                sSum[r0] = l0;
                sSum[r1] = l1;
            }
            named_barrier_sync(kBarEnd, kLatentThreads);  // row max / sum visible
            if (p.cluster_merge) {
                merge_split_rows<kRows>(p, rb, g, b, reinterpret_cast<const float*>(sK), sMax, sSum,
                                        reinterpret_cast<float*>(sK + kMergeScratchOff),
                                        reinterpret_cast<int64_t*>(sK + kMergeOffsetsOff));
                return;
            }
            const int mg0 = rb * kLatentRows + r0, mg1 = rb * kLatentRows + r1;
            if ((lane & 3) == 0) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int mg = half ? mg1 : mg0;
                    if (mg >= p.rows) continue;
                    const QueryHead r = query_head(p, g, mg);
                    write_row_lse(p, split, b, r.qi, r.h, half ? m1 : m0, half ? l1 : l0);
                }
            }
            return;
        }

        // WG1 / WG2: value products over their 256 columns.
        float o[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] = 0.f;
        begin_values();
        for (int tile = range.begin; tile < range.end; ++tile) {
            const uint64_t v_desc = stage_desc(tile, v_desc0, v_desc1);
            named_barrier_sync(kBarPReady, kLatentThreads);
            const float alpha0 = sScale[r0], alpha1 = sScale[r1];
            if (__any_sync(0xffffffffu, alpha0 != 1.f || alpha1 != 1.f)) {  // the running max moved
#pragma unroll
                for (int i = 0; i < 128; ++i) o[i] *= (i & 2) ? alpha1 : alpha0;
            }
            fence_accumulators(o);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kLatentTile / 16; ++kk) {
                wgmma_m64n256k16_bt<T>(o, desc_advance(p_desc, kk * 32),
                                       desc_advance(v_desc, kk * 16 * kSwizzleRowBytes), 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_accumulators(o);
            release_tile(tile);
        }
        if (wg == 1) cp_async_wait<0>();
        named_barrier_sync(kBarEnd, kLatentThreads);  // every product done; WG0's row max / sum visible
        const float L0 = sSum[r0], L1 = sSum[r1];
        const float inv0 = L0 == 0.f ? 0.f : 1.f / L0, inv1 = L1 == 0.f ? 0.f : 1.f / L1;
        const int c0 = atom0 * 64 + c_lane;
        if (!p.cluster_merge) {
            // Each thread stores its fragment's column pairs of rows r0 and r1
            // (32-byte pieces of 8 rows per warp store) to o or the split's
            // partial rows, with each row's address computed once.
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int mg = rb * kLatentRows + (half ? r1 : r0);
                if (mg >= p.rows) continue;
                const QueryHead r = query_head(p, g, mg);
                const float inv = half ? inv1 : inv0;
                if (p.num_splits > 1) {
                    float* dst = p.part_o + partial_row(p, split, b, r.qi, r.h) * p.v.dim + c0;
#pragma unroll
                    for (int j = 0; j < 32; ++j)
                        *reinterpret_cast<float2*>(dst + 8 * j) =
                            make_float2(o[4 * j + 2 * half] * inv, o[4 * j + 2 * half + 1] * inv);
                } else {
                    const int64_t dst = row_offset(p.oa, b, r.qi, r.h) + c0;
#pragma unroll
                    for (int j = 0; j < 32; ++j)
                        store_pair(p.o, p.o_dtype, dst + 8 * j, o[4 * j + 2 * half] * inv,
                                   o[4 * j + 2 * half + 1] * inv);
                }
            }
            return;
        }
        // Cluster merge: normalised rows through shared memory (the stages are
        // free now), where the cluster's CTAs read them.
        float* sO = reinterpret_cast<float*>(sK);  // [64][kStagedRowFloats]
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int c = c0 + 8 * j;
            *reinterpret_cast<float2*>(sO + r0 * kStagedRowFloats + c) =
                make_float2(o[4 * j] * inv0, o[4 * j + 1] * inv0);
            *reinterpret_cast<float2*>(sO + r1 * kStagedRowFloats + c) =
                make_float2(o[4 * j + 2] * inv1, o[4 * j + 3] * inv1);
        }
        merge_split_rows<kRows>(p, rb, g, b, sO, sMax, sSum, reinterpret_cast<float*>(sK + kMergeScratchOff),
                                reinterpret_cast<int64_t*>(sK + kMergeOffsetsOff));
    }
#endif
}

const void* kernel_for(gqla_dtype cache, int rows_per_cta) {
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
           (p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16);
}

int latent_wgmma_smem_bytes(int rows_per_cta) {
    return rows_per_cta == kLatentRowsTransposed ? LatentSmem<kLatentRowsTransposed>::kBytes
                                                 : LatentSmem<kLatentRows>::kBytes;
}

void prepare_latent_wgmma_kernel() {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
        for (int rows : {kLatentRows, kLatentRowsTransposed})
            check_cuda(cudaFuncSetAttribute(kernel_for(t, rows), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            latent_wgmma_smem_bytes(rows)),
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
                                                      latent_wgmma_smem_bytes(rows), cluster_splits));
    return fit;
}

void launch_latent_wgmma(gqla_dtype cache, const AttentionParams& p, const LatentTmaMaps& maps, dim3 grid,
                         int rows_per_cta, bool dependent, cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p), const_cast<LatentTmaMaps*>(&maps)};
    LaunchAttrs attrs;
    cudaLaunchConfig_t cfg = make_launch_config(grid, dim3(kLatentThreads), latent_wgmma_smem_bytes(rows_per_cta),
                                                p.cluster_merge != 0, dependent, attrs);
    cfg.stream = stream;
    check_cuda(cudaLaunchKernelExC(&cfg, kernel_for(cache, rows_per_cta), args), "launch latent_wgmma_kernel");
}

}  // namespace gqla::cuda

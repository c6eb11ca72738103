// SPDX-License-Identifier: Apache-2.0
// Shared memory layout, tile stream and query loads of the latent decode
// kernel (latent_wgmma_kernel.cu): the stages WG1 fills with key tiles (by
// TMA or cp.async), the stage barriers that tell WG0 a tile landed, the
// hand-off that tells WG1 a stage is free, the queries staged for the score
// product, and the scrub of the causal tail's non-finite values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../attention_common.cuh"
#include "../latent_wgmma.hpp"
#include "../nonfinite.cuh"
#include "../tma_primitives.cuh"
#include "wgmma_primitives.cuh"

namespace gqla::cuda::latent {

constexpr int kLatentDim = kLatentKernelDim;                // value width = latent width
constexpr int kAtomBytes = kLatentRows * kSwizzleRowBytes;  // 64 rows x 64 columns
constexpr int kRopeDim = kLatentKernelRopeDim;
constexpr int kKeyAtoms = (kLatentDim + kRopeDim) / 64;  // 9: compile-time trip counts keep wgmma asynchronous
constexpr int kKeySteps = kKeyAtoms * 4;                 // k16 steps of the score product
constexpr int kStages = 2;
constexpr int kStageBytes = kKeyAtoms * kAtomBytes;
constexpr int kWgThreads = 128;
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
constexpr int kBarStagesReady = 1;  // WG1: the stage barriers initialised
constexpr int kBarPReady = 2;
constexpr int kBarPFree = 3;
constexpr int kBarKEmpty = 4;
constexpr int kBarColumnMax = 5;  // WG0 (transposed): the warps' column maxima written
constexpr int kBarEnd = 6;        // all: products done, row max / sum written
constexpr int kBarMerge = 7;      // all: cluster merge weights written
constexpr int kBarTailMask = 8;   // WG0 (64-row products): the warps' scrubbed-token masks written
// The 64-row 8-bit kernel's second P buffer (latent_wgmma_fp8_rows.cuh).
constexpr int kBarPReadyOdd = 9;
constexpr int kBarPFreeOdd = 10;

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
    // 8-bit latent (latent_wgmma_fp8.cuh): one tile's stored bytes, staged
    // before they are widened into a stage. Only the transposed kernel has
    // the room (Q of 32 rows).
    static constexpr int kStagingOff = (kUsed + 127) / 128 * 128;
    static constexpr int kFp8Bytes = kStagingOff + kLatentTile * kLatentDim + 1024;
    static_assert(kRows == 64 || kRows == 32, "query rows per CTA");
    static_assert(kQAtomBytes % 1024 == 0 && kKOff % 1024 == 0 && kPOff % 1024 == 0, "swizzle-period alignment");
    static_assert(kBytes <= 227 * 1024, "shared memory of one CTA");
    static_assert(kRows != kLatentRowsTransposed || kFp8Bytes <= 227 * 1024, "8-bit staging of one CTA");
};

// The regions of LatentSmem, from the 1024-byte aligned base of the
// kernel's shared memory.
struct LatentShared {
    unsigned char* q;       // Q: kKeyAtoms swizzled atoms of the block's rows
    unsigned char* stages;  // kStages tile stages; after the products, the staged rows and the merge scratch
    unsigned char* p;       // P, or P^T
    float* scale;           // the rows' rescale factors of the tile
    float* row_max;         // per query row, log2 domain
    float* row_sum;
    int* limit;              // each row's last visible token
    float* column_max;       // transposed: the warps' column maxima [2][4][32], then sums [4][32]
    uint32_t* tail_mask;     // [tile % 2][warp of WG0]
    uint64_t* bars;          // one mbarrier per stage
    unsigned char* staging;  // 8-bit latent: the next tile's stored bytes
    unsigned char* base;     // the start of the layout
};

// The regions of layout L (LatentSmem<kRows>, or the 8-bit half-tile
// kernel's Fp8RowsSmem) in the kernel's dynamic shared memory, its base
// aligned to the swizzle period; the staging buffer where `staging`.
template <typename L>
__device__ __forceinline__ LatentShared latent_shared(unsigned char* smem_raw, bool staging) {
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    LatentShared sh;
    sh.base = smem;
    sh.q = smem + L::kQOff;
    sh.stages = smem + L::kKOff;
    sh.p = smem + L::kPOff;
    sh.scale = reinterpret_cast<float*>(smem + L::kXOff);
    sh.row_max = sh.scale + 64;
    sh.row_sum = sh.row_max + 64;
    sh.limit = reinterpret_cast<int*>(sh.row_sum + 64);
    sh.column_max = reinterpret_cast<float*>(sh.limit + 64);
    sh.tail_mask = reinterpret_cast<uint32_t*>(smem + L::kTailOff);
    sh.bars = reinterpret_cast<uint64_t*>(smem + L::kBarOff);
    sh.staging = staging ? smem + L::kStagingOff : nullptr;
    return sh;
}

// A thread's place in the accumulator fragments of wgmma m64nN: warp `warp`
// of its warpgroup holds rows r0 and r1 = r0 + 8, columns 8j + c_lane + {0,
// 1} in registers 4j + {0, 1} / 4j + {2, 3}.
struct Fragment {
    int warp, lane;
    int r0, r1, c_lane;
};
__device__ __forceinline__ Fragment fragment_of(int warp, int lane) {
    return Fragment{warp, lane, warp * 16 + (lane >> 2), warp * 16 + (lane >> 2) + 8, 2 * (lane & 3)};
}

// Stage that tile `tile` of the split lands in.
__device__ __forceinline__ int stage_of(const SplitRange& range, int tile) { return (tile - range.begin) % kStages; }

// The n-th tile of a stage completes phase n % 2 of that stage's barrier.
__device__ __forceinline__ uint32_t phase_of(const SplitRange& range, int tile) {
    return static_cast<uint32_t>((tile - range.begin) / kStages) & 1u;
}

// The operand descriptor of `tile`'s stage, of the two built per stage.
__device__ __forceinline__ uint64_t stage_desc(const SplitRange& range, int tile, uint64_t stage0, uint64_t stage1) {
    return stage_of(range, tile) ? stage1 : stage0;
}

// What the CTA's threads need of the tile stream: the key pools, the rows
// of a TMA box (0: every tile copied) and, for WG1's thread ltid, its part
// of a tile copy: 8 threads per token row (piece = ltid % 8 of every
// 128-byte atom row), rows row0 + 16 i of the tile.
template <typename T>
struct TileStream {
    const T* k1;
    const T* k2;
    int ltid, piece, row0;
    int box_rows;
};

// The tile stream as thread tid sees it.
template <typename T>
__device__ __forceinline__ TileStream<T> tile_stream(const AttentionParams& p, const LatentTmaMaps& maps, int tid) {
    TileStream<T> ts;
    ts.k1 = static_cast<const T*>(p.k1.base);
    ts.k2 = static_cast<const T*>(p.k2.base);
    ts.ltid = tid & (kWgThreads - 1);
    ts.piece = ts.ltid & 7;
    ts.row0 = ts.ltid >> 3;
    ts.box_rows = maps.box_rows;
    return ts;
}

// TMA serves whole tiles when pages split a tile into whole boxes. (Sparse
// launches gather single rows: always copied.)
template <typename T>
__device__ __forceinline__ bool tile_by_tma(const TileStream<T>& ts, const CtaWork& w, int tile) {
    return ts.box_rows > 0 && !w.list && (tile + 1) * kLatentTile <= w.length;
}

// Copies of tile `tile` into stage `stage` (of `stages`) by WG1; rows past
// the sequence's end are zero-filled.
template <typename T>
__device__ __forceinline__ void copy_tile(const AttentionParams& p, const TileStream<T>& ts, const CtaWork& w,
                                          unsigned char* stages, int tile, int stage) {
    unsigned char* dst = stages + stage * kStageBytes;
    constexpr int kRowsPerThread = kLatentTile / (kWgThreads / 8);
    int64_t tb[kRowsPerThread];  // all page lookups first: one latency, not four
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int j = tile * kLatentTile + ts.row0 + 16 * i;
        tb[i] = j < w.length ? cta_token(p, w, j) : -1;
    }
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = ts.row0 + 16 * i;
        const bool valid = tb[i] >= 0;
        const int64_t base = valid ? tb[i] : 0;
        const T* s1 = ts.k1 + pool_offset(p.k1, base, w.g) + ts.piece * 8;
        const int off = swizzled_offset(r, ts.piece);
#pragma unroll
        for (int a = 0; a < kLatentDim / 64; ++a)
            cp_async_16(dst + a * kAtomBytes + off, valid ? s1 + a * 64 : ts.k1, valid);
        const T* s2 = ts.k2 + pool_offset(p.k2, base, w.g) + ts.piece * 8;
        cp_async_16(dst + (kLatentDim / 64) * kAtomBytes + off, valid ? s2 : ts.k2, valid);
    }
}

// Tile `tile` by TMA into stage `stage` (of `stages`, completing on its
// barrier in `bars`): called by WG1's first warp, one lane per page segment
// issues its 9 box loads. Lane 0's arrival announces the bytes; the other
// lanes arrive plainly (the barrier expects all of WG1).
template <typename T>
__device__ __forceinline__ void load_tile_boxes(const AttentionParams& p, const LatentTmaMaps& maps,
                                                const TileStream<T>& ts, const CtaWork& w, unsigned char* stages,
                                                uint64_t* bars, int tile, int stage) {
    unsigned char* dst = stages + stage * kStageBytes;
    if (ts.ltid == 0)
        mbarrier_arrive_expect_tx(bars + stage, kStageBytes);
    else
        mbarrier_arrive(bars + stage);
    const int segment = ts.ltid, box_rows = ts.box_rows;
    if (segment < kLatentTile / box_rows) {
        const int j = tile * kLatentTile + segment * box_rows;
        const int64_t tbs = token_base(w.table, j, p.page_size, p.page_shift);
        const int row = static_cast<int>((tbs >> 32) * p.page_size + (tbs & 0xffffffff));
        unsigned char* d = dst + segment * box_rows * kSwizzleRowBytes;
#pragma unroll
        for (int a = 0; a < kLatentDim / 64; ++a)
            tma_load_2d(d + a * kAtomBytes, &maps.latent, a * 64, row, bars + stage);
        tma_load_2d(d + (kLatentDim / 64) * kAtomBytes, &maps.rope, 0, row, bars + stage);
    }
}

// Loads tile `tile` (if the split has it) into its stage. Called by all of
// WG1, at most once per tile; every thread of WG1 arrives on the stage's
// barrier, and the phase completes when the tile has landed. A copied tile's
// arrivals are made by the hardware as each thread's copies land, so WG1
// never waits for its own copies: WG0 scores the tile while WG1 and WG2
// still multiply the previous one, as with TMA tiles.
template <typename T>
__device__ __forceinline__ void issue_tile(const AttentionParams& p, const LatentTmaMaps& maps, const TileStream<T>& ts,
                                           const CtaWork& w, const LatentShared& sh, int tile) {
    if (tile >= w.range.end) return;
    const int stage = stage_of(w.range, tile);
    if (!tile_by_tma(ts, w, tile)) {
        copy_tile(p, ts, w, sh.stages, tile, stage);
        cp_async_mbarrier_arrive_noinc(sh.bars + stage);
        return;
    }
    if (ts.ltid >= 32) {  // one warp issues the boxes
        mbarrier_arrive(sh.bars + stage);
        return;
    }
    load_tile_boxes(p, maps, ts, w, sh.stages, sh.bars, tile, stage);
}

// Copied tiles land through the generic proxy: a thread that observed the
// landing (WG0 on the stage barrier, WG1/WG2 through P_READY) orders it
// before its own wgmma reads of the stage.
template <typename T>
__device__ __forceinline__ void order_copied_tile(const TileStream<T>& ts, const CtaWork& w, int tile) {
    if (!tile_by_tma(ts, w, tile)) fence_proxy_async_smem();
}

// WG0 before the scores of `tile`: its stage has landed.
template <typename T>
__device__ __forceinline__ void wait_tile(const TileStream<T>& ts, const CtaWork& w, const LatentShared& sh, int tile) {
    mbarrier_wait(sh.bars + stage_of(w.range, tile), phase_of(w.range, tile));
    order_copied_tile(ts, w, tile);
}

// WG1 before the queries are staged: the stage barriers, then both stages in flight.
template <typename T>
__device__ __forceinline__ void start_tiles(const AttentionParams& p, const LatentTmaMaps& maps,
                                            const TileStream<T>& ts, const CtaWork& w, const LatentShared& sh) {
    if (ts.ltid == 0) {
        for (int st = 0; st < kStages; ++st) mbarrier_init(sh.bars + st, kWgThreads);
        mbarrier_init_fence();
    }
    named_barrier_sync(kBarStagesReady, kWgThreads);  // every thread of WG1 arrives on them
    issue_tile(p, maps, ts, w, sh, w.range.begin);
    issue_tile(p, maps, ts, w, sh, w.range.begin + 1);
}

// WG1/WG2 before their value product of `tile`: WG0 handed P over (the
// tile's stage had landed before its scores).
template <typename T>
__device__ __forceinline__ void wait_values(const TileStream<T>& ts, const CtaWork& w, int tile) {
    named_barrier_sync(kBarPReady, kLatentThreads);
    order_copied_tile(ts, w, tile);
}

// WG1/WG2 after their last value product: every product of the CTA done
// (WG1's copies all landed: WG0 waited for every tile), WG0's row max / sum
// visible.
__device__ __forceinline__ void end_values() { named_barrier_sync(kBarEnd, kLatentThreads); }

// WG1/WG2 after their value products of `tile`: P may be overwritten;
// the stage refills with tile + 2 once both are done with it (WG1
// issues).
template <typename T>
__device__ __forceinline__ void release_tile(const AttentionParams& p, const LatentTmaMaps& maps,
                                             const TileStream<T>& ts, const CtaWork& w, const LatentShared& sh,
                                             int tile, int wg) {
    if (tile + 1 < w.range.end) named_barrier_arrive(kBarPFree, kLatentThreads);
    if (wg == 2) {
        if (tile + kStages < w.range.end) named_barrier_arrive(kBarKEmpty, 2 * kWgThreads);
    } else {
        if (tile + kStages < w.range.end) {
            named_barrier_sync(kBarKEmpty, 2 * kWgThreads);
            issue_tile(p, maps, ts, w, sh, tile + kStages);
        }
    }
}

// Queries -> shared memory, swizzled, padding rows zero: 6 threads per
// row, each with its row's address computed once and its 12 pieces loaded
// before any is stored (one memory latency). Queries in T (the absorb
// path's latent queries) move as raw 16-byte pieces; others convert.
// With p.q_rope the rope pieces come from the caller's q rows (in T,
// 16-byte aligned: the host's query_in_place) instead of the columns
// past the latent.
template <typename T, int kRows>
__device__ __forceinline__ void load_queries(const AttentionParams& p, const CtaWork& w, unsigned char* sQ, int tid) {
    using L = LatentSmem<kRows>;
    constexpr int kThreadsPerRow = kLatentThreads / kRows, kRowPieces = kKeyAtoms * 8;
    constexpr int kPiecesPerThread = kRowPieces / kThreadsPerRow, kLatentPieces = kLatentDim / 8;
    static_assert(kThreadsPerRow * kRows == kLatentThreads && kPiecesPerThread * kThreadsPerRow == kRowPieces,
                  "whole query rows per thread group");
    const int m = tid / kThreadsPerRow, sub = tid - m * kThreadsPerRow, mg = w.rb * kRows + m;
    const bool valid = mg < p.rows;
    int64_t off = 0, rope_off = 0;
    if (valid) {
        const QueryHead r = query_head(p, w.g, mg);
        off = row_offset(p.qa, w.b, r.qi, r.h);
        if (p.q_rope) rope_off = row_offset(p.q_rope_a, w.b, r.qi, r.h);
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

// Each row's last visible token; rows past the block's end see every token.
template <int kRows>
__device__ __forceinline__ void write_row_limits(const AttentionParams& p, const CtaWork& w, int* limit, int tid) {
    for (int m = tid; m < kRows; m += kLatentThreads) {
        const int mg = w.rb * kRows + m;
        limit[m] = (mg < p.rows) ? w.length - p.q_len + mg / p.heads_per_group : w.length - 1;
    }
}

// Every thread, once the first tiles' loads are in flight: waits for the
// query projection (the kernel is launched as its programmatic dependent;
// what came before read only what was there before it: lengths, page
// tables, the cache), stages the block's queries and row limits, and
// returns the first token some row of the block may not see (its first row
// has the earliest limit; rows past the block's end see everything).
template <typename T, int kRows>
__device__ __forceinline__ int stage_queries(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                             int tid) {
    grid_dependency_wait();
    load_queries<T, kRows>(p, w, sh.q, tid);
    write_row_limits<kRows>(p, w, sh.limit, tid);
    fence_proxy_async_smem();  // Q stores -> wgmma's proxy
    __syncthreads();
    return sh.limit[0] + 1;
}

// Whether tile `tile` (of kTileRows tokens) holds tokens some row of the
// block may not see (first_hidden: the first such token), loaded (before the
// end): the causal tail.
template <int kTileRows = kLatentTile>
__device__ __forceinline__ bool in_tail(const CtaWork& w, int first_hidden, int tile) {
    return (tile + 1) * kTileRows > first_hidden && first_hidden < w.length;
}

// Called by a whole warp of WG0 after the scores of `tile` (of kTileRows
// tokens, in atoms of kTileRows rows), with its stage landed: zeroes the
// non-finite latent elements (the values) of the tile's rows n wi .. n wi +
// n - 1 (n = kTileRows / 4) whose tokens lie in [first_hidden, length), and
// returns (to every lane) a mask of those rows that had one (bit k: row
// n wi + k).
template <typename T, int kTileRows = kLatentTile>
__device__ __forceinline__ uint32_t scrub_tail_rows(unsigned char* stage, int tile, int first_hidden, int length,
                                                    int wi, int lane) {
    constexpr int kPiecesPerRow = kLatentDim / 8;  // 16-byte pieces of a latent row
    constexpr int kWarpRows = kTileRows / 4, kTileAtomBytes = kTileRows * kSwizzleRowBytes;
    const int tile_first = tile * kTileRows;
    const int r_begin = max(kWarpRows * wi, first_hidden - tile_first);
    const int r_end = min(kWarpRows * wi + kWarpRows, length - tile_first);
    uint32_t bad_rows = 0;
    for (int i = lane; i < (r_end - r_begin) * kPiecesPerRow; i += 32) {
        const int r = r_begin + i / kPiecesPerRow, piece = i % kPiecesPerRow;
        uint4* at = reinterpret_cast<uint4*>(stage + (piece >> 3) * kTileAtomBytes + swizzled_offset(r, piece & 7));
        uint4 v = *at;
        if (scrub_pair<T>(v.x) | scrub_pair<T>(v.y) | scrub_pair<T>(v.z) | scrub_pair<T>(v.w)) {
            *at = v;
            bad_rows |= 1u << (r - kWarpRows * wi);
        }
    }
    return __reduce_or_sync(0xffffffffu, bad_rows);
}

}  // namespace gqla::cuda::latent

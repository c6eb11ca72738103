// SPDX-License-Identifier: Apache-2.0
// 8-bit latent tiles of the latent decode kernel (latent_wgmma_kernel.cu,
// FP8 = true; the transposed products only: their 32-row queries leave room
// for a staging buffer). The latent pool holds e4m3 bytes with one f32 scale
// per (token, 128-column block) and the rope key in bf16
// (docs/fp8-cache.md). WG1 loads and widens every tile:
//   1. the tile's stored bytes (32 KiB) go by 16-byte cp.async into the
//      staging buffer, each WG1 thread copying exactly the bytes it widens
//      later (so no barrier between copy and widening), and its rows' four
//      block scales into registers;
//   2. once the tile's stage is free, its rope rows go by cp.async straight
//      into the stage (bf16 already), their landing announced to the stage's
//      barrier by the hardware (cp.async.mbarrier.arrive.noinc);
//   3. the staged bytes are widened into the stage, in the swizzled layout
//      TMA would have written: e4m3 -> f16 exactly, times the block's scale
//      in f32, rounded once to bf16 (the bf16 nearest to the dequantized
//      value, as the CPU's bf16-dot absorb kernel stages it); each thread then
//      arrives on the stage's barrier, which completes with both halves;
//   4. the next tile's bytes go into the staging buffer at once.
// The widening thus sits between WG1's value products (WG2 and WG0 run
// on), and a tile's load has a whole tile period to land. The stage barriers
// expect 2 x 128 arrivals. Rows past the sequence's end are zero bytes with
// scale 0, i.e. zero, as copied 16-bit tiles are zero-filled; the causal
// tail's non-finite values (an e4m3 NaN widens to NaN) are scrubbed by WG0
// in the stage as for 16-bit tiles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../fp8_e4m3.cuh"
#include "latent_wgmma_tiles.cuh"

namespace gqla::cuda::latent {

constexpr int kFp8Blocks = 4;         // scales per latent row: 128-column blocks of the 512
constexpr int kFp8ThreadsPerRow = 4;  // each copies and widens 16 bytes of every 64-column atom
constexpr int kFp8RowsPerThread = kLatentTile / (kWgThreads / kFp8ThreadsPerRow);  // 2
constexpr int kLatentAtoms = kLatentDim / 64;
constexpr uint32_t kFp8StageArrivals = 2 * kWgThreads;  // rope copies landed + widened, per WG1 thread
static_assert(kLatentDim == kFp8Blocks * 128 && kLatentAtoms == 2 * kFp8Blocks, "latent blocks");

// What a WG1 thread keeps between staging a tile and widening it: its rows'
// block scales.
struct Fp8Staged {
    float4 scale[kFp8RowsPerThread];
};

// Byte offset of 16-byte chunk c (0..31) of token row r in the staging
// buffer: rows of 512 bytes, chunks XOR-swizzled by the row so that the 8
// rows a warp reads at once fall in distinct banks.
__device__ __forceinline__ int staging_offset(int r, int c) { return r * kLatentDim + ((c ^ (r & 7)) << 4); }

// Token handles of rows row0 + row_step * i of tile `tile` (-1 past the
// sequence's end): all page lookups first, so their latencies overlap.
template <int N>
__device__ __forceinline__ void tile_row_tokens(const AttentionParams& p, const CtaWork& w, int tile, int row0,
                                                int row_step, int64_t (&tb)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const int j = tile * kLatentTile + row0 + row_step * i;
        tb[i] = j < w.length ? cta_token(p, w, j) : -1;
    }
}

// Thread ltid of WG1: rows ltid / 4 + 32 i, chunks 4 a + ltid % 4 (atom a's
// columns 16 (ltid % 4) .. + 15, its 16-byte pieces 2 (ltid % 4) and + 1).
__device__ __forceinline__ void stage_fp8_tile(const AttentionParams& p, const CtaWork& w, unsigned char* staging,
                                               int tile, int ltid, Fp8Staged& st) {
    const unsigned char* k1 = static_cast<const unsigned char*>(p.k1.base);
    const int row0 = ltid / kFp8ThreadsPerRow, q = ltid % kFp8ThreadsPerRow;
    int64_t tb[kFp8RowsPerThread];
    tile_row_tokens(p, w, tile, row0, 32, tb);
#pragma unroll
    for (int i = 0; i < kFp8RowsPerThread; ++i) {
        const int r = row0 + 32 * i;
        const bool valid = tb[i] >= 0;
        const int64_t base = valid ? tb[i] : 0;
        const unsigned char* src = k1 + pool_offset(p.k1, base, w.g);
#pragma unroll
        for (int a = 0; a < kLatentAtoms; ++a) {
            const int c = kFp8ThreadsPerRow * a + q;
            cp_async_16(staging + staging_offset(r, c), valid ? src + 16 * c : k1, valid);
        }
        // The row's block scales: 16 bytes at scale_offset + 16 * slot of its page.
        const int64_t page = base >> 32, slot = base & 0xffffffff;
        st.scale[i] =
            valid ? __ldg(reinterpret_cast<const float4*>(k1 + page * p.k1.page_stride + p.k1.scale_offset + 16 * slot))
                  : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    cp_async_commit();
}

// Tile `tile`'s rope rows (bf16) by cp.async into the rope atom of `stage`,
// rows past the end zero; the hardware arrives on `bar` once they landed.
__device__ __forceinline__ void copy_rope_rows(const AttentionParams& p, const CtaWork& w, unsigned char* stage,
                                               uint64_t* bar, int tile, int ltid) {
    const __nv_bfloat16* k2 = static_cast<const __nv_bfloat16*>(p.k2.base);
    const int row0 = ltid >> 3, piece = ltid & 7;
    constexpr int kRowsPerThread = kLatentTile / (kWgThreads / 8);
    int64_t tb[kRowsPerThread];
    tile_row_tokens(p, w, tile, row0, 16, tb);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const bool valid = tb[i] >= 0;
        const __nv_bfloat16* src = k2 + pool_offset(p.k2, valid ? tb[i] : 0, w.g) + piece * 8;
        cp_async_16(stage + kLatentAtoms * kAtomBytes + swizzled_offset(row0 + 16 * i, piece), valid ? src : k2, valid);
    }
    cp_async_mbarrier_arrive_noinc(bar);
    cp_async_commit();
}

// The staged bytes of this thread (stage_fp8_tile's rows and chunks) ->
// bf16 in `stage`'s latent atoms.
__device__ __forceinline__ void widen_fp8_tile(const unsigned char* staging, const Fp8Staged& st, unsigned char* stage,
                                               int ltid) {
    const int row0 = ltid / kFp8ThreadsPerRow, q = ltid % kFp8ThreadsPerRow;
#pragma unroll
    for (int i = 0; i < kFp8RowsPerThread; ++i) {
        const int r = row0 + 32 * i;
        const float sc[kFp8Blocks] = {st.scale[i].x, st.scale[i].y, st.scale[i].z, st.scale[i].w};
#pragma unroll
        for (int a = 0; a < kLatentAtoms; ++a) {
            const uint4 bytes = *reinterpret_cast<const uint4*>(staging + staging_offset(r, kFp8ThreadsPerRow * a + q));
            unsigned char* atom = stage + a * kAtomBytes;
            const float s = sc[a / 2];  // 128-column blocks: two atoms each
            *reinterpret_cast<uint4*>(atom + swizzled_offset(r, 2 * q)) =
                widen8_e4m3_scaled(make_uint2(bytes.x, bytes.y), s);
            *reinterpret_cast<uint4*>(atom + swizzled_offset(r, 2 * q + 1)) =
                widen8_e4m3_scaled(make_uint2(bytes.z, bytes.w), s);
        }
    }
}

// Stage `stage` free: tile `tile`'s rope rows in flight, its staged bytes
// (copied before the newest group) widened, the stage's barrier told; then
// tile `tile` + 1's bytes into the staging buffer, if the split has it.
__device__ __forceinline__ void fill_fp8_stage(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                               int tile, int ltid, Fp8Staged& st) {
    const int stage = stage_of(w.range, tile);
    unsigned char* dst = sh.stages + stage * kStageBytes;
    copy_rope_rows(p, w, dst, sh.bars + stage, tile, ltid);
    cp_async_wait<1>();  // this thread's staged bytes of `tile` (the rope copies may still fly)
    widen_fp8_tile(sh.staging, st, dst, ltid);
    mbarrier_arrive(sh.bars + stage);
    if (tile + 1 < w.range.end) stage_fp8_tile(p, w, sh.staging, tile + 1, ltid, st);
}

// WG1 before the queries are staged: the stage barriers, and the split's
// first tile's bytes in flight.
__device__ __forceinline__ void start_fp8_tiles(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                int ltid, Fp8Staged& st) {
    if (ltid == 0) {
        for (int s = 0; s < kStages; ++s) mbarrier_init(sh.bars + s, kFp8StageArrivals);
        mbarrier_init_fence();
    }
    named_barrier_sync(kBarStagesReady, kWgThreads);  // every thread of WG1 arrives on them
    if (w.range.begin < w.range.end) stage_fp8_tile(p, w, sh.staging, w.range.begin, ltid, st);
}

// WG1 after the queries are staged, before its value products: both stages
// filled (the first two tiles widened), the third tile's bytes in flight.
__device__ __forceinline__ void fill_first_fp8_stages(const AttentionParams& p, const CtaWork& w,
                                                      const LatentShared& sh, int ltid, Fp8Staged& st) {
    for (int t = w.range.begin; t < w.range.end && t < w.range.begin + kStages; ++t)
        fill_fp8_stage(p, w, sh, t, ltid, st);
}

// WG1/WG2 after their value products of `tile` (release_tile's 8-bit form):
// P may be overwritten; once both are done with the stage, WG1 fills it
// with tile + 2.
__device__ __forceinline__ void release_fp8_tile(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                 int tile, int wg, int ltid, Fp8Staged& st) {
    if (tile + 1 < w.range.end) named_barrier_arrive(kBarPFree, kLatentThreads);
    if (tile + kStages >= w.range.end) return;
    if (wg == 2) {
        named_barrier_arrive(kBarKEmpty, 2 * kWgThreads);
    } else {
        named_barrier_sync(kBarKEmpty, 2 * kWgThreads);
        fill_fp8_stage(p, w, sh, tile + kStages, ltid, st);
    }
}

}  // namespace gqla::cuda::latent

// SPDX-License-Identifier: Apache-2.0
// 8-bit latent tiles of the latent decode kernel (latent_wgmma_kernel.cu,
// FP8 = true; the transposed products: their 32-row queries leave room for a
// staging buffer of a whole tile; 64-row blocks take half tiles,
// latent_wgmma_fp8_rows.cuh). The latent pool holds e4m3 bytes with one f32 scale
// per (token, 128-column block) and the rope key in bf16
// (docs/fp8-cache.md). The two value warpgroups (WG1, WG2: 256 threads, four
// per token row of a 64-token tile) load and widen every tile between their
// value products, each thread the same quarter row of every tile:
//   1. the tile's stored bytes (32 KiB) go by 16-byte cp.async into the
//      staging buffer, each thread copying exactly the bytes it widens later
//      (so no barrier between copy and widening), and its row's four block
//      scales into registers; the row's token handle for the next tile is
//      looked up then too, so no copy waits for a page-table read;
//   2. once the tile's stage is free (both warpgroups' products of the tile
//      two back done), its rope rows go by cp.async straight into the stage
//      (bf16 already), their landing announced to the stage's barrier by the
//      hardware (cp.async.mbarrier.arrive.noinc);
//   3. the staged bytes are widened into the stage, in the swizzled layout
//      TMA would have written: e4m3 -> f16 exactly, times the block's scale
//      in f32, rounded once to bf16 (the bf16 nearest to the dequantized
//      value, as the CPU's bf16-dot absorb kernel stages it); each thread then
//      arrives on the stage's barrier, which completes with both halves;
//   4. the next tile's bytes go into the staging buffer at once.
// Splitting the widening over both value warpgroups halves the time it adds
// to each one's tile loop (it was WG1's alone, beside its products). A
// tile's load has a whole tile period to land. The stage barriers expect
// 2 x 256 arrivals. Rows past the sequence's end are zero bytes with scale 0,
// i.e. zero, as copied 16-bit tiles are zero-filled; the causal tail's
// non-finite values (an e4m3 NaN widens to NaN) are scrubbed by WG0 in the
// stage as for 16-bit tiles.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../fp8_e4m3.cuh"
#include "latent_wgmma_tiles.cuh"

namespace gqla::cuda::latent {

constexpr int kFp8Blocks = 4;                                 // scales per latent row: 128-column blocks of the 512
constexpr int kFp8Threads = 2 * kWgThreads;                   // WG1 and WG2
constexpr int kFp8ThreadsPerRow = kFp8Threads / kLatentTile;  // 4: 16 bytes of every 64-column atom each
constexpr int kLatentAtoms = kLatentDim / 64;
constexpr int kRopePieces = kRopeDim / 8;                              // 16-byte pieces of a rope row
constexpr int kRopePiecesPerThread = kRopePieces / kFp8ThreadsPerRow;  // 2
constexpr uint32_t kFp8StageArrivals = 2 * kFp8Threads;                // rope copies landed + widened, per thread
static_assert(kLatentDim == kFp8Blocks * 128 && kLatentAtoms == 2 * kFp8Blocks, "latent blocks");
static_assert(kFp8ThreadsPerRow * kLatentTile == kFp8Threads && kRopePiecesPerThread * kFp8ThreadsPerRow == kRopePieces,
              "one quarter row per thread");

// What a thread of WG1/WG2 (ftid = tid - 128: row ftid / 4, quarter ftid % 4
// of every tile) keeps between staging a tile and widening it: its row's
// block scales and token handle (-1 past the sequence's end), and the token
// handle of its row in the next tile, looked up ahead.
struct Fp8Staged {
    float4 scale;
    int64_t token;
    int64_t next;
};

// Byte offset of 16-byte chunk c (0..31) of token row r in the staging
// buffer: rows of 512 bytes, chunks XOR-swizzled by the row so that the 8
// rows a warp reads at once fall in distinct banks.
__device__ __forceinline__ int staging_offset(int r, int c) { return r * kLatentDim + ((c ^ (r & 7)) << 4); }

// Token handle of row `row` of tile `tile`, -1 past the sequence's end or
// the split's last tile.
__device__ __forceinline__ int64_t fp8_row_token(const AttentionParams& p, const CtaWork& w, int tile, int row) {
    const int j = tile * kLatentTile + row;
    return tile < w.range.end && j < w.length ? cta_token(p, w, j) : -1;
}

// Tile `tile`'s bytes of thread ftid's row (st.next, looked up ahead) into
// the staging buffer: chunks 4 a + ftid % 4 (atom a's columns 16 (ftid % 4)
// .. + 15); its block scales into registers; the row's next token looked up.
__device__ __forceinline__ void stage_fp8_tile(const AttentionParams& p, const CtaWork& w, unsigned char* staging,
                                               int tile, int ftid, Fp8Staged& st) {
    const unsigned char* k1 = static_cast<const unsigned char*>(p.k1.base);
    const int r = ftid / kFp8ThreadsPerRow, q = ftid % kFp8ThreadsPerRow;
    st.token = st.next;
    const bool valid = st.token >= 0;
    const int64_t base = valid ? st.token : 0;
    const unsigned char* src = k1 + pool_offset(p.k1, base, w.g);
#pragma unroll
    for (int a = 0; a < kLatentAtoms; ++a) {
        const int c = kFp8ThreadsPerRow * a + q;
        cp_async_16(staging + staging_offset(r, c), valid ? src + 16 * c : k1, valid);
    }
    cp_async_commit();
    // The row's block scales: 16 bytes at scale_offset + 16 * slot of its page.
    const int64_t page = base >> 32, slot = base & 0xffffffff;
    st.scale =
        valid ? __ldg(reinterpret_cast<const float4*>(k1 + page * p.k1.page_stride + p.k1.scale_offset + 16 * slot))
              : make_float4(0.f, 0.f, 0.f, 0.f);
    st.next = fp8_row_token(p, w, tile + 1, r);
}

// The rope pieces of thread ftid's row of the staged tile (bf16) by
// cp.async into the rope atom of `stage`, past the end zero; the hardware
// arrives on `bar` once they landed.
__device__ __forceinline__ void copy_rope_rows(const AttentionParams& p, const CtaWork& w, unsigned char* stage,
                                               uint64_t* bar, int ftid, const Fp8Staged& st) {
    const __nv_bfloat16* k2 = static_cast<const __nv_bfloat16*>(p.k2.base);
    const int r = ftid / kFp8ThreadsPerRow, q = ftid % kFp8ThreadsPerRow;
    const bool valid = st.token >= 0;
    const __nv_bfloat16* src = k2 + pool_offset(p.k2, valid ? st.token : 0, w.g);
#pragma unroll
    for (int i = 0; i < kRopePiecesPerThread; ++i) {
        const int piece = kRopePiecesPerThread * q + i;
        cp_async_16(stage + kLatentAtoms * kAtomBytes + swizzled_offset(r, piece), valid ? src + piece * 8 : k2, valid);
    }
    cp_async_mbarrier_arrive_noinc(bar);
    cp_async_commit();
}

// The staged bytes of this thread (stage_fp8_tile's row and chunks) ->
// bf16 in `stage`'s latent atoms.
__device__ __forceinline__ void widen_fp8_tile(const unsigned char* staging, const Fp8Staged& st, unsigned char* stage,
                                               int ftid) {
    const int r = ftid / kFp8ThreadsPerRow, q = ftid % kFp8ThreadsPerRow;
    const float sc[kFp8Blocks] = {st.scale.x, st.scale.y, st.scale.z, st.scale.w};
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

// Stage of `tile` free: the tile's rope rows in flight, its staged bytes
// (copied before the newest group) widened, the stage's barrier told; then
// tile `tile` + 1's bytes into the staging buffer, if the split has it.
__device__ __forceinline__ void fill_fp8_stage(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                               int tile, int ftid, Fp8Staged& st) {
    const int stage = stage_of(w.range, tile);
    unsigned char* dst = sh.stages + stage * kStageBytes;
    copy_rope_rows(p, w, dst, sh.bars + stage, ftid, st);
    cp_async_wait<1>();  // this thread's staged bytes of `tile` (the rope copies may still fly)
    widen_fp8_tile(sh.staging, st, dst, ftid);
    mbarrier_arrive(sh.bars + stage);
    if (tile + 1 < w.range.end) stage_fp8_tile(p, w, sh.staging, tile + 1, ftid, st);
}

// WG1/WG2 before the queries are staged: the stage barriers, and the
// split's first tile's bytes in flight.
__device__ __forceinline__ void start_fp8_tiles(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                int ftid, Fp8Staged& st) {
    if (ftid == 0) {
        for (int s = 0; s < kStages; ++s) mbarrier_init(sh.bars + s, kFp8StageArrivals);
        mbarrier_init_fence();
    }
    named_barrier_sync(kBarStagesReady, kFp8Threads);  // every thread of WG1/WG2 arrives on them
    st.next = fp8_row_token(p, w, w.range.begin, ftid / kFp8ThreadsPerRow);
    if (w.range.begin < w.range.end) stage_fp8_tile(p, w, sh.staging, w.range.begin, ftid, st);
}

// WG1/WG2 after the queries are staged, before their value products: both
// stages filled (the first two tiles widened), the third tile's bytes in
// flight.
__device__ __forceinline__ void fill_first_fp8_stages(const AttentionParams& p, const CtaWork& w,
                                                      const LatentShared& sh, int ftid, Fp8Staged& st) {
    for (int t = w.range.begin; t < w.range.end && t < w.range.begin + kStages; ++t)
        fill_fp8_stage(p, w, sh, t, ftid, st);
}

// WG1/WG2 after their value products of `tile` (release_tile's 8-bit form):
// P may be overwritten; once both are done with the stage, both fill it
// with tile + 2.
__device__ __forceinline__ void release_fp8_tile(const AttentionParams& p, const CtaWork& w, const LatentShared& sh,
                                                 int tile, int ftid, Fp8Staged& st) {
    if (tile + 1 < w.range.end) named_barrier_arrive(kBarPFree, kLatentThreads);
    if (tile + kStages >= w.range.end) return;
    named_barrier_sync(kBarKEmpty, kFp8Threads);
    fill_fp8_stage(p, w, sh, tile + kStages, ftid, st);
}

}  // namespace gqla::cuda::latent

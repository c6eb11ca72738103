// SPDX-License-Identifier: Apache-2.0
// The 8-bit (e4m3) cache's side of the prefill kernel (prefill_wgmma_kernel.cu):
// a tile's stored key and value bytes and their per-(token, KV head) scales
// copied by the producer warpgroup into a staging buffer, then widened with
// their scales into the bf16 tiles in the 128B swizzle the consumers' wgmma
// read, so the consumers run exactly as for a bf16 cache. GQA kind, keys and
// values 128 wide (one 128-byte row of each per token). Layout of the pools:
// docs/fp8-cache.md.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../fp8_e4m3.cuh"
#include "prefill_wgmma_phases.cuh"

namespace gqla::cuda::prefill {

constexpr int kFp8RowBytes = 128;                           // one key or value row of e4m3
constexpr int kFp8TileBytes = kPrefillTile * kFp8RowBytes;  // the keys (or values) of a tile
constexpr int kFp8StagingBytes = 2 * kFp8TileBytes;         // keys, then values
constexpr int kFp8ScaleBytes = 2 * kPrefillTile * 4;        // key scales [128], then value scales [128]
constexpr int kFp8PiecesPerRow = kFp8RowBytes / 16;         // 16-byte copies of a row
static_assert(kFp8PiecesPerRow == 8 && kProducerThreads == kPrefillTile, "one producer thread per token row");

// The stored key and value bytes of tile `tile` -> staging (row-major
// [token][128], keys then values) by cp.async, 8 threads per row, slots past
// the sequence's end zero-filled (zero bytes read back as 0).
__device__ __forceinline__ void copy_fp8_rows(const AttentionParams& p, const Work& w, int tile, unsigned char* staging,
                                              int ptid) {
    const unsigned char* kb = static_cast<const unsigned char*>(p.k1.base);
    const unsigned char* vb = static_cast<const unsigned char*>(p.v.base);
    const int piece = ptid & 7;
#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int r = (ptid >> 3) + pass * kRowsPerLoadPass;
        const int j = tile * kPrefillTile + r;
        const bool valid = j < w.length;
        const int64_t tb = valid ? token_base(w.table, j, p.page_size, p.page_shift) : 0;
        unsigned char* dst = staging + r * kFp8RowBytes + piece * 16;
        cp_async_16(dst, valid ? kb + pool_offset(p.k1, tb, w.g) + piece * 16 : kb, valid);
        cp_async_16(dst + kFp8TileBytes, valid ? vb + pool_offset(p.v, tb, w.g) + piece * 16 : vb, valid);
    }
}

// The key and value scales of tile `tile`'s tokens -> scales ([128] keys,
// then [128] values), one token per thread; zero past the sequence's end.
__device__ __forceinline__ void copy_fp8_scales(const AttentionParams& p, const Work& w, int tile, float* scales,
                                                int ptid) {
    const unsigned char* kb = static_cast<const unsigned char*>(p.k1.base);
    const unsigned char* vb = static_cast<const unsigned char*>(p.v.base);
    const int j = tile * kPrefillTile + ptid;
    const bool valid = j < w.length;
    const int64_t tb = valid ? token_base(w.table, j, p.page_size, p.page_shift) : 0;
    const int64_t page = tb >> 32, slot = tb & 0xffffffff;
    cp_async_4(scales + ptid, valid ? kb + pool_scale_offset(p.k1, page, w.g, p.page_size, slot) : kb, valid);
    cp_async_4(scales + kPrefillTile + ptid, valid ? vb + pool_scale_offset(p.v, page, w.g, p.page_size, slot) : vb,
               valid);
}

// The scales a producer thread widens with: its kLoadPasses token rows'
// key and value scales.
struct Fp8RowScales {
    float k[kLoadPasses], v[kLoadPasses];
};

__device__ __forceinline__ Fp8RowScales read_fp8_scales(const float* scales, int ptid) {
    Fp8RowScales s;
#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int r = (ptid >> 3) + pass * kRowsPerLoadPass;
        s.k[pass] = scales[r];
        s.v[pass] = scales[kPrefillTile + r];
    }
    return s;
}

// Staging (keys then values, row-major bytes) -> the bf16 key and value
// tiles dK, dV (two swizzled 64-column atoms each): each thread widens the
// 8-byte pieces `piece` of its rows, the layout copy_tile writes.
__device__ __forceinline__ void widen_fp8_tile(const unsigned char* staging, const Fp8RowScales& sc, unsigned char* dK,
                                               unsigned char* dV, int ptid) {
    const int piece = ptid & 7;
#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int r = (ptid >> 3) + pass * kRowsPerLoadPass;
        const int so = swizzled_offset(r, piece);
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const int c = a * 64 + piece * 8;
            const uint2 kbytes = *reinterpret_cast<const uint2*>(staging + r * kFp8RowBytes + c);
            const uint2 vbytes = *reinterpret_cast<const uint2*>(staging + kFp8TileBytes + r * kFp8RowBytes + c);
            *reinterpret_cast<uint4*>(dK + a * kAtomBytes + so) = widen8_e4m3_scaled(kbytes, sc.k[pass]);
            *reinterpret_cast<uint4*>(dV + a * kAtomBytes + so) = widen8_e4m3_scaled(vbytes, sc.v[pass]);
        }
    }
}

}  // namespace gqla::cuda::prefill

// SPDX-License-Identifier: Apache-2.0
// Warp-wide cp.async copies of 16 cache rows into shared memory, shared by
// the per-warp and narrow-group decode kernels. Consecutive lanes take
// consecutive 16-byte pieces of a row, so one warp instruction reads whole
// rows (coalesced) instead of a slice of sixteen.
#pragma once

#include "mma_primitives.cuh"

namespace gqla::cuda {

// Where element (row r, column c) of a 16-row shared-memory tile lives:
// rows `stride` elements apart; with `swizzle` (rows a multiple of 64
// elements) the 16-byte piece c/8 of row r sits at piece (c/8) ^ (r % 8) of
// its 128-byte group, so the 8 rows an ldmatrix reads hit 8 distinct bank
// groups without padding columns. `block` is how far apart the groups of 64
// columns are: 64 when they follow each other within a row, 16 * 64 when
// the tile is stored as the boxes a TMA load writes (64 columns x 16 rows
// each, stride 64; the same swizzle, which is the hardware's 128B one).
struct SmemRows {
    int stride;
    bool swizzle;
    int block = 64;
};
__device__ __forceinline__ int smem_index(SmemRows s, int r, int c) {
    if (s.block == 64) return r * s.stride + (s.swizzle ? ((((c >> 3) ^ (r & 7)) << 3) | (c & 7)) : c);
    return (c >> 6) * s.block + r * s.stride + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}

// 16 rows of `dim` elements from rows `row_stride` apart starting at `src`
// (rows >= valid_rows are zero-filled) into columns [col0, col0 + dim) of
// the tile. piece_shift: log2(dim / 8) when that is a power of two, else -1.
template <typename T>
__device__ __forceinline__ void copy_contiguous_rows16(T* tile, SmemRows rows, int col0, const T* src, int row_stride,
                                                       int dim, int piece_shift, int valid_rows, int lane) {
    const int per_row = dim >> 3;
    for (int piece = lane; piece < 16 * per_row; piece += 32) {
        const int r = piece_shift >= 0 ? piece >> piece_shift : piece / per_row;
        const int c = (piece - r * per_row) << 3;
        const bool valid = r < valid_rows;
        cp_async_16(tile + smem_index(rows, r, col0 + c), valid ? src + r * row_stride + c : src, valid);
    }
}

// Same for rows whose sources differ (pages not aligned to 16 tokens): lane
// r < 16 holds row r's source, null when the row is past the end.
template <typename T>
__device__ __forceinline__ void copy_scattered_rows16(T* tile, SmemRows rows, int col0, const T* row_src, int dim,
                                                      const T* any, int lane) {
    const int per_row = dim >> 3;
    const int total = 16 * per_row;
    for (int idx = lane; idx - lane < total; idx += 32) {
        const int row = idx < total ? idx / per_row : 0;  // every lane joins the shuffle
        const T* src =
            reinterpret_cast<const T*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row_src), row));
        if (idx < total) {
            const int c = (idx - row * per_row) << 3;
            cp_async_16(tile + smem_index(rows, row, col0 + c), src ? src + c : any, src != nullptr);
        }
    }
}

// 16 rows of `bytes` bytes (a multiple of 16; 8-bit cache rows) from rows
// `row_stride` bytes apart starting at `src` (rows >= valid_rows are
// zero-filled) into a byte tile whose rows are `stride` bytes apart.
__device__ __forceinline__ void copy_contiguous_byte_rows16(unsigned char* tile, int stride, const unsigned char* src,
                                                            int row_stride, int bytes, int valid_rows, int lane) {
    const int per_row = bytes >> 4;
    for (int piece = lane; piece < 16 * per_row; piece += 32) {
        const int r = piece / per_row, c = (piece - r * per_row) << 4;
        const bool valid = r < valid_rows;
        cp_async_16(tile + r * stride + c, valid ? src + static_cast<int64_t>(r) * row_stride + c : src, valid);
    }
}

// 16 rows of `bytes` bytes (a multiple of 8; 8-bit cache rows) from the
// per-lane sources of copy_scattered_rows16 into a byte tile whose rows are
// `stride` bytes apart: 16-byte pieces where the rows allow, else 8-byte ones.
__device__ __forceinline__ void copy_scattered_byte_rows16(unsigned char* tile, int stride,
                                                           const unsigned char* row_src, int bytes,
                                                           const unsigned char* any, int lane) {
    const int piece = bytes % 16 == 0 ? 16 : 8;
    const int per_row = bytes / piece;
    const int total = 16 * per_row;
    for (int idx = lane; idx - lane < total; idx += 32) {
        const int row = idx < total ? idx / per_row : 0;  // every lane joins the shuffle
        const unsigned char* src = reinterpret_cast<const unsigned char*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row_src), row));
        if (idx < total) {
            const int c = (idx - row * per_row) * piece;
            unsigned char* dst = tile + row * stride + c;
            if (piece == 16)
                cp_async_16(dst, src ? src + c : any, src != nullptr);
            else
                cp_async_8(dst, src ? src + c : any, src != nullptr);
        }
    }
}

}  // namespace gqla::cuda

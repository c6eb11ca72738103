// Warp-wide cp.async copies of 16 cache rows into shared memory, shared by
// the per-warp and narrow-group decode kernels. Consecutive lanes take
// consecutive 16-byte pieces of a row, so one warp instruction reads whole
// rows (coalesced) instead of a slice of sixteen.
#pragma once

#include "mma_primitives.cuh"

namespace gqla::cuda {

// 16 rows of `dim` elements from rows `row_stride` apart starting at `src`
// (rows >= valid_rows are zero-filled) into smem rows `stride` apart.
// piece_shift: log2(dim / 8) when that is a power of two, else -1.
template <typename T>
__device__ __forceinline__ void copy_contiguous_rows16(T* dst, int stride, const T* src, int row_stride, int dim,
                                                       int piece_shift, int valid_rows, int lane) {
    const int per_row = dim >> 3;
    for (int piece = lane; piece < 16 * per_row; piece += 32) {
        const int r = piece_shift >= 0 ? piece >> piece_shift : piece / per_row;
        const int c = (piece - r * per_row) << 3;
        const bool valid = r < valid_rows;
        cp_async_16(dst + r * stride + c, valid ? src + r * row_stride + c : src, valid);
    }
}

// Same for rows whose sources differ (pages not aligned to 16 tokens): lane
// r < 16 holds row r's source, null when the row is past the end.
template <typename T>
__device__ __forceinline__ void copy_scattered_rows16(T* dst, int stride, const T* row_src, int dim, const T* any,
                                                      int lane) {
    const int per_row = dim >> 3;
    const int total = 16 * per_row;
    for (int idx = lane; idx - lane < total; idx += 32) {
        const int row = idx < total ? idx / per_row : 0;  // every lane joins the shuffle
        const T* src = reinterpret_cast<const T*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row_src), row));
        if (idx < total) {
            const int c = (idx - row * per_row) << 3;
            cp_async_16(dst + row * stride + c, src ? src + c : any, src != nullptr);
        }
    }
}

}  // namespace gqla::cuda

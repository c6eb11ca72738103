// SPDX-License-Identifier: Apache-2.0
// Shared-memory layout of the narrow-group decode kernel
// (attention_narrow_kernel.cuh): its K/V rings, the warps' outputs reusing
// them, the row statistics and the slot barriers.
#pragma once

#include "attention_kernels.hpp"

namespace gqla::cuda {

struct NarrowLayout {
    int k_stride, v_stride;  // elements between rows of a K / V slot
    int block;               // elements between 64-column groups (see SmemRows)
    int slot_elems, warp_bytes, o_off, f_off, bar_off, bytes;
    int merge_off;  // a cluster launch's merge region (kNarrowClusterMergeBytes more)
    int o_stride;   // floats between rows of a warp's (or the merged) O
    int q_pow_off;  // 8-bit caches: the query rows' powers of two (narrow_fp8_layout)
    bool swizzle, boxes;
};

// Rows a multiple of 64 elements can be swizzled (see SmemRows) instead of
// padded by 8 elements (either way ldmatrix rows hit distinct banks). The
// swizzle saves shared memory (GQLA's 192-wide keys fit 3 CTAs per SM instead
// of 2) but costs registers (the swizzled offsets stay live), so the planner
// takes whichever layout fits more CTAs.
__host__ __device__ inline bool narrow_can_swizzle(int dk, int dv) { return dk % 64 == 0 && dv % 64 == 0; }

// TmaBoxes also needs the first key part's width a multiple of 64 (its
// boxes and the second part's must not share a column group).
// row_blocks: row blocks per CTA, whose warps share warps / row_blocks rings.
__host__ __device__ inline NarrowLayout narrow_layout(int dk, int dv, int slots, NarrowRows rows, int warps,
                                                      int row_blocks = 1) {
    NarrowLayout L{};
    const int rings = warps / row_blocks;
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    L.swizzle = rows != NarrowRows::Padded && narrow_can_swizzle(dk, dv);
    L.boxes = rows == NarrowRows::TmaBoxes && L.swizzle;
    L.k_stride = L.boxes ? 64 : L.swizzle ? dk : dk16 + 8;
    L.v_stride = L.boxes ? 64 : L.swizzle ? dv : dv16 + 8;
    L.block = L.boxes ? 16 * 64 : 64;
    // A slot serves as K rows or V rows in turn (odd R), so it fits either
    // (boxes: 16 rows x 64 columns each, as many as the wider of the two).
    const int k_row = L.boxes ? dk : L.k_stride, v_row = L.boxes ? dv : L.v_stride;
    L.slot_elems = 16 * (k_row > v_row ? k_row : v_row);
    L.warp_bytes = slots * L.slot_elems * 2;
    // Each warp's rescaled O, then the merged O, reuse the slots once every
    // warp is done with them. Rows 4 floats longer than dv16: the fragment
    // stores of a warp (rows 2fc, 2fc + 1; columns fr + 16i) hit distinct banks.
    L.o_off = 0;
    L.o_stride = dv16 + 4;
    const int kv_bytes = rings * L.warp_bytes, o_bytes = (warps + 1) * kNarrowRows * L.o_stride * 4;
    L.f_off = (kv_bytes > o_bytes ? kv_bytes : o_bytes);
    // Row maxima and sums per warp and per row, then each row's output offset (int64).
    const int cta_rows = kNarrowRows * row_blocks;
    L.bar_off = L.f_off + (2 * warps * kNarrowRows + 2 * cta_rows) * 4 + cta_rows * 8;  // a multiple of 8
    L.bytes = L.bar_off;
    // Boxes: one mbarrier per slot (shared rings: and one the slot's readers
    // count down), and slack to align the base to the 1024-byte period of
    // the 128B swizzle (slots are multiples of 2 KiB).
    const int bar_bytes = L.boxes ? rings * slots * 8 * (row_blocks > 1 ? 2 : 1) : 0;
    if (L.boxes) L.bytes += bar_bytes + 1024;
    // Past the barriers, within the slack kNarrowClusterMergeBytes adds.
    L.merge_off = (L.bar_off + bar_bytes + 15) / 16 * 16;
    return L;
}

// The 8-bit-cache kernel (attention_narrow_fp8_kernel.cuh): a slot holds 16
// rows of stored bytes (K or V; strides and slot_elems count bytes) an odd
// number of 16-byte pieces apart, so the 8 rows an ldmatrix reads hit
// distinct banks, then the 16 rows' f32 scales. Warp 0's first slot holds
// the staged f16 query rows before its first half (16 (dk + 8) bytes, less
// than a slot), and the rows' powers of two follow the row statistics
// (q_pow_off). No barriers, no boxes: cp.async copies.
__host__ __device__ inline NarrowLayout narrow_fp8_layout(int dk, int dv, int slots, int warps) {
    NarrowLayout L{};
    const int widest = dk > dv ? dk : dv, pieces = (widest + 15) / 16, dv16 = (dv + 15) / 16 * 16;
    L.k_stride = L.v_stride = 16 * (pieces | 1);
    L.slot_elems = 16 * L.k_stride + 16 * 4;
    L.warp_bytes = slots * L.slot_elems;
    L.o_off = 0;
    L.o_stride = dv16 + 4;
    const int kv_bytes = warps * L.warp_bytes, o_bytes = (warps + 1) * kNarrowRows * L.o_stride * 4;
    L.f_off = kv_bytes > o_bytes ? kv_bytes : o_bytes;
    L.bar_off = L.f_off + (2 * warps * kNarrowRows + 2 * kNarrowRows) * 4 + kNarrowRows * 8;
    L.q_pow_off = L.bar_off;
    L.bytes = L.q_pow_off + kNarrowRows * 4;
    L.merge_off = (L.bytes + 15) / 16 * 16;
    return L;
}

}  // namespace gqla::cuda

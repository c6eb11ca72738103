// SPDX-License-Identifier: Apache-2.0
// Host entry points of the kernels that move cache rows and tables: writing
// appended rows into the paged pools (with dtype conversion), reading latent
// rows back for expansion, copy-on-write page copies, the device-side
// sequence tables, and 2-D dtype conversions (weights).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gqla::cuda {

// rows x groups x dim elements: src (row, g, c) -> pool token row_token[row].
struct ScatterParams {
    const void* src;
    int32_t src_dtype;
    int64_t src_row_stride, src_group_stride;
    void* dst;
    int32_t dst_dtype;
    int64_t dst_page_stride, dst_group_stride;
    int32_t dst_row_stride;
    int32_t page_size, groups, dim, rows;
    const int64_t* row_token;  // global token index page * page_size + slot, per row
    // dst_dtype FP8_E4M3: each block of scale_block columns of a (row,
    // group) quantized with its own scale (docs/fp8-cache.md), block b's
    // stored at byte page * dst_page_stride + dst_scale_offset +
    // 4 * ((g * page_size + slot) * dst_scale_cols + b).
    int64_t dst_scale_offset;
    int32_t dst_scale_cols;  // blocks per row (>= 1 for 8-bit pools)
    int32_t scale_block;     // columns per block
    // src_dtype FP8_E4M3 (stored rows, a sequence import): the codes are
    // copied as they are, with block b of (row, group) taking the scale
    // src_scales[row * src_scale_row_stride + g * dst_scale_cols + b].
    const float* src_scales;
    int64_t src_scale_row_stride;
};
void launch_scatter_rows(const ScatterParams& p, cudaStream_t stream);

// Where an 8-bit pool's scales lie: `cols` f32 per slot from byte `offset`
// of its page, one per `block` columns (unused for other dtypes).
struct GatherScales {
    int64_t offset;
    int32_t cols, block;
};
// Pool rows (one group) -> contiguous [rows][dim] in dst_dtype (8-bit rows
// widened with their scales).
void launch_gather_rows(const void* pool, int32_t dtype, int64_t page_stride, int32_t row_stride, int32_t page_size,
                        int32_t dim, const int64_t* row_token, int32_t rows, void* dst, int32_t dst_dtype,
                        const GatherScales& scales, cudaStream_t stream);

// Token indices (page * page_size + slot, as launch_scatter_rows and
// launch_gather_rows take them) of positions [start, start + rows) of up to
// kTokenSegmentsPerLaunch sequences, looked up in the device page tables, so
// that work queued on the stream (or replayed from a CUDA graph) finds the
// pages the tables hold then, with no host staging. Segment i fills
// tokens[out_row[i] .. out_row[i] + rows[i]).
constexpr int kTokenSegmentsPerLaunch = 64;
struct SequenceTokensParams {
    const int32_t* page_tables;
    int64_t table_stride;
    int32_t page_size;
    int32_t count;  // segments
    int64_t* tokens;
    int32_t slot[kTokenSegmentsPerLaunch];
    int32_t rows[kTokenSegmentsPerLaunch];
    int32_t out_row[kTokenSegmentsPerLaunch];
    int64_t start[kTokenSegmentsPerLaunch];
};
void launch_sequence_tokens(const SequenceTokensParams& p, cudaStream_t stream);

// Copy whole pages src[i] -> dst[i] of every layer of one pool.
constexpr int kCopyPagesPerLaunch = 128;
struct CopyPagesParams {
    unsigned char* pool;
    int64_t layer_bytes, page_bytes;
    int32_t layers, count;
    int32_t src[kCopyPagesPerLaunch], dst[kCopyPagesPerLaunch];
};
void launch_copy_pages(const CopyPagesParams& p, cudaStream_t stream);

// Writes part of one slot's device page table and lengths, from parameters,
// so the update is stream-ordered with no host staging and no sync.
constexpr int kTablePagesPerLaunch = 512;
constexpr int kTableLayersPerLaunch = 128;
struct TableUpdateParams {
    int32_t* page_tables;
    int64_t table_stride;
    int32_t* lengths;
    int32_t max_sequences;
    int32_t slot;
    int32_t page_begin, page_count;
    int32_t layer_begin, layer_count;
    int32_t pages[kTablePagesPerLaunch];
    int32_t layer_lengths[kTableLayersPerLaunch];
};
void launch_table_update(const TableUpdateParams& p, cudaStream_t stream);

// dst[r][c] (contiguous, dst_dtype) = src[r*row_stride + c] of any dtype.
void launch_convert_2d(const void* src, int32_t dtype, int64_t rows, int64_t cols, int64_t row_stride, void* dst,
                       int32_t dst_dtype, cudaStream_t stream);

}  // namespace gqla::cuda

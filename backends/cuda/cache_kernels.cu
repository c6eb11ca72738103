// SPDX-License-Identifier: Apache-2.0
// Kernels that move cache rows and sequence tables (see cache_kernels.hpp).
// None of them is on the decode hot path except through the tables they fill.
#include "cache_kernels.hpp"

#include <algorithm>
#include "core/dtype.hpp"
#include "cuda_status.hpp"
#include "device_dtype.cuh"
#include "fp8_e4m3.cuh"

namespace gqla::cuda {

namespace {

__global__ void scatter_rows_kernel(const __grid_constant__ ScatterParams p) {
    const int row = blockIdx.x / p.groups, g = blockIdx.x % p.groups;
    const int64_t tok = p.row_token[row];
    const int64_t page = tok / p.page_size, slot = tok % p.page_size;
    const int64_t src = row * p.src_row_stride + g * p.src_group_stride;
    const int64_t dst = page * p.dst_page_stride + g * p.dst_group_stride + slot * p.dst_row_stride;
    for (int c = threadIdx.x; c < p.dim; c += blockDim.x)
        store_elem(p.dst, p.dst_dtype, dst + c, load_elem(p.src, p.src_dtype, src + c));
}

// The same copy when source and pool hold one dtype and every row starts on
// a 16-byte boundary (the expansion's products, in the cache dtype): one
// 16-byte move per thread, grid-stride, instead of a block per (row, group)
// converting element by element, which took most of a 4096-token
// DeepSeek-V3 expansion (131072 blocks of 128 two-byte moves per chunk).
__global__ void scatter_rows_vec16_kernel(const __grid_constant__ ScatterParams p, int elem_bytes, int vecs_per_row) {
    const int64_t total = int64_t(p.rows) * p.groups * vecs_per_row;
    const unsigned char* src = static_cast<const unsigned char*>(p.src);
    unsigned char* dst = static_cast<unsigned char*>(p.dst);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int v = static_cast<int>(i % vecs_per_row);
        const int64_t row_group = i / vecs_per_row;
        const int g = static_cast<int>(row_group % p.groups);
        const int64_t row = row_group / p.groups;
        const int64_t tok = p.row_token[row];
        const int64_t page = tok / p.page_size, slot = tok % p.page_size;
        const int64_t s = (row * p.src_row_stride + g * p.src_group_stride) * elem_bytes + v * 16;
        const int64_t d =
            (page * p.dst_page_stride + g * p.dst_group_stride + slot * p.dst_row_stride) * elem_bytes + v * 16;
        *reinterpret_cast<int4*>(dst + d) = *reinterpret_cast<const int4*>(src + s);
    }
}

// 8-bit pools: one warp per (row, group, block of scale_block columns):
// the block's largest finite magnitude (warp maximum) gives its scale, then
// each element is quantized (fp8_e4m3.cuh) and lane 0 stores the scale
// after the page's rows. Stored rows (src_dtype FP8_E4M3) keep their codes
// and bring their scales.
__global__ void scatter_rows_fp8_kernel(const __grid_constant__ ScatterParams p) {
    const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
    const int64_t item = int64_t(blockIdx.x) * warps + threadIdx.x / 32;
    if (item >= int64_t(p.rows) * p.groups * p.dst_scale_cols) return;
    const int b = static_cast<int>(item % p.dst_scale_cols);
    const int64_t row_group = item / p.dst_scale_cols;
    const int64_t row = row_group / p.groups;
    const int g = static_cast<int>(row_group % p.groups);
    const int64_t tok = p.row_token[row];
    const int64_t page = tok / p.page_size, slot = tok % p.page_size;
    const int64_t src = row * p.src_row_stride + g * p.src_group_stride;
    const int c0 = b * p.scale_block, c1 = min(p.dim, c0 + p.scale_block);
    unsigned char* page_base = static_cast<unsigned char*>(p.dst) + page * p.dst_page_stride;
    unsigned char* dst = page_base + g * p.dst_group_stride + slot * p.dst_row_stride;
    float scale;
    if (p.src_dtype == GQLA_DTYPE_FP8_E4M3) {
        scale = p.src_scales[row * p.src_scale_row_stride + int64_t(g) * p.dst_scale_cols + b];
        const unsigned char* codes = static_cast<const unsigned char*>(p.src);
        for (int c = c0 + lane; c < c1; c += 32) dst[c] = codes[src + c];
    } else {
        float amax = 0.f;
        for (int c = c0 + lane; c < c1; c += 32) {
            const float a = fabsf(load_elem(p.src, p.src_dtype, src + c));
            if (a <= 3.40282347e38f) amax = fmaxf(amax, a);  // finite elements only
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        scale = fp8_scale_for(amax);
        for (int c = c0 + lane; c < c1; c += 32) dst[c] = quantize_e4m3(load_elem(p.src, p.src_dtype, src + c), scale);
    }
    if (lane == 0)
        *reinterpret_cast<float*>(page_base + p.dst_scale_offset +
                                  4 * ((int64_t(g) * p.page_size + slot) * p.dst_scale_cols + b)) = scale;
}

__global__ void gather_rows_kernel(const void* pool, int dtype, int64_t page_stride, int row_stride, int page_size,
                                   int dim, const int64_t* row_token, void* dst, int dst_dtype, GatherScales sc) {
    const int row = blockIdx.x;
    const int64_t tok = row_token[row];
    const int64_t page = tok / page_size, slot = tok % page_size;
    const int64_t base = page * page_stride + slot * row_stride;
    if (dtype == GQLA_DTYPE_FP8_E4M3) {  // widened with the scale of each element's block
        const unsigned char* bytes = static_cast<const unsigned char*>(pool);
        const float* scales = reinterpret_cast<const float*>(bytes + page * page_stride + sc.offset) + slot * sc.cols;
        for (int c = threadIdx.x; c < dim; c += blockDim.x) {
            const uint32_t h = e4m3x2_to_f16x2(bytes[base + c]);
            const float v = __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xffffu)));
            store_elem(dst, dst_dtype, static_cast<int64_t>(row) * dim + c, v * scales[c / sc.block]);
        }
        return;
    }
    for (int c = threadIdx.x; c < dim; c += blockDim.x)
        store_elem(dst, dst_dtype, static_cast<int64_t>(row) * dim + c, load_elem(pool, dtype, base + c));
}

__global__ void sequence_tokens_kernel(const __grid_constant__ SequenceTokensParams p) {
    const int i = blockIdx.x;
    const int32_t* table = p.page_tables + p.slot[i] * p.table_stride;
    int64_t* out = p.tokens + p.out_row[i];
    for (int r = threadIdx.x; r < p.rows[i]; r += blockDim.x) {
        const int64_t pos = p.start[i] + r;
        out[r] = static_cast<int64_t>(table[pos / p.page_size]) * p.page_size + pos % p.page_size;
    }
}

__global__ void copy_pages_kernel(const __grid_constant__ CopyPagesParams p) {
    const int i = blockIdx.x, layer = blockIdx.y;
    unsigned char* base = p.pool + layer * p.layer_bytes;
    const unsigned char* src = base + p.src[i] * p.page_bytes;
    unsigned char* dst = base + p.dst[i] * p.page_bytes;
    if (p.page_bytes % 16 == 0) {
        for (int64_t o = threadIdx.x * 16; o < p.page_bytes; o += blockDim.x * 16)
            *reinterpret_cast<int4*>(dst + o) = *reinterpret_cast<const int4*>(src + o);
    } else {
        for (int64_t o = threadIdx.x; o < p.page_bytes; o += blockDim.x) dst[o] = src[o];
    }
}

__global__ void table_update_kernel(const __grid_constant__ TableUpdateParams p) {
    for (int i = threadIdx.x; i < p.page_count; i += blockDim.x)
        p.page_tables[p.slot * p.table_stride + p.page_begin + i] = p.pages[i];
    for (int i = threadIdx.x; i < p.layer_count; i += blockDim.x)
        p.lengths[static_cast<int64_t>(p.layer_begin + i) * p.max_sequences + p.slot] = p.layer_lengths[i];
}

__global__ void convert_2d_kernel(const void* src, int dtype, int64_t rows, int64_t cols, int64_t row_stride, void* dst,
                                  int dst_dtype) {
    const int64_t n = rows * cols;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        store_elem(dst, dst_dtype, i, load_elem(src, dtype, r * row_stride + c));
    }
}

}  // namespace

void launch_scatter_rows(const ScatterParams& p, cudaStream_t stream) {
    if (p.rows == 0) return;
    if (p.dst_dtype == GQLA_DTYPE_FP8_E4M3) {
        constexpr int kWarps = 4;
        const int64_t items = int64_t(p.rows) * p.groups * p.dst_scale_cols;
        scatter_rows_fp8_kernel<<<static_cast<unsigned>((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(p);
        check_launch("scatter_rows_fp8_kernel");
        return;
    }
    // Same dtype on both sides: a plain byte copy of each row.
    const int64_t es = static_cast<int64_t>(dtype_size(static_cast<gqla_dtype>(p.src_dtype)));
    const auto aligned = [](int64_t bytes) { return bytes % 16 == 0; };
    if (es > 0 && p.src_dtype == p.dst_dtype && aligned(p.dim * es) && aligned(reinterpret_cast<uintptr_t>(p.src)) &&
        aligned(reinterpret_cast<uintptr_t>(p.dst)) && aligned(p.src_row_stride * es) &&
        aligned(p.src_group_stride * es) && aligned(p.dst_page_stride * es) && aligned(p.dst_group_stride * es) &&
        aligned(p.dst_row_stride * es)) {
        const int vecs_per_row = static_cast<int>(p.dim * es / 16);
        const int64_t total = int64_t(p.rows) * p.groups * vecs_per_row;
        const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 8192));
        scatter_rows_vec16_kernel<<<blocks, 256, 0, stream>>>(p, static_cast<int>(es), vecs_per_row);
        check_launch("scatter_rows_vec16_kernel");
        return;
    }
    scatter_rows_kernel<<<p.rows * p.groups, 128, 0, stream>>>(p);
    check_launch("scatter_rows_kernel");
}

void launch_gather_rows(const void* pool, int32_t dtype, int64_t page_stride, int32_t row_stride, int32_t page_size,
                        int32_t dim, const int64_t* row_token, int32_t rows, void* dst, int32_t dst_dtype,
                        const GatherScales& scales, cudaStream_t stream) {
    if (rows == 0) return;
    gather_rows_kernel<<<rows, 128, 0, stream>>>(pool, dtype, page_stride, row_stride, page_size, dim, row_token, dst,
                                                 dst_dtype, scales);
    check_launch("gather_rows_kernel");
}

void launch_sequence_tokens(const SequenceTokensParams& p, cudaStream_t stream) {
    if (p.count == 0) return;
    sequence_tokens_kernel<<<p.count, 256, 0, stream>>>(p);
    check_launch("sequence_tokens_kernel");
}

void launch_copy_pages(const CopyPagesParams& p, cudaStream_t stream) {
    if (p.count == 0 || p.layers == 0) return;
    copy_pages_kernel<<<dim3(p.count, p.layers), 256, 0, stream>>>(p);
    check_launch("copy_pages_kernel");
}

void launch_table_update(const TableUpdateParams& p, cudaStream_t stream) {
    table_update_kernel<<<1, 256, 0, stream>>>(p);
    check_launch("table_update_kernel");
}

void launch_convert_2d(const void* src, int32_t dtype, int64_t rows, int64_t cols, int64_t row_stride, void* dst,
                       int32_t dst_dtype, cudaStream_t stream) {
    int64_t n = rows * cols;
    if (n == 0) return;
    int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
    convert_2d_kernel<<<blocks, 256, 0, stream>>>(src, dtype, rows, cols, row_stride, dst, dst_dtype);
    check_launch("convert_2d_kernel");
}

}  // namespace gqla::cuda

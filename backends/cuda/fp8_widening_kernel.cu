// SPDX-License-Identifier: Apache-2.0
// The widening pass of fp8_widening.hpp: 8-bit pages -> bf16 pages.
#include <cuda_bf16.h>

#include "attention_common.cuh"
#include "cuda_status.hpp"
#include "fp8_e4m3.cuh"
#include "fp8_widening.hpp"

namespace gqla::cuda {

namespace {

// Rows [0, rows) of every group of page src_page of pool pv -> page
// dst_page of the bf16 pool dst ([page][G][P][pv.dim]), 8 elements per
// thread and step: consecutive threads take consecutive pieces of a row,
// so both the byte reads and the bf16 writes coalesce.
__device__ __forceinline__ void widen_page_rows(const PoolView& pv, __nv_bfloat16* dst, int64_t src_page,
                                                int64_t dst_page, int rows, int groups, int page_size) {
    const unsigned char* base = static_cast<const unsigned char*>(pv.base);
    const int pieces = pv.dim / 8;
    const int total = groups * rows * pieces;
    for (int i = static_cast<int>(threadIdx.x); i < total; i += static_cast<int>(blockDim.x)) {
        const int piece = i % pieces, row = i / pieces;
        const int g = row / rows, slot = row % rows;
        const float scale = *reinterpret_cast<const float*>(base + pool_scale_offset(pv, src_page, g, page_size, slot));
        const uint2 bytes = *reinterpret_cast<const uint2*>(base + src_page * pv.page_stride + g * pv.group_stride +
                                                            int64_t(slot) * pv.row_stride + piece * 8);
        const int64_t out = ((dst_page * groups + g) * page_size + slot) * pv.dim + piece * 8;
        *reinterpret_cast<uint4*>(dst + out) = widen8_e4m3_scaled(bytes, scale);
    }
}

// Block (page k, sequence b of the launch).
__global__ void widen_fp8_pages_kernel(const Fp8WideningParams p) {
    const int b = static_cast<int>(blockIdx.y), k = static_cast<int>(blockIdx.x);
    const int length = p.length[b];
    const int64_t first_token = static_cast<int64_t>(k) * p.page_size;
    if (first_token >= length) return;
    const int64_t src_page = p.page_tables[p.slot[b] * p.table_stride + k];
    const int64_t dst_page = p.first_page[b] + k;
    if (threadIdx.x == 0) {
        p.wide_table[(p.first + b) * p.wide_table_stride + k] = static_cast<int32_t>(dst_page);
        if (k == 0) p.wide_lengths[p.first + b] = length;
    }
    const int rows = static_cast<int>(min(static_cast<int64_t>(p.page_size), length - first_token));
    widen_page_rows(p.k, static_cast<__nv_bfloat16*>(p.wide_k), src_page, dst_page, rows, p.groups, p.page_size);
    widen_page_rows(p.v, static_cast<__nv_bfloat16*>(p.wide_v), src_page, dst_page, rows, p.groups, p.page_size);
}

}  // namespace

void launch_widen_fp8_pages(const Fp8WideningParams& p, int32_t most_pages, cudaStream_t stream) {
    if (p.count == 0 || most_pages == 0) return;
    widen_fp8_pages_kernel<<<dim3(static_cast<unsigned>(most_pages), static_cast<unsigned>(p.count)), 256, 0, stream>>>(
        p);
    check_launch("widen_fp8_pages_kernel");
}

}  // namespace gqla::cuda

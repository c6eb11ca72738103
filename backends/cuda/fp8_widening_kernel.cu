// SPDX-License-Identifier: Apache-2.0
// The widening pass of fp8_widening.hpp: 8-bit pages -> bf16 pages.
#include <cuda_bf16.h>

#include <algorithm>

#include "attention_common.cuh"
#include "cuda_status.hpp"
#include "fp8_e4m3.cuh"
#include "fp8_widening.hpp"

namespace gqla::cuda {

namespace {

// One thread per 16 stored bytes of a row, no loops: block x = (page k of
// the sequence, piece block), y = sequence b of the launch, z = pool (keys,
// values). Each thread loads its 16 bytes and its row's scale and stores 16
// bf16, so a whole wave's loads are in flight at once (one block per page,
// looping over its rows, left most of the bandwidth idle at batch 1).
// Consecutive threads take consecutive pieces of a row, so both the byte
// reads and the bf16 writes coalesce.
__global__ void widen_fp8_pages_kernel(const Fp8WideningParams p, int piece_blocks) {
    const int b = static_cast<int>(blockIdx.y);
    const bool values = blockIdx.z != 0;
    const int k = static_cast<int>(blockIdx.x) / piece_blocks;
    const int length = p.length[b];
    const int64_t first_token = static_cast<int64_t>(k) * p.page_size;
    if (first_token >= length) return;
    const int64_t src_page = p.page_tables[p.slot[b] * p.table_stride + k];
    const int64_t dst_page = p.first_page[b] + k;
    const int piece_index =
        (static_cast<int>(blockIdx.x) % piece_blocks) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
    if (piece_index == 0 && !values) {
        p.wide_table[(p.first + b) * p.wide_table_stride + k] = static_cast<int32_t>(dst_page);
        if (k == 0) p.wide_lengths[p.first + b] = length;
    }
    const PoolView& pv = values ? p.v : p.k;
    const int pieces = pv.dim / 16;  // per row; the prefill kernel takes 8-bit pools 128 wide only
    const int row = piece_index / pieces, piece = piece_index % pieces;
    const int g = row / p.page_size, slot = row % p.page_size;
    if (g >= p.groups || first_token + slot >= length) return;
    const unsigned char* base = static_cast<const unsigned char*>(pv.base);
    const float scale = *reinterpret_cast<const float*>(base + pool_scale_offset(pv, src_page, g, p.page_size, slot));
    const uint4 bytes = *reinterpret_cast<const uint4*>(base + src_page * pv.page_stride + g * pv.group_stride +
                                                        int64_t(slot) * pv.row_stride + piece * 16);
    uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(values ? p.wide_v : p.wide_k) +
                                          ((dst_page * p.groups + g) * p.page_size + slot) * pv.dim + piece * 16);
    dst[0] = widen8_e4m3_scaled(make_uint2(bytes.x, bytes.y), scale);
    dst[1] = widen8_e4m3_scaled(make_uint2(bytes.z, bytes.w), scale);
}

}  // namespace

void launch_widen_fp8_pages(const Fp8WideningParams& p, int32_t most_pages, cudaStream_t stream) {
    if (p.count == 0 || most_pages == 0) return;
    constexpr int kThreads = 256;
    const int64_t pieces = static_cast<int64_t>(p.groups) * p.page_size * (std::max(p.k.dim, p.v.dim) / 16);
    const int piece_blocks = static_cast<int>((pieces + kThreads - 1) / kThreads);
    const dim3 grid(static_cast<unsigned>(static_cast<int64_t>(most_pages) * piece_blocks),
                    static_cast<unsigned>(p.count), 2);
    widen_fp8_pages_kernel<<<grid, kThreads, 0, stream>>>(p, piece_blocks);
    check_launch("widen_fp8_pages_kernel");
}

}  // namespace gqla::cuda

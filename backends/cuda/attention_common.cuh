// SPDX-License-Identifier: Apache-2.0
// Pieces shared by the tensor-core and the SIMT decode kernels: which tokens
// a split owns, where a query/output row lives, the page lookup, and how a
// finished row (output + log-sum-exp) is written, and the programmatic
// dependent launch hand-off to the combine pass.
#pragma once

#include <cstdint>

#include "attention_params.hpp"
#include "device_dtype.cuh"

namespace gqla::cuda {

constexpr float kLn2 = 0.6931471805599453f;

// 2^x for softmax weights and rescale factors: one special-function
// instruction with subnormal results flushed to zero. exp2f keeps subnormals
// at the cost of a range test and two multiplies around the same
// instruction; a weight below 2^-126 of its row's maximum changes the row's
// sum (>= 1) by less than that, far inside every tolerance. exp2(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Programmatic dependent launch (compute capability 9.0+; no-ops before).
// An attention kernel signals early that the dependent grid (the combine
// pass) may be scheduled; the dependent waits, before its first read, until
// the attention grid has completed and its writes are visible.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Query token and head of row mg of group g's rows (heads x s_q, head fastest).
struct QueryHead {
    int qi, h;
};
__device__ __forceinline__ QueryHead query_head(const AttentionParams& p, int g, int mg) {
    const int qi = mg / p.heads_per_group;
    return {qi, g * p.heads_per_group + (mg - qi * p.heads_per_group)};
}

// Launch sequence b, query qi -> the call's sequence and query (see
// RowAddress::fold; sparse launches only).
__device__ __forceinline__ void unfold_query(int fold, int& b, int& qi) {
    if (fold > 1) {
        qi += b % fold;
        b /= fold;
    }
}

__device__ __forceinline__ int64_t row_offset(const RowAddress& a, int b, int qi, int h) {
    unfold_query(a.fold, b, qi);
    return b * a.sB + qi * a.sQ + (h / a.nrep) * a.sG + (h % a.nrep) * a.sHi;
}

// Tiles [begin, end) of `tile` tokens owned by `split`; the per-split chunk is
// derived from the device-side length, so a graph replay after more appends
// covers the new tokens.
// Where a tile's rows are read from: the key pools [k1 | k2] and the value
// pool of one group, and their widths (the per-warp and mma.sync kernels).
template <typename T>
struct KvRowSources {
    const T* k1;
    const T* k2;
    const T* v;
    int dk1, dk2, dv;
};

struct SplitRange {
    int begin, end;
};
__device__ __forceinline__ SplitRange split_tiles(int length, int tile, int split, int num_splits) {
    int tiles = (length + tile - 1) / tile;
    int per = (tiles + num_splits - 1) / num_splits;
    int begin = split * per;
    int end = min(tiles, begin + per);
    return {begin, max(begin, end)};
}

// The work of one CTA of a decode launch: grid.x = groups x row blocks of
// `rows_per_cta` rows, grid.y = the launch's sequences, grid.z = splits of
// their tokens into tiles of `tile`.
struct CtaWork {
    int rb, g;  // row block within the group, group
    int b;      // sequence index in the decode call
    int split;
    int length;            // tokens of the sequence in this layer
    const int32_t* table;  // its page table
    const int64_t* list;   // sparse launches: its tokens (page << 32 | slot); null: the table's
    SplitRange range;      // tiles this split owns
};
// Also lets the combine pass be scheduled (every attention kernel starts here).
__device__ __forceinline__ CtaWork cta_work(const AttentionParams& p, int rows_per_cta, int tile) {
    allow_dependent_launch();
    CtaWork w;
    const int row_blocks = (p.rows + rows_per_cta - 1) / rows_per_cta;
    w.rb = blockIdx.x % row_blocks;
    w.g = blockIdx.x / row_blocks;
    const int bl = blockIdx.y, seq_slot = p.slots[bl];
    w.b = p.batch_offset + bl;
    w.split = blockIdx.z;
    w.table = p.page_tables + seq_slot * p.table_stride;
    if (p.sparse_tokens) {  // one query row of a sparse call: its visible entries
        w.length = __ldg(p.sparse_counts + w.b);
        w.list = p.sparse_tokens + w.b * p.sparse_stride;
    } else {
        w.length = __ldg(p.lengths + seq_slot);
        w.list = nullptr;
    }
    w.range = split_tiles(w.length, tile, w.split, p.num_splits);
    return w;
}

// Element offset of token j's row in a pool (page from the device table).
__device__ __forceinline__ int64_t token_base(const int32_t* table, int j, int page_size, int page_shift) {
    int page_idx, slot;
    if (page_shift >= 0) {
        page_idx = j >> page_shift;
        slot = j & (page_size - 1);
    } else {
        page_idx = j / page_size;
        slot = j - page_idx * page_size;
    }
    return (static_cast<int64_t>(__ldg(table + page_idx)) << 32) | static_cast<uint32_t>(slot);
}
// Token j of a CTA's sequence (page << 32 | slot): the j-th position of its
// page table, or for a sparse launch the j-th visible entry of its list.
__device__ __forceinline__ int64_t cta_token(const AttentionParams& p, const CtaWork& w, int j) {
    return w.list ? __ldg(w.list + j) : token_base(w.table, j, p.page_size, p.page_shift);
}
// 8-bit pools: byte offset of the f32 scale of (page, group g, slot).
__device__ __forceinline__ int64_t pool_scale_offset(const PoolView& pv, int64_t page, int g, int page_size,
                                                     int64_t slot) {
    return page * pv.page_stride + pv.scale_offset + 4 * (int64_t(g) * page_size + slot);
}
__device__ __forceinline__ int64_t pool_offset(const PoolView& pv, int64_t tb, int g) {
    int64_t page = tb >> 32;
    int slot = static_cast<int>(tb & 0xffffffff);
    return page * pv.page_stride + g * pv.group_stride + static_cast<int64_t>(slot) * pv.row_stride;
}

// Row (split, b, qi, h) of the partial buffers the combine kernel merges
// (part_o has p.v.dim floats a row, part_lse2 one).
__device__ __forceinline__ int64_t partial_row(const AttentionParams& p, int split, int b, int qi, int h) {
    return ((static_cast<int64_t>(split) * p.part_batch + b) * p.q_len + qi) * p.num_heads + h;
}

// Writes one output element of row (b, qi, h): straight to o when the launch
// has one split, else to the partial buffer the combine kernel merges.
__device__ __forceinline__ void write_output(const AttentionParams& p, int split, int b, int qi, int h, int c,
                                             float v) {
    if (p.num_splits == 1)
        store_elem(p.o, p.o_dtype, row_offset(p.oa, b, qi, h) + c, v);
    else
        p.part_o[partial_row(p, split, b, qi, h) * p.v.dim + c] = v;
}

// Element of the caller's lse for row (b, qi, h).
__device__ __forceinline__ int64_t lse_index(const AttentionParams& p, int b, int qi, int h) {
    unfold_query(p.oa.fold, b, qi);
    return b * p.lse_sB + qi * p.lse_sQ + h * p.lse_sH;
}

// m: running max of scaled scores in log2 units, l: sum of exp2(s - m);
// -inf where the row saw no token (l == 0), NaN where a score was.
__device__ __forceinline__ void write_row_lse(const AttentionParams& p, int split, int b, int qi, int h, float m,
                                              float l) {
    float lse2 = (l == 0.f) ? -INFINITY : m + log2f(l);
    if (p.num_splits == 1) {
        if (p.lse) p.lse[lse_index(p, b, qi, h)] = lse2 * kLn2;
    } else {
        p.part_lse2[partial_row(p, split, b, qi, h)] = lse2;
    }
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// Parameters of one decode-attention launch, passed by value so that a launch
// captured in a CUDA graph carries everything it needs except the device-side
// sequence tables, which it reads at replay time (new lengths, new pages).
//
// One description serves every path:
//   GQA kind      key = K            value = V           group = KV head
//   GQLA GQA path key = [KC | KR]    value = VE          group = latent group
//   GQLA absorb   key = [C | KR]     value = C (aliased) group = all H heads
// Query/output rows are addressed as
//   base + b*sB + qi*sQ + (h / nrep)*sG + (h % nrep)*sHi
// so that the user's tensors and the absorb workspaces (grouped for cuBLAS)
// share one kernel.
#pragma once

#include <cstdint>

namespace gqla::cuda {

constexpr int kMaxLaunchBatch = 256;

// log2(page_size) when it is a power of two (the kernels then shift and mask
// instead of dividing), else -1.
inline int page_shift_of(int page_size) {
    for (int sh = 0; sh < 31; ++sh)
        if ((1 << sh) == page_size) return sh;
    return -1;
}  // sequences per launch; larger batches are chunked

struct RowAddress {
    int64_t sB, sQ, sG, sHi;
    int32_t nrep;  // heads per addressing group
    // Sparse launches run each query row as a launch sequence of one query:
    // launch sequence b is query b % fold of the call's sequence b / fold.
    // 0 or 1: launch sequences are the call's sequences.
    int32_t fold;
};

struct PoolView {
    const void* base;      // this layer's pool
    int64_t page_stride;   // elements between pages
    int64_t group_stride;  // elements between groups inside a page (0: shared by groups)
    int32_t row_stride;    // elements between token slots
    int32_t dim;           // elements used per token
    // 8-bit pools: bytes from a page's start to its f32 scales, one per
    // (group, slot) at 4 * (g * page_size + slot) (docs/fp8-cache.md); 0 otherwise.
    int64_t scale_offset;
};

struct AttentionParams {
    PoolView k1, k2, v;    // k2.dim == 0 when absent
    int32_t v_aliases_k1;  // absorb: the value is the first v.dim columns of k1
    int32_t cache_dtype;   // gqla_dtype of the pools

    int32_t page_size;
    int32_t page_shift;          // log2(page_size) when a power of two, else -1
    const int32_t* page_tables;  // [max_sequences][table_stride]
    int64_t table_stride;
    const int32_t* lengths;  // [max_sequences] of this layer

    int32_t q_len;            // s_q
    int32_t heads_per_group;  // attention rows per query token per group
    int32_t num_heads;        // H
    int32_t rows;             // q_len * heads_per_group (rows per group)

    const void* q;
    int32_t q_dtype;
    RowAddress qa;
    // Absorb path, latent kernel only: the rope part of each query row read
    // from here (the caller's q, in the cache's 16-bit dtype, rows 16-byte
    // aligned) instead of the columns past the latent in q. Null: q holds
    // whole rows.
    const void* q_rope;
    RowAddress q_rope_a;
    void* o;
    int32_t o_dtype;
    RowAddress oa;
    float* lse;
    int64_t lse_sB, lse_sQ, lse_sH;

    // Split-KV: each split writes normalized partial outputs + log2-sum-exp;
    // the combine kernel merges them. num_splits == 1 (or cluster_merge)
    // writes o/lse directly.
    int32_t num_splits;
    float* part_o;       // [split][b][qi][h][dv]
    float* part_lse2;    // [split][b][qi][h]
    int32_t part_batch;  // b extent of the partial buffers
    // 1: the splits of a row block are the CTAs of one thread-block cluster
    // (grid.z = cluster.z = num_splits) and merge in distributed shared
    // memory, writing o/lse directly (narrow and latent kernels; no combine
    // pass, no partial rows).
    int32_t cluster_merge;

    // Sparse (top-k) launches (docs/sparse-attention.md): launch sequence b
    // is one query row; its tokens are the sparse_counts[b] entries at
    // sparse_tokens + b * sparse_stride (page << 32 | slot, the visible
    // positions of its list in list order) instead of the page table's first
    // `length` positions. q_len is 1 and qa/oa/q_rope_a carry the fold.
    // Null: dense.
    const int64_t* sparse_tokens;
    const int32_t* sparse_counts;
    int64_t sparse_stride;

    float scale_log2;      // softmax scale * log2(e)
    int32_t batch;         // sequences in this launch
    int32_t batch_offset;  // index of the first one in the decode call
    int32_t slots[kMaxLaunchBatch];
};

struct CombineParams {
    int32_t batch, batch_offset, q_len, num_heads, dv, num_splits, part_batch;
    const float* part_o;
    const float* part_lse2;
    void* o;
    int32_t o_dtype;
    RowAddress oa;
    float* lse;
    int64_t lse_sB, lse_sQ, lse_sH;
};

}  // namespace gqla::cuda

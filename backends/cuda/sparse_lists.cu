// SPDX-License-Identifier: Apache-2.0
// See sparse_lists.hpp. One CTA per query row takes its list in chunks of
// 2048 entries, eight consecutive entries per thread: each thread loads its
// eight positions and then their page-table entries with all loads of a step
// in flight at once, and a block-wide scan of the threads' visible counts
// gives each kept entry its place (entries before it in the list that are
// kept), so the order of the list survives. (One warp per row walking 32
// entries at a time made every step two dependent memory round trips: at
// K = 2048 that pass took about as long as the attention itself.) The page
// lookup of each kept position happens here once, not in every CTA that
// reads the token (the GQA path reads a token once per group).
#include "sparse_lists.hpp"

#include <algorithm>

#include "attention_common.cuh"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = 8;  // consecutive list entries of one thread
constexpr int kChunk = kThreads * kPerThread;

struct SparseListParams {
    const int32_t* indices;  // [rows][row_stride], rows b * q_len + qi
    int64_t row_stride;
    int32_t topk;
    int32_t q_len;
    int32_t batch;  // sequences in this launch
    int32_t first;  // index of the first one in the call
    const int32_t* lengths;
    const int32_t* page_tables;
    int64_t table_stride;
    int32_t page_size, page_shift;
    int64_t* tokens;  // [rows][topk]
    int32_t* counts;  // [rows]
    int32_t slots[kMaxLaunchBatch];
};

// Exclusive prefix of `count` over the block's threads (in thread order)
// and the block's total; `warp_totals` is shared scratch of kWarps ints.
__device__ __forceinline__ int block_exclusive_scan(int count, int* warp_totals, int& total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int inclusive = count;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inclusive, off);
        if (lane >= off) inclusive += n;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    int before = 0;
    total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
        const int c = warp_totals[w];
        before += w < warp ? c : 0;
        total += c;
    }
    __syncthreads();  // warp_totals is rewritten by the next chunk
    return before + inclusive - count;
}

__global__ void __launch_bounds__(kThreads) compact_sparse_lists_kernel(const __grid_constant__ SparseListParams p) {
    __shared__ int warp_totals[kWarps];
    const int64_t local = blockIdx.x;
    if (local >= static_cast<int64_t>(p.batch) * p.q_len) return;  // whole CTA: before any barrier
    const int bl = static_cast<int>(local / p.q_len), qi = static_cast<int>(local - int64_t(bl) * p.q_len);
    const int slot = p.slots[bl];
    const int64_t row = static_cast<int64_t>(p.first) * p.q_len + local;
    const int32_t* list = p.indices + row * p.row_stride;
    const int32_t* table = p.page_tables + slot * p.table_stride;
    // The last position this query may see (<= length - 1).
    const int limit = __ldg(p.lengths + slot) - p.q_len + qi;
    int64_t* out = p.tokens + row * p.topk;
    int kept = 0;
    for (int k0 = 0; k0 < p.topk; k0 += kChunk) {
        const int first = k0 + static_cast<int>(threadIdx.x) * kPerThread;
        int j[kPerThread];
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) j[e] = first + e < p.topk ? __ldg(list + first + e) : -1;
        int mine = 0;
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) {
            if (j[e] < 0 || j[e] > limit) j[e] = -1;
            mine += j[e] >= 0;
        }
        int64_t tb[kPerThread];
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) tb[e] = j[e] >= 0 ? token_base(table, j[e], p.page_size, p.page_shift) : 0;
        int total;
        int at = kept + block_exclusive_scan(mine, warp_totals, total);
#pragma unroll
        for (int e = 0; e < kPerThread; ++e)
            if (j[e] >= 0) out[at++] = tb[e];
        kept += total;
    }
    if (threadIdx.x == 0) p.counts[row] = kept;
}

// Entry e of row e / topk of the compacted lists as a pool row index (page *
// page_size + slot); an entry past the row's count repeats the row's first
// token, and a row with none names pool row 0, so every index is a real row
// whose expansion is the same bytes whoever writes it.
__global__ void listed_pool_rows_kernel(const int64_t* tokens, const int32_t* counts, int32_t topk, int64_t entries,
                                        int32_t page_size, int64_t* out) {
    const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= entries) return;
    const int64_t row = e / topk;
    const int k = static_cast<int>(e - row * topk), c = __ldg(counts + row);
    const int64_t t = c == 0 ? 0 : __ldg(tokens + row * topk + (k < c ? k : 0));
    out[e] = (t >> 32) * page_size + (t & 0xffffffff);
}

}  // namespace

void write_listed_pool_rows(Session& s, int64_t rows, int32_t topk, int64_t* out) {
    const int64_t entries = rows * topk;
    if (entries == 0) return;
    const unsigned blocks = static_cast<unsigned>((entries + kThreads - 1) / kThreads);
    listed_pool_rows_kernel<<<blocks, kThreads, 0, s.stream>>>(
        s.sparse_tokens.get<int64_t>(), s.sparse_counts.get<int32_t>(), topk, entries, s.desc.page_size, out);
    check_cuda(cudaGetLastError(), "launch listed_pool_rows_kernel");
}

void compact_sparse_lists(Session& s, const gqla_decode_args& a) {
    SparseListParams p{};
    p.indices = static_cast<const int32_t*>(a.indices.data);
    p.row_stride = a.indices.strides[0];
    p.topk = a.topk;
    p.q_len = a.q_len;
    p.lengths = s.lengths.get<int32_t>() + static_cast<int64_t>(a.layer) * s.desc.max_sequences;
    p.page_tables = s.page_tables.get<int32_t>();
    p.table_stride = s.table_stride;
    p.page_size = s.desc.page_size;
    p.page_shift = page_shift_of(s.desc.page_size);
    p.tokens = s.sparse_tokens.get<int64_t>();
    p.counts = s.sparse_counts.get<int32_t>();
    for (int first = 0; first < a.batch; first += kMaxLaunchBatch) {
        p.batch = std::min(kMaxLaunchBatch, a.batch - first);
        p.first = first;
        for (int i = 0; i < p.batch; ++i) p.slots[i] = a.seqs[first + i].slot;
        const unsigned blocks = static_cast<unsigned>(static_cast<int64_t>(p.batch) * a.q_len);
        compact_sparse_lists_kernel<<<blocks, kThreads, 0, s.stream>>>(p);
        check_cuda(cudaGetLastError(), "launch compact_sparse_lists_kernel");
    }
}

}  // namespace gqla::cuda

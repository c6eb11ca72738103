// SPDX-License-Identifier: Apache-2.0
// See sparse_lists.hpp. One warp per query row walks its list 32 entries at
// a time; a ballot over the lanes' "visible" bits gives each kept entry its
// place (entries before it in the list that are kept), so the order of the
// list survives and no shared memory or second pass is needed. The page
// lookup of each kept position happens here once, not in every CTA that
// reads the token (the GQA path reads a token once per group).
#include "sparse_lists.hpp"

#include <algorithm>

#include "attention_common.cuh"
#include "cuda_status.hpp"

namespace gqla::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;

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

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    compact_sparse_lists_kernel(const __grid_constant__ SparseListParams p) {
    const int lane = threadIdx.x & 31;
    const int64_t local = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    if (local >= static_cast<int64_t>(p.batch) * p.q_len) return;
    const int bl = static_cast<int>(local / p.q_len), qi = static_cast<int>(local - int64_t(bl) * p.q_len);
    const int slot = p.slots[bl];
    const int64_t row = static_cast<int64_t>(p.first) * p.q_len + local;
    const int32_t* list = p.indices + row * p.row_stride;
    const int32_t* table = p.page_tables + slot * p.table_stride;
    // The last position this query may see (<= length - 1).
    const int limit = __ldg(p.lengths + slot) - p.q_len + qi;
    int64_t* out = p.tokens + row * p.topk;
    const unsigned below = (1u << lane) - 1u;
    int kept = 0;
    for (int k0 = 0; k0 < p.topk; k0 += 32) {
        const int k = k0 + lane;
        const int j = k < p.topk ? __ldg(list + k) : -1;
        const bool visible = j >= 0 && j <= limit;
        const unsigned ballot = __ballot_sync(0xffffffffu, visible);
        if (visible) out[kept + __popc(ballot & below)] = token_base(table, j, p.page_size, p.page_shift);
        kept += __popc(ballot);
    }
    if (lane == 0) p.counts[row] = kept;
}

}  // namespace

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
        const int64_t warps = static_cast<int64_t>(p.batch) * a.q_len;
        const unsigned blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
        compact_sparse_lists_kernel<<<blocks, kWarpsPerBlock * 32, 0, s.stream>>>(p);
        check_cuda(cudaGetLastError(), "launch compact_sparse_lists_kernel");
    }
}

}  // namespace gqla::cuda

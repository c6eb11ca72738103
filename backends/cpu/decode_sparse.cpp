// SPDX-License-Identifier: Apache-2.0
// Sparse attention: entry point and what both forms share (see
// decode_sparse.hpp).
#include "backends/cpu/decode_sparse.hpp"

#include <algorithm>

namespace gqla::cpu {

namespace sparse {

void fill_queries(const gqla_decode_args* a, Query* q) {
    const CallRows rows{a};
    const int32_t* base = static_cast<const int32_t*>(a->indices.data);
    const int64_t ld = a->indices.strides[0];
    for (int32_t b = 0; b < a->batch; ++b) {
        const int32_t n = rows.q_len(b);
        const int64_t first = a->ragged ? a->seqs[b].q_row : int64_t(b) * n;
        for (int32_t k = 0; k < n; ++k) q[first + k] = Query{b, k, rows.limit(b, k), base + (first + k) * ld};
    }
}

int plan_pieces(int64_t queries, int32_t topk, int threads) {
    // Enough items for every thread to get a few (dynamic scheduling evens
    // out lists of different visible counts), never pieces under kMinPiece.
    const int64_t want = int64_t(threads) * 4;
    if (threads < 2 || queries >= want) return 1;
    const int64_t by_threads = (want + queries - 1) / queries;
    const int64_t by_length = std::max<int64_t>(1, topk / kMinPiece);
    return static_cast<int>(std::min<int64_t>({by_threads, by_length, kMaxPieces}));
}

int next_visible(const int32_t* list, int64_t* i, int64_t end, int64_t limit, int32_t* out) {
    int n = 0;
    int64_t at = *i;
    // One comparison per entry: -1, negatives and positions past the limit
    // (invisible or past the sequence) all fail the unsigned test.
    const uint64_t bound = static_cast<uint64_t>(limit);
    for (; at < end && n < kBlock; ++at) {
        const int32_t j = list[at];
        out[n] = j;
        n += static_cast<uint64_t>(static_cast<int64_t>(j)) <= bound ? 1 : 0;
    }
    *i = at;
    return n;
}

void locate(const int32_t* page_table, int64_t page_size, const int32_t* pos, int n, Located* out) {
    out->n = n;
    for (int t = 0; t < n; ++t) {
        out->page[t] = page_table[pos[t] / page_size];
        out->slot[t] = pos[t] % page_size;
    }
}

Buffers& buffers() {
    thread_local Buffers b;
    return b;
}

bool reserve(AlignedBuffer& b, size_t bytes) {
    if (b.size() >= bytes) return true;
    AlignedBuffer fresh;
    if (!fresh.allocate(bytes)) return false;
    b = std::move(fresh);
    return true;
}

}  // namespace sparse

gqla_status decode_sparse(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const int dt = d.cache_dtype;
    if (dt != GQLA_DTYPE_F32 && dt != GQLA_DTYPE_F16 && dt != GQLA_DTYPE_BF16 && dt != GQLA_DTYPE_FP8_E4M3)
        return fail(ctx, GQLA_ERR_UNSUPPORTED, "decode: sparse attention needs an f32, f16, bf16 or fp8_e4m3 cache");
    if (a->indices.on_device || a->indices.dtype != GQLA_DTYPE_I32 || a->topk < 1)
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "decode: indices must be a host I32 [total_q, topk] view");
    if (d.kind == GQLA_KIND_GQA) return sparse_gqa_form(ctx, a);
    const bool reads_latent = a->path == GQLA_PATH_ABSORB || a->transient;
    if (reads_latent && !d.keep_latent)
        return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: the absorb and transient forms read the latent, not kept");
    if (reads_latent && !ctx->weights[static_cast<size_t>(a->layer)].set())
        return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: weights of layer %d are not set", a->layer);
    if (a->path == GQLA_PATH_ABSORB) return sparse_absorb(ctx, a);
    if (!a->transient && !ctx->expanded_on)
        return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: GQA path requested but the expanded cache is off");
    return sparse_gqa_form(ctx, a);
}

}  // namespace gqla::cpu

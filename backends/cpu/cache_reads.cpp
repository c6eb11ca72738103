// SPDX-License-Identifier: Apache-2.0
// Reading cached rows back out (sequence export): the inverse of the kept
// cache's writes in cache_writes.cpp, byte for byte in the cache dtype.
#include <cstring>

#include "backends/cpu/backend_ops.hpp"

namespace gqla::cpu {

gqla_status read_rows(CpuContext* ctx, const gqla_read_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    if (ctx->fp8())  // the core refuses first (docs/fp8-cache.md); kept as a guard
        return fail(ctx, GQLA_ERR_UNSUPPORTED, "read_rows: an fp8_e4m3 cache has per-row scales the rows do not carry");
    const int64_t P = d.page_size;
    const size_t es = ctx->elem_size;
    const char* A = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    const char* B = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], a->layer));
    char* out_a = static_cast<char*>(a->a.data);
    char* out_b = static_cast<char*>(a->b.data);
    const bool gqa = d.kind == GQLA_KIND_GQA;
    // Row widths in elements: per KV head for GQA (K/V pages are [G][P][dim]),
    // whole rows for the latent (pages are [P][dim]).
    const int64_t wa = gqa ? d.head_dim : d.latent_dim;
    const int64_t wb = gqa ? d.value_dim : d.rope_dim;
    const int64_t heads = gqa ? d.num_kv_heads : 1;
    for (int64_t i = 0; i < a->count; ++i) {
        const int64_t pos = a->start + i;
        const int64_t page = a->page_table[pos / P], slot = pos % P;
        for (int64_t g = 0; g < heads; ++g) {
            const int64_t a_off = page * ctx->kept[0].page_elems + (g * P + slot) * wa;
            const int64_t b_off = page * ctx->kept[1].page_elems + (g * P + slot) * wb;
            std::memcpy(out_a + ((i * heads + g) * wa) * es, A + a_off * es, static_cast<size_t>(wa) * es);
            std::memcpy(out_b + ((i * heads + g) * wb) * es, B + b_off * es, static_cast<size_t>(wb) * es);
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Reading cached rows back out (sequence export): the inverse of the kept
// cache's writes in cache_writes.cpp, byte for byte as stored; an 8-bit
// pool's rows come with their scales.
#include <cstring>

#include "backends/cpu/backend_ops.hpp"

namespace gqla::cpu {

gqla_status read_rows(CpuContext* ctx, const gqla_read_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const int64_t P = d.page_size;
    const Pool& pa = ctx->kept[0];
    const Pool& pb = ctx->kept[1];
    const char* A = static_cast<const char*>(ctx->pool_layer(pa, a->layer));
    const char* B = static_cast<const char*>(ctx->pool_layer(pb, a->layer));
    char* out_a = static_cast<char*>(a->a.data);
    char* out_b = static_cast<char*>(a->b.data);
    float* out_a_scales = static_cast<float*>(a->a_scales.data);
    float* out_b_scales = static_cast<float*>(a->b_scales.data);
    if ((pa.scale_cols > 0 && out_a_scales == nullptr) || (pb.scale_cols > 0 && out_b_scales == nullptr))
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "read_rows: an fp8_e4m3 cache's rows need views of their scales");
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
            const int64_t row = g * P + slot, out_row = i * heads + g;
            std::memcpy(out_a + out_row * wa * pa.elem, A + (page * pa.page_elems + row * wa) * pa.elem,
                        static_cast<size_t>(wa) * pa.elem);
            std::memcpy(out_b + out_row * wb * pb.elem, B + (page * pb.page_elems + row * wb) * pb.elem,
                        static_cast<size_t>(wb) * pb.elem);
            if (pa.scale_cols > 0)
                std::memcpy(out_a_scales + out_row * pa.scale_cols, pa.scales(A, page, row), 4u * pa.scale_cols);
            if (pb.scale_cols > 0)
                std::memcpy(out_b_scales + out_row * pb.scale_cols, pb.scales(B, page, row), 4u * pb.scale_cols);
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

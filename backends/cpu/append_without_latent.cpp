// SPDX-License-Identifier: Apache-2.0
// Appending to a GQLA context created with desc.keep_latent = 0: there is no
// latent pool, so each appended latent row is expanded straight into the
// per-group KC/VE rows of this context's groups (one expansion GEMM per
// block of rows) and then dropped; the rope key goes to its pool as usual.
// The latent is rounded to the cache dtype before the GEMM, as a context
// that keeps it expands the stored row, so both hold the same expanded rows.
#include <algorithm>
#include <new>
#include <vector>

#include "backends/cpu/append_without_latent.hpp"
#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/io_rows.hpp"

namespace gqla::cpu {

namespace {

// Rows per expansion GEMM: bounds the f32 temporaries of long appends.
constexpr int64_t kRowsPerGemm = 2048;

// Where one appended row goes.
struct Target {
    int64_t page;
    int64_t slot;
    int64_t row;  // in the appended tensors
};

bool targets_of(const gqla_append_args* a, int32_t page_size, std::vector<Target>& out) {
    int64_t n = 0;
    for (int32_t it = 0; it < a->num_items; ++it) n += a->items[it].count;
    try {
        out.reserve(static_cast<size_t>(n));
    } catch (const std::bad_alloc&) {
        return false;
    }
    for (int32_t it = 0; it < a->num_items; ++it) {
        const gqla_append_item& item = a->items[it];
        for (int64_t i = 0; i < item.count; ++i) {
            const int64_t pos = item.start + i;
            out.push_back(Target{item.page_table[pos / page_size], pos % page_size, item.row_offset + i});
        }
    }
    return true;
}

}  // namespace

gqla_status append_without_latent(CpuContext* ctx, const gqla_append_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    if (a->layer < 0 || a->layer >= d.num_layers)
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "append: layer %d", a->layer);
    const LayerWeights& w = ctx->weights[static_cast<size_t>(a->layer)];
    if (!w.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "append: weights of layer %d are not set", a->layer);
    const int64_t r = d.latent_dim, dr = d.rope_dim, dc = d.nope_dim, dv = d.value_dim;
    const int64_t P = d.page_size, N = ctx->expanded_width();
    const size_t es = ctx->elem_size;

    std::vector<Target> targets;
    if (!targets_of(a, d.page_size, targets)) return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    const int64_t n_all = static_cast<int64_t>(targets.size());
    const int64_t block = std::min(n_all, kRowsPerGemm);
    std::vector<float> latent, out;
    std::vector<unsigned char> stored;  // one latent row in the cache dtype
    try {
        latent.resize(static_cast<size_t>(block * r));
        out.resize(static_cast<size_t>(block * N));
        stored.resize(static_cast<size_t>(r) * es);
    } catch (const std::bad_alloc&) {
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    }

    char* KR = static_cast<char*>(ctx->pool_layer(ctx->kept[1], a->layer));
    char* KC = static_cast<char*>(ctx->pool_layer(ctx->expanded[0], a->layer));
    char* VE = static_cast<char*>(ctx->pool_layer(ctx->expanded[1], a->layer));
    for (int64_t r0 = 0; r0 < n_all; r0 += kRowsPerGemm) {
        const int64_t n = std::min(kRowsPerGemm, n_all - r0);
        for (int64_t i = 0; i < n; ++i) {
            const Target& t = targets[static_cast<size_t>(r0 + i)];
            convert_row(view_at(a->b, t.row), a->b.dtype, KR + (t.page * ctx->kept[1].page_elems + t.slot * dr) * es,
                        d.cache_dtype, static_cast<int>(dr));
            convert_row(view_at(a->a, t.row), a->a.dtype, stored.data(), d.cache_dtype, static_cast<int>(r));
            load_row_f32(stored.data(), d.cache_dtype, static_cast<int>(r), 1.0f, latent.data() + i * r);
        }
        gqla_status st = expansion_gemm(ctx, w, n, latent.data(), out.data());
        if (st != GQLA_OK) return st;
        for (int64_t i = 0; i < n; ++i) {
            const Target& t = targets[static_cast<size_t>(r0 + i)];
            for (int64_t g = 0; g < d.num_kv_heads; ++g) {
                const float* row = out.data() + i * N + g * (dc + dv);
                const int64_t kc_off = t.page * ctx->expanded[0].page_elems + (g * P + t.slot) * dc;
                const int64_t ve_off = t.page * ctx->expanded[1].page_elems + (g * P + t.slot) * dv;
                store_row_f32(row, 1.0f, KC + kc_off * es, d.cache_dtype, static_cast<int>(dc));
                store_row_f32(row + dc, 1.0f, VE + ve_off * es, d.cache_dtype, static_cast<int>(dv));
            }
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// The CPU backend's vtable and context lifecycle: pools, weights, workspace.
// The per-call work lives in cache_writes.cpp, decode_gqa.cpp,
// gqa_transient.cpp and decode_absorb.cpp.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/cpu_backend_internal.hpp"
#include "backends/cpu/cpu_context.hpp"
#include "backends/cpu/decode_sparse.hpp"
#include "backends/cpu/io_rows.hpp"
#include "core/backend_api.h"
#include "core/dtype.hpp"
#include "backends/cpu/probe/cpu_probe.hpp"
#include "core/probe.hpp"

namespace gqla::cpu {

gqla_status fail(CpuContext* ctx, gqla_status st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
    va_end(ap);
    return st;
}

bool use_isa(void* ctx, Isa isa) {
    const KernelTable* t = kernels_for(isa);
    if (!t) return false;
    use_table(ctx, *t);
    return true;
}

void use_table(void* ctx, const KernelTable& table) { static_cast<CpuContext*>(ctx)->kernels = &table; }

void limit_chunk_rows(void* p, int64_t rows) {
    CpuContext* ctx = static_cast<CpuContext*>(p);
    const int64_t floor = ctx->desc.num_heads;
    for (PathWorkspace* w : {&ctx->ws_layout.gqa, &ctx->ws_layout.absorb})
        if (w->rows_cap > 0) w->rows_cap = std::max(floor, std::min(w->rows_cap, rows));
}

namespace {

CpuContext* as_ctx(void* p) { return static_cast<CpuContext*>(p); }

// Bytes of a pool holding `page_elems` elements per page per layer; 0 on overflow.
bool pool_bytes(const gqla_backend_desc& d, int64_t page_elems, size_t elem, size_t* out) {
    const unsigned __int128 b = static_cast<unsigned __int128>(d.num_layers) * static_cast<uint64_t>(d.num_pages) *
                                static_cast<uint64_t>(page_elems) * elem;
    if (b > (static_cast<unsigned __int128>(1) << 62)) return false;
    *out = static_cast<size_t>(b);
    return true;
}

bool allocate_pool(const gqla_backend_desc& d, Pool& p, int64_t page_elems, size_t elem) {
    size_t bytes = 0;
    if (!pool_bytes(d, page_elems, elem, &bytes)) return false;
    if (!p.mem.allocate(bytes)) return false;
    p.page_elems = page_elems;
    p.layer_elems = page_elems * d.num_pages;
    p.elem = elem;
    return true;
}

// An 8-bit pool (docs/fp8-cache.md): per page `rows` rows of `width` e4m3
// bytes, padded to 64 bytes, then `scale_cols` f32 scales per row, the page
// padded to 64 bytes. The scales travel with their page (copy_pages).
bool allocate_fp8_pool(const gqla_backend_desc& d, Pool& p, int64_t rows, int64_t width, int32_t scale_cols) {
    const int64_t data = (rows * width + 63) / 64 * 64;
    const int64_t page = (data + rows * scale_cols * 4 + 63) / 64 * 64;
    if (!allocate_pool(d, p, page, 1)) return false;
    p.scale_off = data;
    p.scale_cols = scale_cols;
    return true;
}

// The GQLA context's expanded pools KC and VE: 8-bit with one scale per
// (token, group) row, or in the cache dtype.
bool allocate_expanded_pools(const gqla_backend_desc& d, Pool& kc, Pool& ve) {
    const int64_t GP = static_cast<int64_t>(d.num_kv_heads) * d.page_size;
    if (d.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        return allocate_fp8_pool(d, kc, GP, d.nope_dim, 1) && allocate_fp8_pool(d, ve, GP, d.value_dim, 1);
    const size_t elem = dtype_size(d.cache_dtype);
    return allocate_pool(d, kc, GP * d.nope_dim, elem) && allocate_pool(d, ve, GP * d.value_dim, elem);
}

gqla_status cpu_device_count(int32_t* out) {
    *out = 1;
    return GQLA_OK;
}

gqla_status cpu_probe(int32_t index, uint32_t flags, gqla_probe_info* out) {
    if (index != 0) return GQLA_ERR_INVALID_ARGUMENT;
    return probe_cpu(flags, out);
}

gqla_status cpu_create(const gqla_backend_desc* desc, void** out_ctx, char* err, size_t err_len) {
    *out_ctx = nullptr;
    auto report = [&](gqla_status st, const char* msg) {
        if (err && err_len) std::snprintf(err, err_len, "cpu backend: %s", msg);
        return st;
    };
    const gqla_backend_desc& d = *desc;
    if (d.num_heads <= 0 || d.num_kv_heads <= 0 || d.num_heads % d.num_kv_heads || d.num_layers <= 0 ||
        d.page_size <= 0 || d.num_pages <= 0 || !cache_dtype_valid(d.cache_dtype) || !dtype_valid(d.io_dtype))
        return report(GQLA_ERR_INVALID_ARGUMENT, "invalid backend description");
    CpuContext* ctx = new (std::nothrow) CpuContext;
    if (!ctx) return report(GQLA_ERR_OUT_OF_MEMORY, "out of memory for the context");
    ctx->desc = d;
    if (ctx->desc.num_threads < 1) ctx->desc.num_threads = 1;
    ctx->elem_size = dtype_size(d.cache_dtype);
    ctx->kernels = &best_kernels();
    const int64_t P = d.page_size, G = d.num_kv_heads;
    bool ok;
    if (d.kind == GQLA_KIND_GQA) {
        ok = ctx->fp8() ? allocate_fp8_pool(d, ctx->kept[0], G * P, d.head_dim, 1) &&
                              allocate_fp8_pool(d, ctx->kept[1], G * P, d.value_dim, 1)
                        : allocate_pool(d, ctx->kept[0], G * P * d.head_dim, ctx->elem_size) &&
                              allocate_pool(d, ctx->kept[1], G * P * d.value_dim, ctx->elem_size);
    } else {
        // KR (an 8-bit cache keeps the rope key in bf16), then the latent C,
        // or without it (keep_latent = 0) the expanded pools, for life.
        const int32_t latent_blocks = (d.latent_dim + kFp8LatentBlockElems - 1) / kFp8LatentBlockElems;
        ok = allocate_pool(d, ctx->kept[1], P * d.rope_dim, ctx->fp8() ? 2 : ctx->elem_size);
        if (!d.keep_latent)
            ok = ctx->expanded_on = ok && allocate_expanded_pools(d, ctx->expanded[0], ctx->expanded[1]);
        else if (ctx->fp8())
            ok = ok && allocate_fp8_pool(d, ctx->kept[0], P, d.latent_dim, latent_blocks);
        else
            ok = ok && allocate_pool(d, ctx->kept[0], P * d.latent_dim, ctx->elem_size);
    }
    if (!ok) {
        delete ctx;
        return report(GQLA_ERR_OUT_OF_MEMORY, "cannot allocate the cache pool");
    }
    try {
        if (d.kind == GQLA_KIND_GQLA) ctx->weights.resize(static_cast<size_t>(d.num_layers));
    } catch (const std::bad_alloc&) {
        delete ctx;
        return report(GQLA_ERR_OUT_OF_MEMORY, "out of memory for the weight table");
    }
    ctx->ws_layout = plan_workspace(ctx->desc);
    if (!ctx->workspace.allocate(ctx->ws_layout.total_bytes)) {
        delete ctx;
        return report(GQLA_ERR_OUT_OF_MEMORY, "cannot allocate the decode workspace");
    }
    // The workers start here, with the workspace they index, so that decode
    // neither allocates nor starts threads.
    try {
        ctx->pool = std::make_unique<ThreadPool>(ctx->ws_layout.threads);
    } catch (const std::bad_alloc&) {
        delete ctx;
        return report(GQLA_ERR_OUT_OF_MEMORY, "out of memory for the thread pool");
    }
    *out_ctx = ctx;
    return GQLA_OK;
}

void cpu_destroy(void* ctx) { delete as_ctx(ctx); }

const char* cpu_error_message(void* ctx) { return ctx ? as_ctx(ctx)->error : ""; }

void cpu_memory_usage(void* p, int64_t out[4]) {
    CpuContext* ctx = as_ctx(p);
    out[0] = static_cast<int64_t>(ctx->kept[0].mem.size() + ctx->kept[1].mem.size());
    out[1] = static_cast<int64_t>(ctx->expanded[0].mem.size() + ctx->expanded[1].mem.size());
    int64_t w = 0;
    for (const LayerWeights& lw : ctx->weights) w += static_cast<int64_t>(lw.bytes());
    out[2] = w;
    out[3] = static_cast<int64_t>(ctx->workspace.size());
}

gqla_status cpu_set_weights(void* p, int32_t layer, const gqla_view* wv) {
    CpuContext* ctx = as_ctx(p);
    const gqla_backend_desc& d = ctx->desc;
    if (d.kind != GQLA_KIND_GQLA) return fail(ctx, GQLA_ERR_INVALID_STATE, "set_weights: GQA-kind context");
    if (layer < 0 || layer >= d.num_layers) return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "set_weights: layer %d", layer);
    const int64_t rows = ctx->expanded_width(), r = d.latent_dim;
    if (!wv || !wv->data || wv->on_device || wv->ndim != 2 || wv->shape[0] != rows || wv->shape[1] != r ||
        wv->strides[1] != 1 || !dtype_valid(wv->dtype))
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "set_weights: expected a host [%lld, %lld] tensor",
                    static_cast<long long>(rows), static_cast<long long>(r));
    LayerWeights fresh;
    const size_t elems = static_cast<size_t>(rows * r), bytes = elems * sizeof(float);
    const int64_t G = d.num_kv_heads, dc = d.nope_dim, dv = d.value_dim;
    const size_t uv_elems = static_cast<size_t>(G * r * dv);
    if (!fresh.w.allocate(bytes) || !fresh.wt.allocate(bytes))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "set_weights: cannot allocate %zu bytes", 2 * bytes);
    float* w = fresh.w.as<float>();
    float* wt = fresh.wt.as<float>();
    for (int64_t i = 0; i < rows; ++i) load_row_f32(view_at(*wv, i), wv->dtype, static_cast<int>(r), 1.0f, w + i * r);
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t k = 0; k < r; ++k) wt[k * rows + i] = w[i * r + k];
    // bf16 copies for the absorb projections of bf16 and 8-bit caches: at
    // small batch those weights are most of a step's bytes, more than the
    // latent itself. Rounding them puts up to 2^-9 of relative error into q~
    // and o, so the copies are made only where that is free (the weights are
    // bf16 values already) or pays: weights larger than kBf16WeightsMinBytes
    // in f32, which outgrow the core's caches and whose projections sum enough
    // terms for the rounding errors to average. Small projections kept in
    // bf16 put bf16 decodes of the API-sequence fuzzer up to 1.65e-2 from the
    // float64 reference (seed 112), over the 1e-2 bound.
    bool exact16 = true;
    for (size_t i = 0; i < elems && exact16; ++i) exact16 = bf16_to_f32(f32_to_bf16(w[i])) == w[i];
    const bool bf16 = (d.cache_dtype == GQLA_DTYPE_BF16 || d.cache_dtype == GQLA_DTYPE_FP8_E4M3) &&
                      (exact16 || bytes > kBf16WeightsMinBytes);
    if (bf16 && (!fresh.w16.allocate(elems * 2) || !fresh.wuv16.allocate(uv_elems * 2)))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "set_weights: cannot allocate %zu bytes",
                    2 * bytes + (elems + uv_elems) * 2);
    if (bf16) {
        uint16_t* w16 = fresh.w16.as<uint16_t>();
        uint16_t* wuv16 = fresh.wuv16.as<uint16_t>();
        fresh.w16_exact = exact16;
        for (size_t i = 0; i < elems; ++i) w16[i] = f32_to_bf16(w[i]);
        // wuv16[g][k][n] = W_UV[g][n][k]: row g*(dc+dv)+dc+n of w.
        for (int64_t g = 0; g < G; ++g)
            for (int64_t k = 0; k < r; ++k)
                for (int64_t n = 0; n < dv; ++n)
                    wuv16[(g * r + k) * dv + n] = f32_to_bf16(w[(g * (dc + dv) + dc + n) * r + k]);
        // Keep only the f32 copy the expansion GEMM reads.
        if (expansion_reads_wt())
            fresh.w = AlignedBuffer{};
        else
            fresh.wt = AlignedBuffer{};
    }
    ctx->weights[static_cast<size_t>(layer)] = std::move(fresh);
    return GQLA_OK;
}

gqla_status cpu_set_expanded(void* p, int32_t enable) {
    CpuContext* ctx = as_ctx(p);
    const gqla_backend_desc& d = ctx->desc;
    if (d.kind != GQLA_KIND_GQLA) return GQLA_OK;  // GQA kind: its K/V cache is the only one
    if (!d.keep_latent)
        return enable ? GQLA_OK
                      : fail(ctx, GQLA_ERR_INVALID_STATE,
                             "set_expanded: the expanded "
                             "cache is the only cache without the latent");
    if (!enable) {
        ctx->expanded[0] = Pool{};
        ctx->expanded[1] = Pool{};
        ctx->expanded_on = false;
        return GQLA_OK;
    }
    if (ctx->expanded_on) return GQLA_OK;
    Pool kc, ve;
    if (!allocate_expanded_pools(d, kc, ve))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "set_expanded: cannot allocate the expanded cache");
    ctx->expanded[0] = std::move(kc);
    ctx->expanded[1] = std::move(ve);
    ctx->expanded_on = true;
    return GQLA_OK;
}

gqla_status cpu_append(void* p, const gqla_append_args* a) { return append_tokens(as_ctx(p), a); }
gqla_status cpu_expand(void* p, const gqla_expand_args* a) { return expand_tokens(as_ctx(p), a); }
gqla_status cpu_copy_pages(void* p, int32_t n, const int32_t* s, const int32_t* d) {
    return copy_pages(as_ctx(p), n, s, d);
}

gqla_status cpu_read_rows(void* p, const gqla_read_args* a) { return read_rows(as_ctx(p), a); }

gqla_status cpu_decode(void* p, const gqla_decode_args* a) {
    CpuContext* ctx = as_ctx(p);
    if (a->batch <= 0) return GQLA_OK;
    if (a->indices.data != nullptr) return decode_sparse(ctx, a);
    if (ctx->desc.kind == GQLA_KIND_GQA) return decode_gqa_form(ctx, a);
    if (!ctx->desc.keep_latent && (a->path == GQLA_PATH_ABSORB || a->transient))
        return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: the absorb and transient forms read the latent, not kept");
    if (a->path == GQLA_PATH_ABSORB) return decode_absorb(ctx, a);
    if (a->transient) return decode_gqa_transient(ctx, a);
    if (!ctx->expanded_on)
        return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: GQA path requested but the expanded cache is off");
    return decode_gqa_form(ctx, a);
}

const gqla_backend_vtable kCpuVtable = {
    GQLA_BACKEND_ABI_VERSION,
    static_cast<uint32_t>(sizeof(gqla_backend_vtable)),
    "cpu",
    GQLA_DEVICE_CPU,
    cpu_device_count,
    cpu_probe,
    cpu_create,
    cpu_destroy,
    cpu_error_message,
    cpu_memory_usage,
    cpu_set_weights,
    cpu_set_expanded,
    cpu_append,
    cpu_expand,
    cpu_copy_pages,
    nullptr,  // update_sequence: page tables are read from the call arguments
    cpu_decode,
    nullptr,  // set_stream
    nullptr,  // synchronize: every call is synchronous
    efficiency,
    cpu_read_rows,
    GQLA_BACKEND_FEATURE_DROP_LATENT | GQLA_BACKEND_FEATURE_FP8_CACHE | GQLA_BACKEND_FEATURE_SPARSE |
        GQLA_BACKEND_FEATURE_SPARSE_FP8 | GQLA_BACKEND_FEATURE_FP8_EXPANDED |
        GQLA_BACKEND_FEATURE_FP8_ROWS,  // features
};

}  // namespace
}  // namespace gqla::cpu

extern "C" const gqla_backend_vtable* gqla_cpu_backend(void) { return &gqla::cpu::kCpuVtable; }

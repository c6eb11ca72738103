// SPDX-License-Identifier: Apache-2.0
// Writing the cache: appended rows (converted from the io dtype to the cache
// dtype), expanded rows built from the latent (KC/VE = W_UKV c), also for
// contexts that drop the latent (desc.keep_latent = 0), and page copies for
// copy-on-write.
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/fp8_rows.hpp"
#include "backends/cpu/io_rows.hpp"

namespace gqla::cpu {

namespace {

// Rows expanded per GEMM: bounds the temporaries of long appends.
constexpr int64_t kExpandRowsPerGemm = 2048;

struct Slot {
    int64_t page;
    int64_t slot;
};

Slot slot_of(const int32_t* page_table, int64_t pos, int32_t page_size) {
    return Slot{page_table[pos / page_size], pos % page_size};
}

// Calls f(slot, row) for every position the items write, row being the
// position's row in the appended tensors.
template <typename F>
void for_each_position(const gqla_append_item* items, int32_t num_items, int32_t page_size, F f) {
    for (int32_t it = 0; it < num_items; ++it) {
        const gqla_append_item& item = items[it];
        for (int64_t i = 0; i < item.count; ++i)
            f(slot_of(item.page_table, item.start + i, page_size), item.row_offset + i);
    }
}

// Latent rows (as stored, widened to f32) gathered for expand_slots.
struct LatentRows {
    std::vector<Slot> slots;
    std::vector<float> latent;

    // Room for the items' positions; false when out of memory.
    bool reserve(const gqla_append_item* items, int32_t num_items, int64_t r) {
        int64_t n = 0;
        for (int32_t it = 0; it < num_items; ++it) n += items[it].count;
        return reserve_rows(n, r);
    }
    // Room for n rows of r elements; false when out of memory.
    bool reserve_rows(int64_t n, int64_t r) {
        try {
            slots.reserve(static_cast<size_t>(n));
            latent.resize(static_cast<size_t>(n * r));
        } catch (const std::bad_alloc&) {
            return false;
        }
        return true;
    }
    // Appends the latent row stored at `c_row` for slot s (8-bit: widened
    // with its block scales `c_scales`).
    void add(const CpuContext* ctx, const void* c_row, const float* c_scales, Slot s) {
        float* dst = latent.data() + slots.size() * ctx->desc.latent_dim;
        if (ctx->fp8())
            ctx->kernels->fp8_rows(static_cast<const uint8_t*>(c_row), ctx->desc.latent_dim, c_scales,
                                   kFp8LatentBlockElems, dst);
        else
            load_row_f32(c_row, ctx->desc.cache_dtype, ctx->desc.latent_dim, 1.0f, dst);
        slots.push_back(s);
    }
    int64_t size() const { return static_cast<int64_t>(slots.size()); }
    void clear() { slots.clear(); }
};

// Expands the latent rows (already rounded to the cache dtype, as f32) of
// the given slots into KC/VE of `layer`.
gqla_status expand_slots(CpuContext* ctx, int32_t layer, const LatentRows& rows) {
    const std::vector<Slot>& slots = rows.slots;
    const std::vector<float>& latent = rows.latent;
    const gqla_backend_desc& d = ctx->desc;
    const LayerWeights& w = ctx->weights[static_cast<size_t>(layer)];
    if (!w.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "weights of layer %d are not set", layer);
    const int64_t r = d.latent_dim, N = ctx->expanded_width();
    const int64_t P = d.page_size, dc = d.nope_dim, dv = d.value_dim;
    const int64_t n_all = static_cast<int64_t>(slots.size());
    std::vector<float> out;
    try {
        out.resize(static_cast<size_t>(std::min(n_all, kExpandRowsPerGemm) * N));
    } catch (const std::bad_alloc&) {
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "expand: out of memory");
    }
    char* kc = static_cast<char*>(ctx->pool_layer(ctx->expanded[0], layer));
    char* ve = static_cast<char*>(ctx->pool_layer(ctx->expanded[1], layer));
    const size_t es = ctx->elem_size;
    const Pool& kc_pool = ctx->expanded[0];
    const Pool& ve_pool = ctx->expanded[1];
    for (int64_t r0 = 0; r0 < n_all; r0 += kExpandRowsPerGemm) {
        const int64_t n = std::min(kExpandRowsPerGemm, n_all - r0);
        gqla_status st = expansion_gemm(ctx, w, n, latent.data() + r0 * r, out.data());
        if (st != GQLA_OK) return st;
        for (int64_t i = 0; i < n; ++i) {
            const Slot s = slots[static_cast<size_t>(r0 + i)];
            for (int64_t g = 0; g < d.num_kv_heads; ++g) {
                const float* row = out.data() + i * N + g * (dc + dv);
                const int64_t kc_off = s.page * ctx->expanded[0].page_elems + (g * P + s.slot) * dc;
                const int64_t ve_off = s.page * ctx->expanded[1].page_elems + (g * P + s.slot) * dv;
                if (ctx->fp8()) {  // one scale per (token, group) for each
                    *kc_pool.scales(kc, s.page, g * P + s.slot) =
                        quantize_row_e4m3(row, static_cast<int>(dc), reinterpret_cast<uint8_t*>(kc + kc_off));
                    *ve_pool.scales(ve, s.page, g * P + s.slot) =
                        quantize_row_e4m3(row + dc, static_cast<int>(dv), reinterpret_cast<uint8_t*>(ve + ve_off));
                    continue;
                }
                store_row_f32(row, 1.0f, kc + kc_off * es, d.cache_dtype, static_cast<int>(dc));
                store_row_f32(row + dc, 1.0f, ve + ve_off * es, d.cache_dtype, static_cast<int>(dv));
            }
        }
    }
    return GQLA_OK;
}

// Scales [scale_cols] of row `row` of a stored rows' scale view
// (gqla_append_args a_scales / b_scales: contiguous [n, scale_cols]).
const float* stored_scales(const gqla_view& v, int64_t row) {
    return static_cast<const float*>(v.data) + row * v.strides[0];
}

// Widens an io row to f32 and quantizes it into e4m3 with one scale; or,
// for a stored row (an import: t is FP8_E4M3), copies its codes and
// returns its scale.
float quantize_io_row(const void* src, gqla_dtype t, int n, float* tmp, uint8_t* dst, const float* stored_scale) {
    if (t == GQLA_DTYPE_FP8_E4M3) {
        std::memcpy(dst, src, static_cast<size_t>(n));
        return *stored_scale;
    }
    load_row_f32(src, t, n, 1.0f, tmp);
    return quantize_row_e4m3(tmp, n, dst);
}

// Stored rows (t FP8_E4M3) need an 8-bit cache and their scales.
gqla_status check_stored_rows(CpuContext* ctx, const gqla_view& rows, const gqla_view& scales, const char* part) {
    if (rows.dtype != GQLA_DTYPE_FP8_E4M3) return GQLA_OK;
    if (!ctx->fp8())
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "append: stored 8-bit %s rows into a %s cache", part,
                    dtype_name(ctx->desc.cache_dtype));
    if (scales.data == nullptr || scales.on_device)
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "append: stored 8-bit %s rows need their scales in host memory",
                    part);
    return GQLA_OK;
}

gqla_status append_gqa_kind_fp8(CpuContext* ctx, const gqla_append_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    if (gqla_status st = check_stored_rows(ctx, a->a, a->a_scales, "K"); st != GQLA_OK) return st;
    if (gqla_status st = check_stored_rows(ctx, a->b, a->b_scales, "V"); st != GQLA_OK) return st;
    const bool stored_k = a->a.dtype == GQLA_DTYPE_FP8_E4M3, stored_v = a->b.dtype == GQLA_DTYPE_FP8_E4M3;
    const int64_t P = d.page_size, D = d.head_dim, Dv = d.value_dim;
    const Pool& kp = ctx->kept[0];
    const Pool& vp = ctx->kept[1];
    char* K = static_cast<char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    char* V = static_cast<char*>(ctx->pool_layer(ctx->kept[1], a->layer));
    std::vector<float> tmp;
    try {
        tmp.resize(static_cast<size_t>(std::max(D, Dv)));
    } catch (const std::bad_alloc&) {
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    }
    for_each_position(a->items, a->num_items, d.page_size, [&](Slot s, int64_t row) {
        for (int64_t g = 0; g < d.num_kv_heads; ++g) {
            const int64_t r = g * P + s.slot;
            uint8_t* k_dst = reinterpret_cast<uint8_t*>(K + s.page * kp.page_elems + r * D);
            uint8_t* v_dst = reinterpret_cast<uint8_t*>(V + s.page * vp.page_elems + r * Dv);
            *kp.scales(K, s.page, r) =
                quantize_io_row(view_at(a->a, row, g), a->a.dtype, static_cast<int>(D), tmp.data(), k_dst,
                                stored_k ? stored_scales(a->a_scales, row) + g : nullptr);
            *vp.scales(V, s.page, r) =
                quantize_io_row(view_at(a->b, row, g), a->b.dtype, static_cast<int>(Dv), tmp.data(), v_dst,
                                stored_v ? stored_scales(a->b_scales, row) + g : nullptr);
        }
    });
    return GQLA_OK;
}

gqla_status append_gqa_kind(CpuContext* ctx, const gqla_append_args* a) {
    if (ctx->fp8()) return append_gqa_kind_fp8(ctx, a);
    const gqla_backend_desc& d = ctx->desc;
    const int64_t P = d.page_size, D = d.head_dim, Dv = d.value_dim;
    char* K = static_cast<char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    char* V = static_cast<char*>(ctx->pool_layer(ctx->kept[1], a->layer));
    const size_t es = ctx->elem_size;
    for_each_position(a->items, a->num_items, d.page_size, [&](Slot s, int64_t row) {
        for (int64_t g = 0; g < d.num_kv_heads; ++g) {
            const int64_t k_off = s.page * ctx->kept[0].page_elems + (g * P + s.slot) * D;
            const int64_t v_off = s.page * ctx->kept[1].page_elems + (g * P + s.slot) * Dv;
            convert_row(view_at(a->a, row, g), a->a.dtype, K + k_off * es, d.cache_dtype, static_cast<int>(D));
            convert_row(view_at(a->b, row, g), a->b.dtype, V + v_off * es, d.cache_dtype, static_cast<int>(Dv));
        }
    });
    return GQLA_OK;
}

// One appended latent row as the cache stores it: converted to the cache
// dtype, or (8-bit) quantized in blocks of kFp8LatentBlockElems, one scale
// each into `scales`, through the f32 row `tmp` (r floats); a stored 8-bit
// row (src_dtype FP8_E4M3, an import) is copied with its `src_scales`.
void store_latent_row(const CpuContext* ctx, const void* src, gqla_dtype src_dtype, char* dst, float* scales,
                      float* tmp, const float* src_scales) {
    const int r = static_cast<int>(ctx->desc.latent_dim);
    if (src_dtype == GQLA_DTYPE_FP8_E4M3) {
        std::memcpy(dst, src, static_cast<size_t>(r));
        std::memcpy(scales, src_scales, sizeof(float) * ((r + kFp8LatentBlockElems - 1) / kFp8LatentBlockElems));
    } else if (ctx->fp8()) {
        load_row_f32(src, src_dtype, r, 1.0f, tmp);
        quantize_blocks_e4m3(tmp, r, kFp8LatentBlockElems, reinterpret_cast<uint8_t*>(dst), scales);
    } else {
        convert_row(src, src_dtype, dst, ctx->desc.cache_dtype, r);
    }
}

// One appended rope key row into KR of `layer` (bf16 beside an 8-bit latent).
void store_rope_key_row(CpuContext* ctx, const gqla_append_args* a, int64_t row, Slot s) {
    Pool& kr = ctx->kept[1];
    char* KR = static_cast<char*>(ctx->pool_layer(kr, a->layer));
    const gqla_dtype kr_dtype = ctx->fp8() ? GQLA_DTYPE_BF16 : ctx->desc.cache_dtype;
    convert_row(view_at(a->b, row), a->b.dtype, KR + (s.page * kr.page_elems + s.slot * ctx->desc.rope_dim) * kr.elem,
                kr_dtype, static_cast<int>(ctx->desc.rope_dim));
}

gqla_status append_gqla_kind(CpuContext* ctx, const gqla_append_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const int64_t r = d.latent_dim;
    const bool expand = a->write_expanded != 0;
    if (expand) {
        if (!ctx->expanded_on) return fail(ctx, GQLA_ERR_INVALID_STATE, "append: the expanded cache is off");
        if (!ctx->weights[static_cast<size_t>(a->layer)].set())
            return fail(ctx, GQLA_ERR_INVALID_STATE, "append: weights of layer %d are not set", a->layer);
    }
    if (gqla_status st = check_stored_rows(ctx, a->a, a->a_scales, "latent"); st != GQLA_OK) return st;
    const bool stored = a->a.dtype == GQLA_DTYPE_FP8_E4M3;
    LatentRows expanded;
    if (expand && !expanded.reserve(a->items, a->num_items, r))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    char* C = static_cast<char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    const Pool& cp = ctx->kept[0];
    std::vector<float> tmp;
    try {
        if (ctx->fp8()) tmp.resize(static_cast<size_t>(r));
    } catch (const std::bad_alloc&) {
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    }
    for_each_position(a->items, a->num_items, d.page_size, [&](Slot s, int64_t row) {
        char* c_dst = C + (s.page * cp.page_elems + s.slot * r) * ctx->elem_size;
        float* c_scales = ctx->fp8() ? cp.scales(C, s.page, s.slot) : nullptr;
        store_latent_row(ctx, view_at(a->a, row), a->a.dtype, c_dst, c_scales, tmp.data(),
                         stored ? stored_scales(a->a_scales, row) : nullptr);
        store_rope_key_row(ctx, a, row, s);
        // The expansion sees the latent as stored, so it matches a later
        // re-expansion from the cache bit for bit.
        if (expand) expanded.add(ctx, c_dst, c_scales, s);
    });
    return expand ? expand_slots(ctx, a->layer, expanded) : GQLA_OK;
}

// A context without the latent (desc.keep_latent = 0): each appended latent
// row is stored into a scratch row as a kept one would be (rounded to the
// cache dtype; 8-bit: quantized in blocks), expanded from there into the
// context's groups and dropped, so this context holds the expanded rows a
// latent-keeping one builds (bit for bit, the fp8 scales included). Rows
// are expanded in blocks of kExpandRowsPerGemm, which bounds the f32 latent
// rows held at once however long the append (an import) is.
gqla_status append_gqla_without_latent(CpuContext* ctx, const gqla_append_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    if (!ctx->weights[static_cast<size_t>(a->layer)].set())
        return fail(ctx, GQLA_ERR_INVALID_STATE, "append: weights of layer %d are not set", a->layer);
    if (gqla_status st = check_stored_rows(ctx, a->a, a->a_scales, "latent"); st != GQLA_OK) return st;
    const bool stored = a->a.dtype == GQLA_DTYPE_FP8_E4M3;
    const int64_t r = d.latent_dim;
    LatentRows rows;
    std::vector<unsigned char> row_store;  // one latent row in the cache dtype
    std::vector<float> tmp, scales;
    try {
        row_store.resize(static_cast<size_t>(r) * ctx->elem_size);
        if (ctx->fp8()) {
            tmp.resize(static_cast<size_t>(r));
            scales.resize(static_cast<size_t>((r + kFp8LatentBlockElems - 1) / kFp8LatentBlockElems));
        }
    } catch (const std::bad_alloc&) {
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    }
    int64_t n = 0;
    for (int32_t it = 0; it < a->num_items; ++it) n += a->items[it].count;
    if (!rows.reserve_rows(std::min(n, kExpandRowsPerGemm), r))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "append: out of memory");
    char* row_bytes = reinterpret_cast<char*>(row_store.data());
    float* row_scales = ctx->fp8() ? scales.data() : nullptr;
    gqla_status st = GQLA_OK;
    for_each_position(a->items, a->num_items, d.page_size, [&](Slot s, int64_t row) {
        if (st != GQLA_OK) return;
        store_latent_row(ctx, view_at(a->a, row), a->a.dtype, row_bytes, row_scales, tmp.data(),
                         stored ? stored_scales(a->a_scales, row) : nullptr);
        store_rope_key_row(ctx, a, row, s);
        rows.add(ctx, row_bytes, row_scales, s);
        if (rows.size() == kExpandRowsPerGemm) {
            st = expand_slots(ctx, a->layer, rows);
            rows.clear();
        }
    });
    if (st == GQLA_OK && rows.size() > 0) st = expand_slots(ctx, a->layer, rows);
    return st;
}

}  // namespace

gqla_status append_tokens(CpuContext* ctx, const gqla_append_args* a) {
    if (a->layer < 0 || a->layer >= ctx->desc.num_layers)
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "append: layer %d", a->layer);
    if (ctx->desc.kind == GQLA_KIND_GQA) return append_gqa_kind(ctx, a);
    return ctx->desc.keep_latent ? append_gqla_kind(ctx, a) : append_gqla_without_latent(ctx, a);
}

gqla_status expand_tokens(CpuContext* ctx, const gqla_expand_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    if (d.kind != GQLA_KIND_GQLA || !ctx->expanded_on)
        return fail(ctx, GQLA_ERR_INVALID_STATE, "expand: no expanded cache");
    if (a->layer < 0 || a->layer >= d.num_layers)
        return fail(ctx, GQLA_ERR_INVALID_ARGUMENT, "expand: layer %d", a->layer);
    LatentRows rows;
    if (!rows.reserve(a->items, a->num_items, d.latent_dim))
        return fail(ctx, GQLA_ERR_OUT_OF_MEMORY, "expand: out of memory");
    if (rows.latent.empty()) return GQLA_OK;
    const char* C = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    const Pool& cp = ctx->kept[0];
    for_each_position(a->items, a->num_items, d.page_size, [&](Slot s, int64_t) {
        rows.add(ctx, C + (s.page * cp.page_elems + s.slot * d.latent_dim) * ctx->elem_size,
                 ctx->fp8() ? cp.scales(C, s.page, s.slot) : nullptr, s);
    });
    return expand_slots(ctx, a->layer, rows);
}

gqla_status copy_pages(CpuContext* ctx, int32_t n, const int32_t* src, const int32_t* dst) {
    const gqla_backend_desc& d = ctx->desc;
    Pool* pools[4] = {&ctx->kept[0], &ctx->kept[1], &ctx->expanded[0], &ctx->expanded[1]};
    for (Pool* p : pools) {
        if (p->mem.empty()) continue;
        const size_t page_bytes = p->page_bytes();  // 8-bit pools: with their scales
        for (int32_t layer = 0; layer < d.num_layers; ++layer) {
            char* base = static_cast<char*>(ctx->pool_layer(*p, layer));
            for (int32_t i = 0; i < n; ++i)
                std::memcpy(base + static_cast<size_t>(dst[i]) * page_bytes,
                            base + static_cast<size_t>(src[i]) * page_bytes, page_bytes);
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Cache-side operations: weights, expanded pools, appends, expansion,
// copy-on-write page copies and the device-side sequence tables.
#include <algorithm>
#include <cstring>
#include <string>

#include "cache_kernels.hpp"
#include "cache_rows.hpp"
#include "core/dtype.hpp"
#include "session_ops.hpp"

namespace gqla::cuda {

namespace {

// Contiguous host copy of a row-major view (innermost stride 1).
void pack_host_view(const gqla_view& v, unsigned char* dst) {
    const size_t es = dtype_size(v.dtype);
    const int64_t inner = v.shape[v.ndim - 1];
    int64_t outer = 1;
    for (int i = 0; i + 1 < v.ndim; ++i) outer *= v.shape[i];
    for (int64_t o = 0; o < outer; ++o) {
        int64_t rem = o, off = 0;
        for (int i = v.ndim - 2; i >= 0; --i) {
            off += (rem % v.shape[i]) * v.strides[i];
            rem /= v.shape[i];
        }
        std::memcpy(dst, static_cast<const unsigned char*>(v.data) + off * es, inner * es);
        dst += inner * es;
    }
}

size_t view_elems(const gqla_view& v) {
    size_t n = 1;
    for (int i = 0; i < v.ndim; ++i) n *= static_cast<size_t>(v.shape[i]);
    return n;
}

// The view with contiguous strides over `data`.
gqla_view contiguous_like(const gqla_view& v, void* data) {
    gqla_view c = v;
    c.data = data;
    c.on_device = 1;
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
        c.strides[i] = stride;
        stride *= v.shape[i];
    }
    return c;
}

// Token index page * P + slot for positions [start, start + count) of an item.
void item_tokens(const gqla_append_item& it, int32_t page_size, int64_t* out) {
    for (int64_t i = 0; i < it.count; ++i) {
        int64_t pos = it.start + i;
        out[i] = static_cast<int64_t>(it.page_table[pos / page_size]) * page_size + pos % page_size;
    }
}

// KC/VE rows of `layer` for the given tokens, into the kept expanded cache.
void expand_kept(Session& s, int layer, const int64_t* d_tokens, int64_t n) {
    if (!s.weights[static_cast<size_t>(layer)].get())
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA expand: weights of layer " + std::to_string(layer) + " not set");
    if (!s.pool_kc.get()) throw BackendError(GQLA_ERR_INVALID_STATE, "CUDA expand: expanded cache not enabled");
    expand_latent_rows(s, layer, d_tokens, n, ExpandedPools{&s.pool_kc, &s.pool_ve, layer, cache_format(s)});
}

void send_table_update(Session& s, int32_t slot, int32_t page_begin, const int32_t* pages, int32_t page_count,
                       int32_t layer_begin, const int32_t* lens, int32_t layer_count) {
    TableUpdateParams p{};
    p.page_tables = s.page_tables.get<int32_t>();
    p.table_stride = s.table_stride;
    p.lengths = s.lengths.get<int32_t>();
    p.max_sequences = s.desc.max_sequences;
    p.slot = slot;
    while (page_count > 0 || layer_count > 0) {
        p.page_begin = page_begin;
        p.page_count = std::clamp(page_count, 0, kTablePagesPerLaunch);
        std::copy(pages, pages + p.page_count, p.pages);
        p.layer_begin = layer_begin;
        p.layer_count = std::clamp(layer_count, 0, kTableLayersPerLaunch);
        std::copy(lens, lens + p.layer_count, p.layer_lengths);
        launch_table_update(p, s.stream);
        page_begin += p.page_count;
        pages += p.page_count;
        page_count -= p.page_count;
        layer_begin += p.layer_count;
        lens += p.layer_count;
        layer_count -= p.layer_count;
    }
}

}  // namespace

void set_weights(Session& s, int32_t layer, const gqla_view& w) {
    const gqla_backend_desc& d = s.desc;
    const int64_t rows = static_cast<int64_t>(d.num_kv_heads) * (d.nope_dim + d.value_dim), cols = d.latent_dim;
    // Allocated and converted before anything is replaced, so a failure
    // leaves the layer's previous weights in place.
    const gqla_dtype wt = projection_dtype(s);
    const int copies = s.weight_copies();
    const size_t group_bytes = static_cast<size_t>((d.nope_dim + d.value_dim) * cols) * dtype_size(wt);
    DeviceBuffer fresh, converted;
    fresh.allocate(static_cast<size_t>(rows * cols) * dtype_size(wt) * copies, "weights");
    if (copies > 1) converted.allocate(static_cast<size_t>(rows * cols) * dtype_size(wt), "weight conversion");
    DeviceBuffer raw;
    const void* src = w.data;
    int64_t row_stride = w.strides[0];
    if (!w.on_device) {
        const size_t bytes = view_elems(w) * dtype_size(w.dtype);
        unsigned char* pinned = static_cast<unsigned char*>(acquire_pinned(s, bytes));
        pack_host_view(w, pinned);
        raw.allocate(bytes, "weight staging");
        check_cuda(cudaMemcpyAsync(raw.get(), pinned, bytes, cudaMemcpyHostToDevice, s.stream),
                   "cudaMemcpyAsync(weights)");
        release_pinned(s);
        src = raw.get();
        row_stride = cols;
    }
    launch_convert_2d(src, w.dtype, rows, cols, row_stride, copies > 1 ? converted.get() : fresh.get(), wt, s.stream);
    // Head h = g * copies + i of group g: copy i of every group's block.
    for (int i = 0; copies > 1 && i < copies; ++i)
        check_cuda(cudaMemcpy2DAsync(fresh.get<unsigned char>() + i * group_bytes, copies * group_bytes,
                                     converted.get(), group_bytes, group_bytes, static_cast<size_t>(d.num_kv_heads),
                                     cudaMemcpyDeviceToDevice, s.stream),
                   "cudaMemcpy2DAsync(weights per head)");
    check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize(weights)");
    s.weights[static_cast<size_t>(layer)].swap(fresh);  // the old weights go with `fresh`
}

void allocate_expanded_pools(Session& s) {
    const gqla_backend_desc& d = s.desc;
    if (s.pool_kc.get()) return;
    DeviceBuffer kc, ve;
    kc.allocate(pool_bytes(s, d.num_kv_heads, d.nope_dim, cache_format(s)), "expanded key cache");
    ve.allocate(pool_bytes(s, d.num_kv_heads, d.value_dim, cache_format(s)), "expanded value cache");
    std::vector<NarrowTmaMaps> maps = narrow_maps_for(s, kc, ve);  // the buffers keep their addresses when swapped
    s.pool_kc.swap(kc);
    s.pool_ve.swap(ve);
    s.narrow_maps.swap(maps);
}

void set_expanded(Session& s, bool enable) {
    if (s.desc.kind == GQLA_KIND_GQLA && !s.desc.keep_latent)  // its expanded pools live as long as the session
        throw BackendError(GQLA_ERR_INTERNAL, "CUDA set_expanded: the session keeps no latent");
    // The backend does not announce GQLA_BACKEND_FEATURE_FP8_EXPANDED, so the
    // core refuses the kept expanded cache of an 8-bit GQLA session itself.
    if (enable && s.desc.kind == GQLA_KIND_GQLA && s.desc.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        throw BackendError(GQLA_ERR_INTERNAL, "CUDA set_expanded: no kept expanded cache for an fp8_e4m3 latent");
    if (enable) return allocate_expanded_pools(s);
    check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize(disable expanded)");
    s.narrow_maps.clear();
    s.pool_kc.reset();
    s.pool_ve.reset();
}

void append(Session& s, const gqla_append_args& a) {
    const gqla_backend_desc& d = s.desc;
    const int64_t n = a.a.shape[0];
    if (n == 0) return;
    const bool host_a = !a.a.on_device, host_b = !a.b.on_device;
    const size_t tok_bytes = n * 8;
    const size_t a_bytes = host_a ? view_elems(a.a) * dtype_size(a.a.dtype) : 0;
    const size_t b_bytes = host_b ? view_elems(a.b) * dtype_size(a.b.dtype) : 0;
    // Stored 8-bit rows (a sequence import) bring their scales (host
    // memory, contiguous): staged behind their rows, 16-byte aligned.
    auto stored_scale_bytes = [](const gqla_view& rows, const gqla_view& scales) -> size_t {
        if (rows.dtype != GQLA_DTYPE_FP8_E4M3) return 0;
        if (scales.data == nullptr || scales.on_device || rows.on_device)
            throw BackendError(GQLA_ERR_INVALID_ARGUMENT, "CUDA append: stored 8-bit rows need host rows and scales");
        return view_elems(scales) * 4;
    };
    auto round16 = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
    const size_t a_scale_bytes = stored_scale_bytes(a.a, a.a_scales),
                 b_scale_bytes = stored_scale_bytes(a.b, a.b_scales);
    const size_t a_stage = round16(a_bytes) + a_scale_bytes, b_stage = round16(b_bytes) + b_scale_bytes;
    s.row_tokens.ensure(std::max<size_t>(tok_bytes, s.row_tokens.bytes()), "row token indices");
    if (host_a) s.staged_a.ensure(a_stage, "append staging");
    if (host_b) s.staged_b.ensure(b_stage, "append staging");

    unsigned char* pinned = static_cast<unsigned char*>(acquire_pinned(s, tok_bytes + a_stage + b_stage));
    int64_t* tokens = reinterpret_cast<int64_t*>(pinned);
    for (int i = 0; i < a.num_items; ++i) item_tokens(a.items[i], d.page_size, tokens + a.items[i].row_offset);
    check_cuda(cudaMemcpyAsync(s.row_tokens.get(), pinned, tok_bytes, cudaMemcpyHostToDevice, s.stream),
               "cudaMemcpyAsync(tokens)");
    gqla_view va = a.a, vb = a.b;
    const float *a_scales = nullptr, *b_scales = nullptr;
    // Rows (and the scales of stored rows) through the pinned block into staging.
    auto stage = [&](const gqla_view& rows, const gqla_view& scales, size_t row_bytes, size_t scale_bytes,
                     unsigned char* host, DeviceBuffer& staged, const float** staged_scales) {
        pack_host_view(rows, host);
        if (scale_bytes > 0) std::memcpy(host + round16(row_bytes), scales.data, scale_bytes);
        const size_t bytes = scale_bytes > 0 ? round16(row_bytes) + scale_bytes : row_bytes;
        check_cuda(cudaMemcpyAsync(staged.get(), host, bytes, cudaMemcpyHostToDevice, s.stream),
                   "cudaMemcpyAsync(append rows)");
        if (scale_bytes > 0)
            *staged_scales = reinterpret_cast<const float*>(staged.get<unsigned char>() + round16(row_bytes));
        return contiguous_like(rows, staged.get());
    };
    if (host_a) va = stage(a.a, a.a_scales, a_bytes, a_scale_bytes, pinned + tok_bytes, s.staged_a, &a_scales);
    if (host_b)
        vb = stage(a.b, a.b_scales, b_bytes, b_scale_bytes, pinned + tok_bytes + a_stage, s.staged_b, &b_scales);
    release_pinned(s);

    const int64_t* d_tokens = s.row_tokens.get<int64_t>();
    const int32_t rows = static_cast<int32_t>(n);
    if (d.kind == GQLA_KIND_GQA) {
        scatter_into(s, va, va.strides[1], 0, s.pool_a, a.layer, d.num_kv_heads, d.head_dim, cache_format(s), d_tokens,
                     rows, a_scales);
        scatter_into(s, vb, vb.strides[1], 0, s.pool_b, a.layer, d.num_kv_heads, d.value_dim, cache_format(s), d_tokens,
                     rows, b_scales);
    } else if (d.keep_latent) {
        scatter_into(s, va, 0, 0, s.pool_a, a.layer, 1, d.latent_dim, latent_format(s), d_tokens, rows, a_scales);
        scatter_into(s, vb, 0, 0, s.pool_b, a.layer, 1, d.rope_dim, rope_format(s), d_tokens, rows);
        if (a.write_expanded) expand_kept(s, a.layer, d_tokens, n);
    } else {
        // No latent pool (backend_api.h, keep_latent = 0): the rows are
        // expanded from the staged input into KC/VE and dropped. Weights are
        // checked before anything is written, so a refused append writes
        // nothing.
        if (!s.weights[static_cast<size_t>(a.layer)].get())
            throw BackendError(GQLA_ERR_INVALID_STATE,
                               "CUDA append: weights of layer " + std::to_string(a.layer) + " not set");
        if (a_scales)  // 8-bit caches keep the latent here (no feature for it)
            throw BackendError(GQLA_ERR_INTERNAL, "CUDA append: stored 8-bit latent rows without a latent pool");
        scatter_into(s, vb, 0, 0, s.pool_b, a.layer, 1, d.rope_dim, rope_format(s), d_tokens, rows);
        const LatentRows given{va.data, va.dtype, va.strides[0]};
        expand_latent_rows(s, a.layer, d_tokens, n, ExpandedPools{&s.pool_kc, &s.pool_ve, a.layer, cache_format(s)},
                           &given);
    }
}

void expand(Session& s, const gqla_expand_args& a) {
    if (!s.pool_a.get()) throw BackendError(GQLA_ERR_INTERNAL, "CUDA expand: the session keeps no latent");
    int64_t n = 0;
    for (int i = 0; i < a.num_items; ++i) n += a.items[i].count;
    if (n == 0) return;
    s.row_tokens.ensure(n * 8, "row token indices");
    int64_t* tokens = static_cast<int64_t*>(acquire_pinned(s, n * 8));
    int64_t at = 0;
    for (int i = 0; i < a.num_items; ++i) {
        item_tokens(a.items[i], s.desc.page_size, tokens + at);
        at += a.items[i].count;
    }
    check_cuda(cudaMemcpyAsync(s.row_tokens.get(), tokens, n * 8, cudaMemcpyHostToDevice, s.stream),
               "cudaMemcpyAsync(tokens)");
    release_pinned(s);
    expand_kept(s, a.layer, s.row_tokens.get<int64_t>(), n);
}

void copy_pages(Session& s, int32_t n, const int32_t* src, const int32_t* dst) {
    const gqla_backend_desc& d = s.desc;
    struct PoolRef {
        const DeviceBuffer* buf;
        int64_t groups;
        int32_t dim;
        PoolFormat format;
    };
    PoolRef pools[4];
    int n_pools = 0;
    if (d.kind == GQLA_KIND_GQA) {
        pools[n_pools++] = {&s.pool_a, d.num_kv_heads, d.head_dim, cache_format(s)};
        pools[n_pools++] = {&s.pool_b, d.num_kv_heads, d.value_dim, cache_format(s)};
    } else {
        if (s.pool_a.get()) pools[n_pools++] = {&s.pool_a, 1, d.latent_dim, latent_format(s)};
        pools[n_pools++] = {&s.pool_b, 1, d.rope_dim, rope_format(s)};
        if (s.pool_kc.get()) {
            pools[n_pools++] = {&s.pool_kc, d.num_kv_heads, d.nope_dim, cache_format(s)};
            pools[n_pools++] = {&s.pool_ve, d.num_kv_heads, d.value_dim, cache_format(s)};
        }
    }
    for (int i = 0; i < n_pools; ++i) {
        const PoolRef& pr = pools[i];
        const PoolGeometry g = pool_geometry(s, pr.groups, pr.dim, pr.format);
        CopyPagesParams p{};
        p.pool = pr.buf->get<unsigned char>();
        p.layer_bytes = g.layer_bytes();
        p.page_bytes = g.page_bytes();
        p.layers = d.num_layers;
        for (int32_t first = 0; first < n; first += kCopyPagesPerLaunch) {
            p.count = std::min(kCopyPagesPerLaunch, n - first);
            std::copy(src + first, src + first + p.count, p.src);
            std::copy(dst + first, dst + first + p.count, p.dst);
            launch_copy_pages(p, s.stream);
        }
    }
}

void update_sequence(Session& s, int32_t slot, const int32_t* pages, int32_t num_pages, const int64_t* lengths) {
    if (slot < 0 || slot >= s.desc.max_sequences || num_pages < 0 || num_pages > s.table_stride)
        throw BackendError(GQLA_ERR_INTERNAL, "CUDA update_sequence: slot or page count out of range");
    std::vector<int32_t>& hp = s.host_pages[static_cast<size_t>(slot)];
    int32_t first = 0;
    while (first < num_pages && first < static_cast<int32_t>(hp.size()) && hp[first] == pages[first]) ++first;
    hp.assign(pages, pages + num_pages);

    std::vector<int32_t>& hl = s.host_lengths[static_cast<size_t>(slot)];
    int32_t lo = s.desc.num_layers, hi = -1;
    for (int32_t l = 0; l < s.desc.num_layers; ++l) {
        const int64_t len = lengths ? lengths[l] : 0;
        if (len > INT32_MAX)
            throw BackendError(GQLA_ERR_UNSUPPORTED, "CUDA backend: sequence longer than 2^31-1 tokens");
        if (hl[l] != static_cast<int32_t>(len)) {
            lo = std::min(lo, l);
            hi = l;
            hl[l] = static_cast<int32_t>(len);
        }
    }
    send_table_update(s, slot, first, hp.data() + first, num_pages - first, lo, hl.data() + (hi >= lo ? lo : 0),
                      hi >= lo ? hi - lo + 1 : 0);
}

void refresh_sequence(Session& s, int32_t slot, int32_t layer, const int32_t* pages, int32_t num_pages,
                      int64_t length) {
    std::vector<int32_t>& hl = s.host_lengths[static_cast<size_t>(slot)];
    const std::vector<int32_t>& hp = s.host_pages[static_cast<size_t>(slot)];
    if (hl[layer] == length && static_cast<int32_t>(hp.size()) == num_pages) return;
    std::vector<int64_t> lens(hl.begin(), hl.end());
    lens[layer] = length;
    update_sequence(s, slot, pages, num_pages, lens.data());
}

}  // namespace gqla::cuda

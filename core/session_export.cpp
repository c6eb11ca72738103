// SPDX-License-Identifier: Apache-2.0
// Sequence export and import (format: sequence_format.hpp). Export reads the
// always-kept rows of every layer back from the backend; import adds a new
// sequence and appends those rows layer by layer in the cache dtype, so the
// stored elements are identical (an 8-bit cache's codes travel with their
// scales and are stored as they are), and the expanded cache (GQLA GQA path) is
// rebuilt from them as any append does. A failed import releases the new
// sequence: the session is left as it was. A shard's buffer records its
// groups; rows are those of the served layer (cfg_). A session without the
// latent (keep_latent = 0) cannot export, but imports like an append: the
// latent rows are expanded into its groups and dropped.
#include <cstddef>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/sequence_format.hpp"
#include "core/session.hpp"

namespace gqla {

namespace {

// A contiguous host matrix [rows][cols] of dtype t.
gqla_view host_matrix(void* data, gqla_dtype t, int64_t rows, int64_t cols) {
    gqla_view v{};
    v.data = data;
    v.dtype = t;
    v.on_device = 0;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    return v;
}

// Host view of `tokens` rows of the a or b part as stored (the cache dtype;
// kr of an 8-bit GQLA cache in bf16), shaped as the backend's append and
// read_rows expect: GQA [tokens][G][dim], GQLA [tokens][dim].
gqla_view rows_view(const gqla_config& c, const SequenceShape& shape, bool part_a, void* data, int64_t tokens) {
    const gqla_dtype t = !part_a && shape.b_elem_bytes != shape.a_elem_bytes ? GQLA_DTYPE_BF16 : c.cache_dtype;
    if (c.kind != GQLA_KIND_GQA) return host_matrix(data, t, tokens, part_a ? c.latent_dim : c.rope_dim);
    const int64_t dim = part_a ? c.head_dim : c.value_dim;
    gqla_view v = host_matrix(data, t, tokens, c.num_kv_heads * dim);
    v.ndim = 3;
    v.shape[1] = c.num_kv_heads;
    v.shape[2] = dim;
    v.strides[1] = dim;
    v.strides[2] = 1;
    return v;
}

// The f32 scales [tokens][cols] of a part (8-bit caches) in aligned host
// memory: in the buffer they follow an odd number of code bytes as often as
// not, and backends read and write them as floats.
struct PartScales {
    std::vector<float> values;
    // The view of `tokens` rows; empty (data NULL) for a part without scales.
    gqla_view view(int32_t cols, int64_t tokens) {
        if (cols == 0) return gqla_view{};
        values.resize(static_cast<size_t>(tokens) * static_cast<size_t>(cols));
        return host_matrix(values.data(), GQLA_DTYPE_F32, tokens, cols);
    }
    size_t bytes() const { return values.size() * sizeof(float); }
};

// Bytes [p, p + n) at an address aligned for elements of `element` bytes:
// p itself, or a copy in `store`. A buffer's rows of 2- and 4-byte elements
// follow an odd number of e4m3 bytes as often as not (and a caller's buffer
// may start anywhere), and backends read rows as elements.
unsigned char* aligned_part(unsigned char* p, size_t n, size_t element, std::vector<uint64_t>& store) {
    if (reinterpret_cast<uintptr_t>(p) % element == 0) return p;
    store.resize((n + 7) / 8);
    std::memcpy(store.data(), p, n);
    return reinterpret_cast<unsigned char*>(store.data());
}

// Bytes of one layer's rows and scales, and the element size of each run,
// for the byte-order conversions.
struct ByteRun {
    size_t offset, bytes, element;
};
std::vector<ByteRun> layer_runs(const SequenceShape& shape, const LayerRows& rows) {
    const size_t n = static_cast<size_t>(rows.tokens);
    return {
        {rows.a_offset, n * static_cast<size_t>(shape.a_cols) * shape.a_elem_bytes, size_t(shape.a_elem_bytes)},
        {rows.a_scales_offset, n * 4 * static_cast<size_t>(shape.a_scale_cols), 4},
        {rows.b_offset, n * static_cast<size_t>(shape.b_cols) * shape.b_elem_bytes, size_t(shape.b_elem_bytes)},
        {rows.b_scales_offset, n * 4 * static_cast<size_t>(shape.b_scale_cols), 4},
    };
}

// Every scale of an 8-bit buffer must be one the library writes (finite,
// at least the smallest normal float: docs/fp8-cache.md), whatever the
// checksum says: the kernels divide by no scale but rely on that range.
void check_scales(const SequenceShape& shape, const std::vector<LayerRows>& layout, const unsigned char* in) {
    for (size_t l = 0; l < layout.size(); ++l) {
        const LayerRows& rows = layout[l];
        const struct {
            size_t offset;
            int32_t cols;
            const char* part;
        } parts[] = {{rows.a_scales_offset, shape.a_scale_cols, "a"}, {rows.b_scales_offset, shape.b_scale_cols, "b"}};
        for (const auto& p : parts)
            for (int64_t i = 0; i < rows.tokens * p.cols; ++i) {
                const uint32_t bits = load_le32(in + p.offset + 4 * static_cast<size_t>(i));
                float v;
                std::memcpy(&v, &bits, 4);
                if (!(v >= 1.17549435e-38f && v <= 3.40282347e38f))
                    fail(GQLA_ERR_INVALID_ARGUMENT,
                         "buffer: layer %zu, token %lld: %s scale %g is not one this library writes (finite, at "
                         "least 2^-126)",
                         l, static_cast<long long>(i / p.cols), p.part, static_cast<double>(v));
            }
    }
}

}  // namespace

void Session::export_sequence(gqla_seq_id id, void* buffer, size_t capacity, size_t* needed) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (needed == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "needed: NULL");
    if (cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        backend_->require_feature(GQLA_BACKEND_FEATURE_FP8_ROWS, "sequence_export of an fp8_e4m3 cache");
    const Sequence& s = find(id, "seq");
    require_latent("sequence_export");                         // the latent is what travels
    const SequenceShape shape = sequence_shape_of(full_cfg_);  // records the shard
    const size_t bytes = sequence_bytes(shape, s.lengths);
    *needed = bytes;
    if (buffer == nullptr && capacity == 0) return;  // a size query
    if (buffer == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: NULL with capacity %zu", capacity);
    if (capacity < bytes)
        fail(GQLA_ERR_CAPACITY, "capacity: %zu bytes, the sequence needs %zu (see *needed)", capacity, bytes);
    const gqla_backend_vtable& vt = backend_->vt();
    if (vt.struct_size < offsetof(gqla_backend_vtable, read_rows) + sizeof(vt.read_rows) || vt.read_rows == nullptr)
        fail(GQLA_ERR_UNSUPPORTED, "sequence_export: the %s backend cannot read cache rows back", vt.name);

    unsigned char* out = static_cast<unsigned char*>(buffer);
    write_sequence_header(shape, s.lengths, out);
    const std::vector<LayerRows> layout = sequence_layout(shape, s.lengths);
    PartScales a_scales, b_scales;
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        const LayerRows& rows = layout[static_cast<size_t>(l)];
        if (rows.tokens == 0) continue;
        gqla_read_args args{};
        args.layer = l;
        args.page_table = s.pages.data();
        args.start = 0;
        args.count = rows.tokens;
        args.a = rows_view(cfg_, shape, true, out + rows.a_offset, rows.tokens);
        args.b = rows_view(cfg_, shape, false, out + rows.b_offset, rows.tokens);
        args.a_scales = a_scales.view(shape.a_scale_cols, rows.tokens);
        args.b_scales = b_scales.view(shape.b_scale_cols, rows.tokens);
        backend_->check(vt.read_rows(backend_->ctx(), &args), "read_rows");
        if (args.a_scales.data) std::memcpy(out + rows.a_scales_offset, a_scales.values.data(), a_scales.bytes());
        if (args.b_scales.data) std::memcpy(out + rows.b_scales_offset, b_scales.values.data(), b_scales.bytes());
        for (const ByteRun& run : layer_runs(shape, rows))
            cache_elements_to_le(out + run.offset, run.bytes, run.element);
    }
    store_le64(out + bytes - kSequenceChecksumBytes, sequence_checksum(out, bytes - kSequenceChecksumBytes));
}

gqla_seq_id Session::import_sequence(const void* buffer, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (buffer == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: NULL");
    if (cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        backend_->require_feature(GQLA_BACKEND_FEATURE_FP8_ROWS, "sequence_import of an fp8_e4m3 cache");
    const unsigned char* in = static_cast<const unsigned char*>(buffer);
    const SequenceShape shape = sequence_shape_of(full_cfg_);
    const std::vector<int64_t> lengths = parse_sequence(in, size, shape);
    const std::vector<LayerRows> layout = sequence_layout(shape, lengths);
    check_scales(shape, layout, in);  // the buffer first: a damaged one is reported as such
    for (int32_t l = 0; l < cfg_.num_layers; ++l)
        if (lengths[static_cast<size_t>(l)] > 0) require_weights(l, "sequence_import");

    const gqla_seq_id next_before = next_id_;
    const gqla_seq_id id = add_locked();
    try {
        std::vector<unsigned char> host_order;  // big-endian hosts only
        PartScales a_scales, b_scales;
        std::vector<uint64_t> a_store, b_store;  // rows copied to aligned memory, where needed
        for (int32_t l = 0; l < cfg_.num_layers; ++l) {
            const LayerRows& rows = layout[static_cast<size_t>(l)];
            if (rows.tokens == 0) continue;
            const std::vector<ByteRun> runs = layer_runs(shape, rows);  // a rows, a scales, b rows, b scales
            const bool swapped = __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__;
            if (swapped) {
                host_order.assign(in + rows.a_offset, in + runs.back().offset + runs.back().bytes);
                for (const ByteRun& run : runs)  // the swap is its own inverse
                    cache_elements_to_le(host_order.data() + (run.offset - rows.a_offset), run.bytes, run.element);
            }
            // The layer's bytes at buffer offset `off`, in host order.
            auto at = [&](size_t off) {
                return swapped ? host_order.data() + (off - rows.a_offset) : const_cast<unsigned char*>(in) + off;
            };
            const gqla_view av =
                rows_view(cfg_, shape, true, aligned_part(at(runs[0].offset), runs[0].bytes, runs[0].element, a_store),
                          rows.tokens);
            const gqla_view bv =
                rows_view(cfg_, shape, false, aligned_part(at(runs[2].offset), runs[2].bytes, runs[2].element, b_store),
                          rows.tokens);
            const gqla_view scales[2] = {a_scales.view(shape.a_scale_cols, rows.tokens),
                                         b_scales.view(shape.b_scale_cols, rows.tokens)};
            if (scales[0].data) std::memcpy(a_scales.values.data(), at(rows.a_scales_offset), a_scales.bytes());
            if (scales[1].data) std::memcpy(b_scales.values.data(), at(rows.b_scales_offset), b_scales.bytes());
            append_views_locked(l, 1, &id, &rows.tokens, av, bv, "sequence_import",
                                cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3 ? scales : nullptr);
        }
    } catch (...) {
        release_locked(id);
        next_id_ = next_before;
        throw;
    }
    return id;
}

}  // namespace gqla

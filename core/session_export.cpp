// SPDX-License-Identifier: Apache-2.0
// Sequence export and import (format: sequence_format.hpp). Export reads the
// always-kept rows of every layer back from the backend; import adds a new
// sequence and appends those rows layer by layer in the cache dtype, so the
// stored elements are identical, and the expanded cache (GQLA GQA path) is
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

// Host view of `tokens` rows of the a or b part in the cache dtype, shaped as
// the backend's append and read_rows expect.
gqla_view rows_view(const gqla_config& c, bool part_a, void* data, int64_t tokens) {
    gqla_view v{};
    v.data = data;
    v.dtype = c.cache_dtype;
    v.on_device = 0;
    if (c.kind == GQLA_KIND_GQA) {
        const int64_t dim = part_a ? c.head_dim : c.value_dim;
        v.ndim = 3;
        v.shape[0] = tokens;
        v.shape[1] = c.num_kv_heads;
        v.shape[2] = dim;
        v.strides[0] = c.num_kv_heads * dim;
        v.strides[1] = dim;
        v.strides[2] = 1;
    } else {
        const int64_t dim = part_a ? c.latent_dim : c.rope_dim;
        v.ndim = 2;
        v.shape[0] = tokens;
        v.shape[1] = dim;
        v.strides[0] = dim;
        v.strides[1] = 1;
    }
    return v;
}

// Sequence files hold rows in the cache dtype without per-row scales, so an
// 8-bit cache can neither export nor import (docs/fp8-cache.md).
void refuse_fp8(const gqla_config& c, const char* fn) {
    if (c.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        fail(GQLA_ERR_UNSUPPORTED,
             "%s: not available for a session with cache_dtype fp8_e4m3 (the sequence format has no place for its "
             "per-row scales)",
             fn);
}

}  // namespace

void Session::export_sequence(gqla_seq_id id, void* buffer, size_t capacity, size_t* needed) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (needed == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "needed: NULL");
    refuse_fp8(cfg_, "sequence_export");
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
    const size_t es = dtype_size(cfg_.cache_dtype);
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        const LayerRows& rows = layout[static_cast<size_t>(l)];
        if (rows.tokens == 0) continue;
        gqla_read_args args{};
        args.layer = l;
        args.page_table = s.pages.data();
        args.start = 0;
        args.count = rows.tokens;
        args.a = rows_view(cfg_, true, out + rows.a_offset, rows.tokens);
        args.b = rows_view(cfg_, false, out + rows.b_offset, rows.tokens);
        backend_->check(vt.read_rows(backend_->ctx(), &args), "read_rows");
        cache_elements_to_le(out + rows.a_offset, rows.b_offset - rows.a_offset, es);
        cache_elements_to_le(out + rows.b_offset,
                             static_cast<size_t>(rows.tokens) * static_cast<size_t>(shape.b_cols) * es, es);
    }
    store_le64(out + bytes - kSequenceChecksumBytes, sequence_checksum(out, bytes - kSequenceChecksumBytes));
}

gqla_seq_id Session::import_sequence(const void* buffer, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (buffer == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: NULL");
    refuse_fp8(cfg_, "sequence_import");
    const unsigned char* in = static_cast<const unsigned char*>(buffer);
    const SequenceShape shape = sequence_shape_of(full_cfg_);
    const std::vector<int64_t> lengths = parse_sequence(in, size, shape);
    for (int32_t l = 0; l < cfg_.num_layers; ++l)
        if (lengths[static_cast<size_t>(l)] > 0) require_weights(l, "sequence_import");
    const std::vector<LayerRows> layout = sequence_layout(shape, lengths);
    const size_t es = dtype_size(cfg_.cache_dtype);

    const gqla_seq_id next_before = next_id_;
    const gqla_seq_id id = add_locked();
    try {
        std::vector<unsigned char> host_order;  // big-endian hosts only
        for (int32_t l = 0; l < cfg_.num_layers; ++l) {
            const LayerRows& rows = layout[static_cast<size_t>(l)];
            if (rows.tokens == 0) continue;
            const unsigned char* a = in + rows.a_offset;
            const unsigned char* b = in + rows.b_offset;
            if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) {
                const size_t n = rows.tokens * static_cast<size_t>(shape.a_cols + shape.b_cols) * es;
                host_order.assign(a, a + n);
                cache_elements_to_le(host_order.data(), n, es);  // the swap is its own inverse
                a = host_order.data();
                b = a + (rows.b_offset - rows.a_offset);
            }
            const gqla_view av = rows_view(cfg_, true, const_cast<unsigned char*>(a), rows.tokens);
            const gqla_view bv = rows_view(cfg_, false, const_cast<unsigned char*>(b), rows.tokens);
            append_views_locked(l, 1, &id, &rows.tokens, av, bv, "sequence_import");
        }
    } catch (...) {
        release_locked(id);
        next_id_ = next_before;
        throw;
    }
    return id;
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// Test double of the backend vtable (see test_core_fake_backend.hpp).
#include "test_core_fake_backend.hpp"

#include <cstdio>
#include <cstring>

namespace fake {
namespace {

Backend* g_last = nullptr;
bool g_fail_create = false;

bool should_fail(Backend* b, Op op) {
    if (b->fail_next != op) return false;
    b->fail_next = Op::None;
    b->error = "injected failure";
    return true;
}

gqla_status device_count(int32_t* out) {
    *out = 1;
    return GQLA_OK;
}

gqla_status probe(int32_t, uint32_t, gqla_probe_info* out) {
    std::memset(out, 0, sizeof(*out));
    out->struct_size = sizeof(*out);
    out->device = GQLA_DEVICE_CPU;
    std::strcpy(out->name, "fake");
    out->logical_cores = out->physical_cores = out->affinity_cores = 1;
    out->read_gbps = 50;
    out->peak_gflops_f32 = 500;
    out->peak_gflops_bf16 = 500;
    return GQLA_OK;
}

gqla_status create(const gqla_backend_desc* desc, void** out, char* err, size_t err_len) {
    if (g_fail_create) {
        g_fail_create = false;
        std::snprintf(err, err_len, "injected create failure");
        return GQLA_ERR_OUT_OF_MEMORY;
    }
    auto* b = new Backend;
    b->desc = *desc;
    b->rows.assign(static_cast<size_t>(desc->num_layers) * desc->num_pages * desc->page_size, -1.0f);
    b->weights_set.assign(static_cast<size_t>(desc->num_layers), 0);
    g_last = b;
    *out = b;
    return GQLA_OK;
}

void destroy(void* ctx) {
    if (g_last == ctx) g_last = nullptr;
    delete static_cast<Backend*>(ctx);
}

const char* error_message(void* ctx) { return static_cast<Backend*>(ctx)->error.c_str(); }

void memory_usage(void* ctx, int64_t out[4]) {
    auto* b = static_cast<Backend*>(ctx);
    out[0] = static_cast<int64_t>(b->rows.size() * sizeof(float));
    out[1] = b->expanded ? out[0] : 0;
    out[2] = 0;
    out[3] = 0;
}

gqla_status set_weights(void* ctx, int32_t layer, const gqla_view*) {
    auto* b = static_cast<Backend*>(ctx);
    if (should_fail(b, Op::SetWeights)) return GQLA_ERR_BACKEND;
    b->weights_set[static_cast<size_t>(layer)] = 1;
    return GQLA_OK;
}

gqla_status set_expanded(void* ctx, int32_t enable) {
    auto* b = static_cast<Backend*>(ctx);
    if (enable && should_fail(b, Op::SetExpanded)) return GQLA_ERR_OUT_OF_MEMORY;
    b->expanded = enable != 0;
    return GQLA_OK;
}

gqla_status append(void* ctx, const gqla_append_args* args) {
    auto* b = static_cast<Backend*>(ctx);
    ++b->append_calls;
    if (should_fail(b, Op::Append)) return GQLA_ERR_BACKEND;
    const int64_t P = b->desc.page_size;
    const float* a = static_cast<const float*>(args->a.data);
    for (int32_t i = 0; i < args->num_items; ++i) {
        const gqla_append_item& it = args->items[i];
        for (int64_t t = it.start; t < it.start + it.count; ++t) {
            int32_t page = it.page_table[t / P];
            size_t at = (static_cast<size_t>(args->layer) * b->desc.num_pages + page) * P + t % P;
            b->rows[at] = a[(it.row_offset + t - it.start) * args->a.strides[0]];
        }
    }
    return GQLA_OK;
}

gqla_status expand(void* ctx, const gqla_expand_args*) {
    auto* b = static_cast<Backend*>(ctx);
    ++b->expand_calls;
    if (should_fail(b, Op::Expand)) return GQLA_ERR_BACKEND;
    return GQLA_OK;
}

gqla_status copy_pages(void* ctx, int32_t n, const int32_t* src, const int32_t* dst) {
    auto* b = static_cast<Backend*>(ctx);
    ++b->copy_calls;
    if (should_fail(b, Op::CopyPages)) return GQLA_ERR_BACKEND;
    const size_t P = static_cast<size_t>(b->desc.page_size);
    for (int32_t l = 0; l < b->desc.num_layers; ++l)
        for (int32_t i = 0; i < n; ++i)
            std::memcpy(&b->rows[(static_cast<size_t>(l) * b->desc.num_pages + dst[i]) * P],
                        &b->rows[(static_cast<size_t>(l) * b->desc.num_pages + src[i]) * P], P * sizeof(float));
    b->copied_pages += n;
    return GQLA_OK;
}

gqla_status update_sequence(void* ctx, int32_t, const int32_t*, int32_t, const int64_t*) {
    auto* b = static_cast<Backend*>(ctx);
    ++b->update_calls;
    if (should_fail(b, Op::UpdateSequence)) return GQLA_ERR_BACKEND;
    return GQLA_OK;
}

gqla_status decode(void* ctx, const gqla_decode_args* args) {
    auto* b = static_cast<Backend*>(ctx);
    ++b->decode_calls;
    if (should_fail(b, Op::Decode)) return GQLA_ERR_BACKEND;
    b->last_path = args->path;
    b->last_q_len = args->q_len;
    b->last_lengths.clear();
    for (int32_t i = 0; i < args->batch; ++i) b->last_lengths.push_back(args->seqs[i].length);
    return GQLA_OK;
}

const gqla_backend_vtable kVtable = {
    GQLA_BACKEND_ABI_VERSION,
    sizeof(gqla_backend_vtable),
    "fake",
    GQLA_DEVICE_CPU,
    device_count,
    probe,
    create,
    destroy,
    error_message,
    memory_usage,
    set_weights,
    set_expanded,
    append,
    expand,
    copy_pages,
    update_sequence,
    decode,
    nullptr,
    nullptr,
    nullptr,
    nullptr,  // set_stream, synchronize, efficiency, read_rows
    0u,       // features
};

}  // namespace

const gqla_backend_vtable* vtable() { return &kVtable; }
const gqla_backend_vtable* vtable_fp8_without_expanded() {
    static const gqla_backend_vtable v = [] {
        gqla_backend_vtable t = kVtable;
        t.features = GQLA_BACKEND_FEATURE_FP8_CACHE;
        return t;
    }();
    return &v;
}
Backend* last_created() { return g_last; }
void fail_next_create() { g_fail_create = true; }

}  // namespace fake

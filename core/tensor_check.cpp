// SPDX-License-Identifier: Apache-2.0
#include "core/tensor_check.hpp"

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <utility>

#include "core/dtype.hpp"
#include "core/enum_value.hpp"
#include "core/error.hpp"

namespace gqla {
namespace {

const char* device_word(int d) {
    switch (d) {
        case GQLA_DEVICE_CPU:
            return "CPU";
        case GQLA_DEVICE_CUDA:
            return "CUDA";
        case GQLA_DEVICE_AUTO:
            return "AUTO";
    }
    return "unknown";
}

// "[batch, s_q, num_heads, head_dim]"
void dims_list(const TensorSpec& s, char* out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < s.ndim; ++i) {
        int n = std::snprintf(out + used, cap - used, "%s%s", i ? ", " : "[", s.dim_names[i]);
        if (n < 0 || static_cast<size_t>(n) >= cap - used) return;
        used += static_cast<size_t>(n);
    }
    if (used + 2 <= cap) std::strcat(out, "]");
}

// Whether distinct indices of `t` can address the same element. The outer
// dimensions (extent > 1), taken from the smallest stride up, must each step
// past everything the smaller ones reach; layouts that interleave without
// nesting are refused too, which no real framework produces. Extents and
// strides are known not to overflow (checked before).
bool elements_overlap(const gqla_tensor* t, int ndim) {
    int64_t strides[4];
    int64_t shapes[4];
    int n = 0;
    for (int i = 0; i < ndim; ++i) {
        if (t->shape[i] == 0) return false;  // no elements at all
        if (t->shape[i] == 1) continue;      // never steps
        strides[n] = i == ndim - 1 ? 1 : t->strides[i];
        shapes[n] = t->shape[i];
        ++n;
    }
    for (int i = 1; i < n; ++i)  // insertion sort by stride: at most 4 entries
        for (int j = i; j > 0 && strides[j] < strides[j - 1]; --j) {
            std::swap(strides[j], strides[j - 1]);
            std::swap(shapes[j], shapes[j - 1]);
        }
    int64_t reach = 0;  // largest offset the smaller-stride dimensions address
    for (int i = 0; i < n; ++i) {
        if (strides[i] <= reach) return true;
        reach += (shapes[i] - 1) * strides[i];
    }
    return false;
}

}  // namespace

gqla_view check_tensor(const gqla_tensor* t, const TensorSpec& s, const DevicePlacement& where) {
    const char* name = s.name;
    if (t == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    if (t->struct_size < kTensorV1Size)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: struct_size expected >= %zu (sizeof(gqla_tensor)), got %zu", name,
             kTensorV1Size, t->struct_size);
    // Index tensors (spec dtype I32) hold positions; every other tensor an
    // activation dtype.
    if (s.dtype == GQLA_DTYPE_I32) {
        if (enum_value(t->dtype) != GQLA_DTYPE_I32)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: dtype expected GQLA_DTYPE_I32 (%d), got %d", name, GQLA_DTYPE_I32,
                 enum_value(t->dtype));
    } else if (!dtype_valid(enum_value(t->dtype))) {
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: dtype expected GQLA_DTYPE_F32, _F16 or _BF16 (1..3), got %d", name,
             enum_value(t->dtype));
    }
    if (s.dtype != kAnyDtype && t->dtype != s.dtype)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: dtype expected %s, got %s", name,
             dtype_name(static_cast<gqla_dtype>(s.dtype)), dtype_name(t->dtype));

    int32_t on_device = 0;
    const int device = enum_value(t->device);
    if (device == GQLA_DEVICE_CPU) {
        on_device = 0;
    } else if (device == GQLA_DEVICE_CUDA) {
        if (where.device != GQLA_DEVICE_CUDA)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: device CUDA tensor given to a %s session", name,
                 device_word(where.device));
        if (t->device_index != where.index)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: CUDA device %d tensor given to a session on CUDA device %d", name,
                 t->device_index, where.index);
        on_device = 1;
    } else {
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: device expected GQLA_DEVICE_CPU or GQLA_DEVICE_CUDA, got %s (%d)", name,
             device_word(device), device);
    }

    if (t->ndim != s.ndim) {
        char dims[160];
        dims_list(s, dims, sizeof(dims));
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: expected %d dims %s, got %d", name, s.ndim, dims, t->ndim);
    }
    int64_t numel = 1;
    for (int i = 0; i < s.ndim; ++i) {
        int64_t extent = t->shape[i];
        if (extent < 0)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: shape[%d] (%s) must be >= 0, got %lld", name, i, s.dim_names[i],
                 static_cast<long long>(extent));
        if (s.shape[i] != kAnyExtent && extent != s.shape[i])
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: shape[%d] (%s) expected %lld, got %lld", name, i, s.dim_names[i],
                 static_cast<long long>(s.shape[i]), static_cast<long long>(extent));
        if (__builtin_mul_overflow(numel, extent, &numel))
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: element count overflows int64", name);
    }
    if (t->strides[s.ndim - 1] != 1 && t->shape[s.ndim - 1] > 1)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: strides[%d] (innermost) expected 1 (contiguous rows), got %lld", name,
             s.ndim - 1, static_cast<long long>(t->strides[s.ndim - 1]));
    int64_t span = 0;  // offset of the last element, in elements
    for (int i = 0; i < s.ndim; ++i) {
        int64_t stride = t->strides[i];
        if (stride < 1 && !(i == s.ndim - 1 && t->shape[i] <= 1))
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: strides[%d] (%s) expected >= 1, got %lld", name, i, s.dim_names[i],
                 static_cast<long long>(stride));
        int64_t reach;
        if (t->shape[i] > 0 && (__builtin_mul_overflow(t->shape[i] - 1, stride < 1 ? 1 : stride, &reach) ||
                                __builtin_add_overflow(span, reach, &span)))
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s: shape x strides overflows int64", name);
    }
    if (elements_overlap(t, s.ndim))
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "%s: strides overlap (two indices address the same element); expected each outer stride to step "
             "past the extent of the dimensions with smaller strides",
             name);
    int64_t bytes;
    if (__builtin_mul_overflow(span + 1, static_cast<int64_t>(dtype_size(t->dtype)), &bytes))
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: byte extent overflows int64", name);
    if (t->data == nullptr && !(numel == 0 && s.allow_empty)) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: data is NULL", name);

    gqla_view v;
    std::memset(&v, 0, sizeof(v));
    v.data = t->data;
    v.dtype = t->dtype;
    v.on_device = on_device;
    v.ndim = s.ndim;
    for (int i = 0; i < s.ndim; ++i) {
        v.shape[i] = t->shape[i];
        v.strides[i] = t->strides[i];
    }
    v.strides[s.ndim - 1] = 1;  // extent-1 innermost dims may carry any stride; the backend sees 1
    return v;
}

gqla_view check_index_tensor(const gqla_tensor* t, const IndexSpec& spec, const DevicePlacement& where) {
    const char* name = spec.name;
    if (t == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: NULL tensor", name);
    const bool uniform = spec.batch > 0;
    if (uniform && t->struct_size >= kTensorV1Size && t->ndim != 2 && t->ndim != 3)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: expected 2 dims [batch * s_q, topk] or 3 dims [batch, s_q, topk], got %d",
             name, t->ndim);
    gqla_view v;
    if (uniform && t->ndim == 3) {
        const TensorSpec s3{name,           3,    {"batch", "s_q", "topk"}, {spec.batch, spec.s_q, kAnyExtent},
                            GQLA_DTYPE_I32, false};
        v = check_tensor(t, s3, where);
        // One row per query: (b, i) must collapse into row b * s_q + i.
        int64_t row_stride = v.strides[1];
        if (v.shape[1] == 1)
            row_stride = v.strides[0];
        else if (v.shape[0] > 1 && v.strides[0] != v.shape[1] * v.strides[1])
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "%s: [batch, s_q, topk] must step batch by s_q rows (strides[0] == s_q * strides[1] = %lld), got "
                 "strides[0] = %lld",
                 name, static_cast<long long>(v.shape[1] * v.strides[1]), static_cast<long long>(v.strides[0]));
        const int64_t k = v.shape[2];
        v.ndim = 2;
        v.shape[0] = spec.rows;
        v.shape[1] = k;
        v.strides[0] = row_stride;
        v.strides[1] = 1;
        v.shape[2] = v.strides[2] = 0;
    } else {
        const TensorSpec s2{
            name, 2, {uniform ? "batch * s_q" : "sum(q_lens)", "topk"}, {spec.rows, kAnyExtent}, GQLA_DTYPE_I32, false};
        v = check_tensor(t, s2, where);
    }
    const int64_t k = v.shape[1];
    if (k < 1 || k > kMaxTopk)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s: topk (last extent) expected 1..%lld, got %lld", name,
             static_cast<long long>(kMaxTopk), static_cast<long long>(k));
    if (v.shape[0] < 2) v.strides[0] = k;  // one row: its outer stride is never used
    return v;
}

}  // namespace gqla

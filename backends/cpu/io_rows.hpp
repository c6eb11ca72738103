// SPDX-License-Identifier: Apache-2.0
// Moving rows between caller tensors (io dtype, strided views) and f32 or
// cache-dtype buffers. Only used by the non-ISA units, on short rows
// (queries, outputs, appended tokens), so scalar conversion is enough.
#pragma once

#include <cstdint>

#include "core/backend_api.h"
#include "core/dtype.hpp"

namespace gqla::cpu {

// Address of element (i0, i1, i2, 0) of a view.
inline const void* view_at(const gqla_view& v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    int64_t off = i0 * v.strides[0];
    if (v.ndim > 1) off += i1 * v.strides[1];
    if (v.ndim > 2) off += i2 * v.strides[2];
    return static_cast<const char*>(v.data) + off * static_cast<int64_t>(dtype_size(v.dtype));
}
inline void* view_at_mut(const gqla_view& v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    return const_cast<void*>(view_at(v, i0, i1, i2));
}

// dst[k] = src[k] * scale as f32.
inline void load_row_f32(const void* src, gqla_dtype t, int n, float scale, float* dst) {
    switch (t) {
        case GQLA_DTYPE_F32:
            for (int k = 0; k < n; ++k) dst[k] = static_cast<const float*>(src)[k] * scale;
            break;
        case GQLA_DTYPE_F16:
            for (int k = 0; k < n; ++k) dst[k] = f16_to_f32(static_cast<const uint16_t*>(src)[k]) * scale;
            break;
        case GQLA_DTYPE_BF16:
            for (int k = 0; k < n; ++k) dst[k] = bf16_to_f32(static_cast<const uint16_t*>(src)[k]) * scale;
            break;
        default:  // io rows are f32/f16/bf16 (checked by the core)
            for (int k = 0; k < n; ++k) dst[k] = load_as_f32(src, t, static_cast<size_t>(k)) * scale;
            break;
    }
}

// dst[k] = src[k] * mul in dtype t.
inline void store_row_f32(const float* src, float mul, void* dst, gqla_dtype t, int n) {
    switch (t) {
        case GQLA_DTYPE_F32:
            for (int k = 0; k < n; ++k) static_cast<float*>(dst)[k] = src[k] * mul;
            break;
        case GQLA_DTYPE_F16:
            for (int k = 0; k < n; ++k) static_cast<uint16_t*>(dst)[k] = f32_to_f16(src[k] * mul);
            break;
        case GQLA_DTYPE_BF16:
            for (int k = 0; k < n; ++k) static_cast<uint16_t*>(dst)[k] = f32_to_bf16(src[k] * mul);
            break;
        default:  // io rows are f32/f16/bf16 (checked by the core)
            for (int k = 0; k < n; ++k) store_from_f32(dst, t, static_cast<size_t>(k), src[k] * mul);
            break;
    }
}

// f32 rows to bf16 exactly as f32_to_bf16 rounds them (nearest even, NaN
// kept quiet), written branch-free so it vectorizes: the element-wise
// store_row_f32 costs ~1 ns per element where rows are widened per call.
inline void round_row_bf16(const float* src, uint16_t* dst, int n) {
    for (int k = 0; k < n; ++k) {
        uint32_t u;
        __builtin_memcpy(&u, src + k, 4);
        const uint32_t nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t quiet_nan = (u >> 16) | 0x40u;
        dst[k] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
    }
}

// f32 rows to dtype t as the kept expanded cache rounds them (bf16 through
// the vectorizing round_row_bf16).
inline void round_row(const float* src, void* dst, gqla_dtype t, int n) {
    if (t == GQLA_DTYPE_BF16)
        round_row_bf16(src, static_cast<uint16_t*>(dst), n);
    else
        store_row_f32(src, 1.0f, dst, t, n);
}

// Converts n elements between any two dtypes (same dtype: a copy).
inline void convert_row(const void* src, gqla_dtype st, void* dst, gqla_dtype dt, int n) {
    if (st == dt) {
        __builtin_memcpy(dst, src, static_cast<size_t>(n) * dtype_size(st));
        return;
    }
    for (int k = 0; k < n; ++k)
        store_from_f32(dst, dt, static_cast<size_t>(k), load_as_f32(src, st, static_cast<size_t>(k)));
}

}  // namespace gqla::cpu

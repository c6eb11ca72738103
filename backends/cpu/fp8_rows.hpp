// SPDX-License-Identifier: Apache-2.0
// Quantizing f32 rows into the 8-bit (e4m3) cache with one f32 scale per
// group of elements (docs/fp8-cache.md), and widening them back. Used by the
// non-ISA units on append, expansion and the transient form's inputs; the
// kernels widen in registers (attention_fp8.inl).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtype.hpp"

namespace gqla::cpu {

// The largest finite e4m3 magnitude: scale = amax / kE4m3Max.
constexpr float kE4m3Max = 448.0f;

// Scale of a group whose largest finite magnitude is amax: amax / 448, 1 for
// an all-zero (or all non-finite) group, never below the smallest normal
// float so that x / scale stays finite.
inline float fp8_scale_for(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    const float s = amax / kE4m3Max;
    return s < 1.17549435e-38f ? 1.17549435e-38f : s;
}

// Quantizes src[0..n) into dst with one scale, returned. NaN and +-inf are
// stored as NaN (e4m3 has no infinity), so a non-finite input stays
// non-finite; the scale comes from the finite elements only.
inline float quantize_row_e4m3(const float* src, int n, uint8_t* dst) {
    float amax = 0.0f;
    for (int k = 0; k < n; ++k) {
        const float a = std::fabs(src[k]);
        if (a <= 3.40282347e38f && a > amax) amax = a;
    }
    const float scale = fp8_scale_for(amax);
    for (int k = 0; k < n; ++k) {
        const float x = src[k];
        dst[k] =
            std::isfinite(x) ? f32_to_e4m3(x / scale) : static_cast<uint8_t>((std::signbit(x) ? 0x80u : 0u) | 0x7fu);
    }
    return scale;
}

// Quantizes a row of n elements in blocks of `block`, one scale each.
inline void quantize_blocks_e4m3(const float* src, int n, int block, uint8_t* dst, float* scales) {
    for (int b0 = 0, bi = 0; b0 < n; b0 += block, ++bi)
        scales[bi] = quantize_row_e4m3(src + b0, n - b0 < block ? n - b0 : block, dst + b0);
}

// dst[k] = e4m3 src[k] * scales[k / block].
inline void dequantize_blocks_e4m3(const uint8_t* src, int n, const float* scales, int block, float* dst) {
    for (int k = 0; k < n; ++k) dst[k] = e4m3_to_f32(src[k]) * scales[k / block];
}

}  // namespace gqla::cpu

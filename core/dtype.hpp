// SPDX-License-Identifier: Apache-2.0
// Scalar conversions between f32 and the 16-bit storage types, shared by the
// core, the CPU backend, the reference and the tests. Round-to-nearest-even,
// NaN kept quiet; no ISA requirement (the SIMD kernels convert in registers).
#pragma once

#include <cstdint>
#include <cstring>
#include <cstddef>

#include "gqla/gqla.h"

namespace gqla {

inline size_t dtype_size(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32: return 4;
        case GQLA_DTYPE_F16: return 2;
        case GQLA_DTYPE_BF16: return 2;
    }
    return 0;
}

inline bool dtype_valid(int t) { return t == GQLA_DTYPE_F32 || t == GQLA_DTYPE_F16 || t == GQLA_DTYPE_BF16; }

inline const char* dtype_name(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32: return "f32";
        case GQLA_DTYPE_F16: return "f16";
        case GQLA_DTYPE_BF16: return "bf16";
    }
    return "?";
}

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (absx < 0x38800000u) {                                              // subnormal or zero
        if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
        uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
        int shift = 113 - static_cast<int>(absx >> 23) + 13;  // 126 - exp + 14 - 1
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t h = ((absx - 0x38000000u) >> 13);
    uint32_t rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
}

inline float f16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        float f = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
        return sign ? -f : f;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Load element i of a buffer of dtype t as f32.
inline float load_as_f32(const void* p, gqla_dtype t, size_t i) {
    switch (t) {
        case GQLA_DTYPE_F32: return static_cast<const float*>(p)[i];
        case GQLA_DTYPE_F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case GQLA_DTYPE_BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    }
    return 0.0f;
}

// Store f32 v as element i of a buffer of dtype t.
inline void store_from_f32(void* p, gqla_dtype t, size_t i, float v) {
    switch (t) {
        case GQLA_DTYPE_F32: static_cast<float*>(p)[i] = v; break;
        case GQLA_DTYPE_F16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
        case GQLA_DTYPE_BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
    }
}

}  // namespace gqla

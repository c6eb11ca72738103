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
        case GQLA_DTYPE_F32:
            return 4;
        case GQLA_DTYPE_F16:
            return 2;
        case GQLA_DTYPE_BF16:
            return 2;
        case GQLA_DTYPE_FP8_E4M3:
            return 1;
        case GQLA_DTYPE_I32:
            return 4;
    }
    return 0;
}

// Dtypes of activations (io_dtype, q/o/k/v/c/kr, weights).
inline bool dtype_valid(int t) { return t == GQLA_DTYPE_F32 || t == GQLA_DTYPE_F16 || t == GQLA_DTYPE_BF16; }
// Dtypes a cache may be stored in.
inline bool cache_dtype_valid(int t) { return dtype_valid(t) || t == GQLA_DTYPE_FP8_E4M3; }

inline const char* dtype_name(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return "f32";
        case GQLA_DTYPE_F16:
            return "f16";
        case GQLA_DTYPE_BF16:
            return "bf16";
        case GQLA_DTYPE_FP8_E4M3:
            return "fp8_e4m3";
        case GQLA_DTYPE_I32:
            return "i32";
    }
    return "?";
}

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

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
    if (absx < 0x38800000u) {                                               // subnormal or zero
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

// 8-bit float e4m3 (OCP "FN": bias 7, max 448, no inf; S.1111.111 is NaN).
// Round to nearest even; saturating: anything beyond +-448 (inf too) is
// +-448, so a cache never stores an infinity; NaN stays NaN.
inline uint8_t f32_to_e4m3(float f) {
    const uint32_t u = f32_bits(f);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
    if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448
    if (a < 0x3c800000u) {                                            // below 2^-6: m * 2^-9
        // m = round_even(|f| * 512), 0..8 (8 is the smallest normal, code 0x08).
        const float x = bits_f32(a) * 512.0f;
        uint32_t m = static_cast<uint32_t>(x);
        const float rem = x - static_cast<float>(m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
        return static_cast<uint8_t>(sign | m);
    }
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // round to 3 mantissa bits
    uint32_t code = (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u);
    if (code > 0x7eu) code = 0x7eu;
    return static_cast<uint8_t>(sign | code);
}

inline float e4m3_to_f32(uint8_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x80u) << 24;
    const uint32_t e = (h >> 3) & 15u, m = h & 7u;
    if (e == 15u && m == 7u) return bits_f32(sign | 0x7fc00000u);
    if (e == 0u) {
        const float v = static_cast<float>(m) * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// Load element i of a buffer of dtype t as f32 (an 8-bit element unscaled).
inline float load_as_f32(const void* p, gqla_dtype t, size_t i) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return static_cast<const float*>(p)[i];
        case GQLA_DTYPE_F16:
            return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case GQLA_DTYPE_BF16:
            return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
        case GQLA_DTYPE_FP8_E4M3:
            return e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
        case GQLA_DTYPE_I32:
            return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    }
    return 0.0f;
}

// Store f32 v as element i of a buffer of dtype t.
inline void store_from_f32(void* p, gqla_dtype t, size_t i, float v) {
    switch (t) {
        case GQLA_DTYPE_F32:
            static_cast<float*>(p)[i] = v;
            break;
        case GQLA_DTYPE_F16:
            static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
            break;
        case GQLA_DTYPE_BF16:
            static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
            break;
        case GQLA_DTYPE_FP8_E4M3:
            static_cast<uint8_t*>(p)[i] = f32_to_e4m3(v);
            break;
        case GQLA_DTYPE_I32:
            static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
            break;
    }
}

}  // namespace gqla

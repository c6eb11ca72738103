// SPDX-License-Identifier: Apache-2.0
// e4m3 (8-bit float, docs/fp8-cache.md) on the device: the quantization of
// appended rows (scale = amax / 448, round to nearest even, saturating), the
// exact widening of stored bytes into f16 for the tensor cores, and their
// widening with the row's scale into bf16 (the prefill kernel's 8-bit tiles
// and the widened pages of fp8_widening.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace gqla::cuda {

constexpr float kE4m3Max = 448.0f;
constexpr float kSmallestNormalF32 = 1.17549435e-38f;

// Scale of a row group whose largest finite magnitude is amax (the rule of
// backends/cpu/fp8_rows.hpp): amax / 448, 1 for a group with no finite
// non-zero element, never below the smallest normal float.
__device__ __forceinline__ float fp8_scale_for(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    return fmaxf(amax / kE4m3Max, kSmallestNormalF32);
}

// x / scale as e4m3 (IEEE division, as the host rule divides); a NaN or an
// infinity is stored as NaN of its sign (e4m3 has no infinity).
__device__ __forceinline__ uint8_t quantize_e4m3(float x, float scale) {
    if (!isfinite(x)) return static_cast<uint8_t>((signbit(x) ? 0x80u : 0u) | 0x7fu);
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// Queries against an 8-bit cache run in f16: a row whose largest finite
// magnitude is amax is divided by 2^e, e from here, which puts it in
// [2^14, 2^15) (f16 holds any query that way, with its full precision);
// 0 for a row of zeros.
__device__ __forceinline__ int f16_query_exponent(float amax) {
    int e = 0;
    if (amax > 0.f) {
        frexpf(amax, &e);  // amax < 2^e
        e -= 15;
    }
    return e;
}

// The power of two 2^v_exp an 8-bit-cache kernel's running outputs are
// divided by, so that probabilities times value scales stay <= 1 in f16
// (v_exp_max: the largest so far); the outputs carry it like the softmax
// maximum.
struct ValuePower {
    int v_exp = 0, v_exp_max = -1000;

    // Moves to a chunk whose largest value scale is vmax: a power 2^ev above
    // it (at least 2^-64 of the largest so far, so that the outputs divided
    // by it stay far inside f32's range; a chunk of zero scales, slots past
    // the end, keeps the power). Returns the factor the outputs so far are
    // rescaled by; *inv = 2^-ev multiplies each probability with its
    // token's value scale.
    __device__ __forceinline__ float advance(float vmax, float* inv) {
        int ev = v_exp;
        if (vmax > 0.f) {
            frexpf(vmax, &ev);  // vmax < 2^ev
            ev = max(ev, v_exp_max - 64);
        }
        v_exp_max = max(v_exp_max, ev);
        const float rescale = ldexpf(1.f, v_exp - ev);
        *inv = ldexpf(1.f, -ev);
        v_exp = ev;
        return rescale;
    }
};

// 8 stored bytes (8-byte aligned) -> 8 f16 (one 16-byte store, aligned),
// one cvt.rn.f16x2.e4m3x2 per pair: exact, subnormals and NaN included.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
__device__ __forceinline__ void widen8_e4m3_to_f16(const unsigned char* src, __half* dst) {
    const uint2 in = *reinterpret_cast<const uint2*>(src);
    *reinterpret_cast<uint4*>(dst) = make_uint4(
        e4m3x2_to_f16x2(static_cast<uint16_t>(in.x & 0xffffu)), e4m3x2_to_f16x2(static_cast<uint16_t>(in.x >> 16)),
        e4m3x2_to_f16x2(static_cast<uint16_t>(in.y & 0xffffu)), e4m3x2_to_f16x2(static_cast<uint16_t>(in.y >> 16)));
}

// 8 stored bytes times their row's scale -> 8 bf16 (e4m3 -> f16 is exact,
// then one f32 product and one rounding per element: the bf16 nearest to
// the dequantized value; NaN stays NaN).
__device__ __forceinline__ uint4 widen8_e4m3_scaled(uint2 bytes, float scale) {
    uint32_t out[4];
    const uint32_t words[2] = {bytes.x, bytes.y};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
        const uint32_t f16x2 = e4m3x2_to_f16x2(static_cast<uint16_t>(words[h >> 1] >> (16 * (h & 1))));
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&f16x2));
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
        out[h] = *reinterpret_cast<const uint32_t*>(&b);
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// Device-side element access by run-time dtype, for kernels that touch each
// element once (staging, scatter, Q loads, outputs): one instantiation serves
// every dtype. The hot loops are templated on the 16-bit type instead.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla::cuda {

__device__ __forceinline__ float load_elem(const void* p, int dtype, int64_t i) {
    if (dtype == GQLA_DTYPE_F32) return static_cast<const float*>(p)[i];
    if (dtype == GQLA_DTYPE_F16) return __half2float(static_cast<const __half*>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

// Two floats as one register of packed 16-bit values (lo in the low half):
// an MMA operand built from f32 accumulators, or half of a vector store.
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, __nv_bfloat16*) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, __half*) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Eight floats as 8 packed 16-bit values (one 16-byte store).
template <typename T>
__device__ __forceinline__ uint4 pack_eight(const float v[8]) {
    return uint4{pack_pair(v[0], v[1], static_cast<T*>(nullptr)), pack_pair(v[2], v[3], static_cast<T*>(nullptr)),
                 pack_pair(v[4], v[5], static_cast<T*>(nullptr)), pack_pair(v[6], v[7], static_cast<T*>(nullptr))};
}

// Elements [i, i + n) (n <= 8) as floats, zeros past n. Whole 8-element
// pieces at 16-byte-aligned addresses take one or two vector loads, so a
// prologue that stages a few query rows costs one memory latency instead of
// one per element.
__device__ __forceinline__ void load_elems8(const void* p, int dtype, int64_t i, int n, float v[8]) {
    if (dtype == GQLA_DTYPE_F32) {
        const float* src = static_cast<const float*>(p) + i;
        if (n == 8 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
            const float4 a = *reinterpret_cast<const float4*>(src), b = *reinterpret_cast<const float4*>(src + 4);
            v[0] = a.x;
            v[1] = a.y;
            v[2] = a.z;
            v[3] = a.w;
            v[4] = b.x;
            v[5] = b.y;
            v[6] = b.z;
            v[7] = b.w;
            return;
        }
    } else {
        const uint16_t* src = static_cast<const uint16_t*>(p) + i;
        if (n == 8 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
            const uint4 u = *reinterpret_cast<const uint4*>(src);
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (dtype == GQLA_DTYPE_F16) {
                    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
                    v[2 * k] = f.x;
                    v[2 * k + 1] = f.y;
                } else {
                    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]));
                    v[2 * k] = f.x;
                    v[2 * k + 1] = f.y;
                }
            }
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = e < n ? load_elem(p, dtype, i + e) : 0.f;
}

__device__ __forceinline__ void store_elem(void* p, int dtype, int64_t i, float v) {
    if (dtype == GQLA_DTYPE_F32)
        static_cast<float*>(p)[i] = v;
    else if (dtype == GQLA_DTYPE_F16)
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    else
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// Stores elements i and i + 1: one 8- or 4-byte store where aligned (an MMA
// accumulator fragment holds column pairs), two element stores otherwise.
__device__ __forceinline__ void store_pair(void* p, int dtype, int64_t i, float lo, float hi) {
    if (dtype == GQLA_DTYPE_F32) {
        float* dst = static_cast<float*>(p) + i;
        if ((reinterpret_cast<uintptr_t>(dst) & 7) == 0) {
            *reinterpret_cast<float2*>(dst) = make_float2(lo, hi);
            return;
        }
    } else {
        uint16_t* dst = static_cast<uint16_t*>(p) + i;
        if ((reinterpret_cast<uintptr_t>(dst) & 3) == 0) {
            *reinterpret_cast<uint32_t*>(dst) = dtype == GQLA_DTYPE_F16
                                                    ? pack_pair(lo, hi, static_cast<__half*>(nullptr))
                                                    : pack_pair(lo, hi, static_cast<__nv_bfloat16*>(nullptr));
            return;
        }
    }
    store_elem(p, dtype, i, lo);
    store_elem(p, dtype, i + 1, hi);
}

// Stores v[0, n) (n <= 8) at elements [i, i + n): one or two vector stores
// for a whole piece at a 16-byte-aligned address, element stores otherwise.
__device__ __forceinline__ void store_elems8(void* p, int dtype, int64_t i, int n, const float v[8]) {
    if (dtype == GQLA_DTYPE_F32) {
        float* dst = static_cast<float*>(p) + i;
        if (n == 8 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
            reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
            reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
            return;
        }
    } else {
        uint16_t* dst = static_cast<uint16_t*>(p) + i;
        if (n == 8 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
            *reinterpret_cast<uint4*>(dst) =
                dtype == GQLA_DTYPE_F16 ? pack_eight<__half>(v) : pack_eight<__nv_bfloat16>(v);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
        if (e < n) store_elem(p, dtype, i + e, v[e]);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

}  // namespace gqla::cuda

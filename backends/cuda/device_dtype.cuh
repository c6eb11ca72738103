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

__device__ __forceinline__ void store_elem(void* p, int dtype, int64_t i, float v) {
    if (dtype == GQLA_DTYPE_F32) static_cast<float*>(p)[i] = v;
    else if (dtype == GQLA_DTYPE_F16) static_cast<__half*>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

}  // namespace gqla::cuda

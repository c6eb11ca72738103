// SPDX-License-Identifier: Apache-2.0
// gqla_tensor_init: a contiguous row-major host tensor descriptor.
#include <cstring>

#include "capi/src/api_guard.hpp"
#include "core/dtype.hpp"
#include "core/enum_value.hpp"

extern "C" gqla_status gqla_tensor_init(gqla_tensor* t, void* data, gqla_dtype dtype, int32_t ndim,
                                        const int64_t* shape) {
    return gqla::capi::guarded("gqla_tensor_init", [&] {
        using gqla::fail;
        gqla::capi::require_non_null(t, "t");
        gqla::capi::require_non_null(shape, "shape");
        if (ndim < 1 || ndim > GQLA_MAX_DIMS)
            fail(GQLA_ERR_INVALID_ARGUMENT, "ndim: expected 1..%d, got %d", GQLA_MAX_DIMS, ndim);
        // Activations are f32/f16/bf16; I32 is the dtype of index tensors (sparse attention).
        if (!gqla::dtype_valid(gqla::enum_value(dtype)) && gqla::enum_value(dtype) != GQLA_DTYPE_I32)
            fail(GQLA_ERR_INVALID_ARGUMENT, "dtype: expected GQLA_DTYPE_F32, _F16, _BF16 (1..3) or _I32 (5), got %d",
                 gqla::enum_value(dtype));
        int64_t strides[GQLA_MAX_DIMS] = {0};
        int64_t running = 1;
        for (int i = ndim - 1; i >= 0; --i) {
            if (shape[i] < 0)
                fail(GQLA_ERR_INVALID_ARGUMENT, "shape[%d]: expected >= 0, got %lld", i,
                     static_cast<long long>(shape[i]));
            strides[i] = running;
            int64_t extent = shape[i] > 0 ? shape[i] : 1;
            if (__builtin_mul_overflow(running, extent, &running))
                fail(GQLA_ERR_INVALID_ARGUMENT, "shape: element count overflows int64");
        }
        gqla_tensor out;
        std::memset(&out, 0, sizeof(out));
        out.struct_size = sizeof(gqla_tensor);
        out.data = data;
        out.dtype = dtype;
        out.device = GQLA_DEVICE_CPU;
        out.device_index = 0;
        out.ndim = ndim;
        for (int i = 0; i < ndim; ++i) {
            out.shape[i] = shape[i];
            out.strides[i] = strides[i];
        }
        *t = out;
    });
}

// SPDX-License-Identifier: Apache-2.0
#include "tests/fuzz/fuzz_inputs.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"

namespace fuzz {

size_t dtype_bytes(gqla_dtype t) { return gqla::dtype_size(t); }

TypedBuffer::TypedBuffer(gqla_dtype t, size_t n) : dtype(t), bytes(n * gqla::dtype_size(t)) {
    for (size_t i = 0; i < n; ++i) set(i, t == GQLA_DTYPE_I32 ? double(INT32_MIN) : std::nan(""));
}

size_t TypedBuffer::size() const { return bytes.size() / gqla::dtype_size(dtype); }

// I32 elements (index tensors) directly: through f32 they would lose
// positions above 2^24, and a NaN converted to int is undefined.
double TypedBuffer::get(size_t i) const {
    if (dtype == GQLA_DTYPE_I32) {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        return v;
    }
    return gqla::load_as_f32(bytes.data(), dtype, i);
}

void TypedBuffer::set(size_t i, double v) {
    if (dtype == GQLA_DTYPE_I32) {
        const double w = std::isnan(v) ? double(INT32_MIN) : std::nearbyint(v);
        const int32_t x = static_cast<int32_t>(std::clamp(w, double(INT32_MIN), double(INT32_MAX)));
        std::memcpy(bytes.data() + 4 * i, &x, 4);
        return;
    }
    gqla::store_from_f32(bytes.data(), dtype, i, static_cast<float>(v));
}

gqla_tensor strided_tensor(gqla_dtype dtype, const std::vector<int64_t>& shape, const std::vector<int>& order,
                           const std::vector<int64_t>& pad, int64_t* span) {
    gqla_tensor t;
    std::memset(&t, 0, sizeof(t));
    t.struct_size = sizeof(t);
    t.dtype = dtype;
    t.device = GQLA_DEVICE_CPU;
    t.ndim = static_cast<int32_t>(shape.size());
    const int inner = t.ndim - 1;
    for (int i = 0; i < t.ndim; ++i) t.shape[i] = shape[static_cast<size_t>(i)];
    t.strides[inner] = 1;
    int64_t block = shape[static_cast<size_t>(inner)] + pad[static_cast<size_t>(inner)];
    for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) {  // innermost of the outer dims first
        const int d = order[static_cast<size_t>(k)];
        t.strides[d] = block;
        // An empty dimension still steps by at least one element (strides >= 1).
        block = std::max<int64_t>(block * shape[static_cast<size_t>(d)] + pad[static_cast<size_t>(d)], 1);
    }
    *span = block;
    return t;
}

int64_t element_offset(const gqla_tensor& t, const int64_t* index) {
    int64_t off = 0;
    for (int i = 0; i < t.ndim; ++i) off += index[i] * t.strides[i];
    return off;
}

}  // namespace fuzz

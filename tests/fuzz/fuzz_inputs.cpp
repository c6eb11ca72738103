// SPDX-License-Identifier: Apache-2.0
#include "tests/fuzz/fuzz_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"

namespace fuzz {

size_t dtype_bytes(gqla_dtype t) { return gqla::dtype_size(t); }

TypedBuffer::TypedBuffer(gqla_dtype t, size_t n) : dtype(t), bytes(n * gqla::dtype_size(t)) {
    for (size_t i = 0; i < n; ++i) set(i, std::nan(""));
}

size_t TypedBuffer::size() const { return bytes.size() / gqla::dtype_size(dtype); }

double TypedBuffer::get(size_t i) const { return gqla::load_as_f32(bytes.data(), dtype, i); }

void TypedBuffer::set(size_t i, double v) { gqla::store_from_f32(bytes.data(), dtype, i, static_cast<float>(v)); }

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

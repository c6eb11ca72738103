// SPDX-License-Identifier: Apache-2.0
// Host buffers in any gqla dtype and tensor descriptors over them, shared by
// the fuzzers: values are stored in the buffer's dtype and read back exactly,
// so the reference sees the numbers gqla saw.
#pragma once

#include <cstdint>
#include <vector>

#include "gqla/gqla.h"

namespace fuzz {

struct TypedBuffer {
    gqla_dtype dtype = GQLA_DTYPE_F32;
    std::vector<unsigned char> bytes;

    TypedBuffer() = default;
    TypedBuffer(gqla_dtype t, size_t n);  // n elements, all NaN (I32: INT32_MIN)
    size_t size() const;
    void* data() { return bytes.data(); }
    double get(size_t i) const;
    void set(size_t i, double v);  // rounds to the dtype (I32: to the nearest int32, saturating)
};

size_t dtype_bytes(gqla_dtype t);

// A host tensor of `shape` whose outer dimensions lie in memory in `order`
// (outermost first, a permutation of 0..ndim-2) with `pad` unused elements
// after each dimension's block; the innermost dimension stays contiguous.
// Returns the descriptor (data NULL) and, in *span, the elements it needs.
gqla_tensor strided_tensor(gqla_dtype dtype, const std::vector<int64_t>& shape, const std::vector<int>& order,
                           const std::vector<int64_t>& pad, int64_t* span);

// Offset in elements of the element at `index` (one per dim).
int64_t element_offset(const gqla_tensor& t, const int64_t* index);

}  // namespace fuzz

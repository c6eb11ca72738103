// SPDX-License-Identifier: Apache-2.0
// Instantiation (ring sizes x key/value widths) of the narrow-group decode
// kernel over 8-bit caches (attention_narrow_fp8_kernel.cuh); its planning
// and launch share the 16-bit kernel's glue (attention_narrow.cu).
#include "attention_kernels.hpp"
#include "attention_narrow_fp8_kernel.cuh"

namespace gqla::cuda {

static_assert(kNarrowSlotsMin == 3 && kNarrowSlotsMax == 5, "instantiate every ring size below");

namespace {

template <int DK, int DV>
const void* narrow_fp8_kernel_of(int slots) {
    return slots == 3   ? reinterpret_cast<const void*>(&attention_narrow_fp8_kernel<3, DK, DV>)
           : slots == 4 ? reinterpret_cast<const void*>(&attention_narrow_fp8_kernel<4, DK, DV>)
                        : reinterpret_cast<const void*>(&attention_narrow_fp8_kernel<5, DK, DV>);
}

}  // namespace

// Sparse launches included: their rows are gathered one by one through the
// list (narrow::page_of, cta_token), with each row's scale beside it.
bool narrow_kernel_reads_fp8(const AttentionParams& p, int max_rows) {
    return p.k2.dim == 0 && p.k1.dim % 16 == 0 && p.v.dim % 16 == 0 && p.k1.dim <= kNarrowMaxDk &&
           p.v.dim <= kNarrowMaxDv && !p.v_aliases_k1 && p.rows <= max_rows;
}

// Fixed widths for GQA's 128-wide heads only (the others read theirs at run time).
const void* narrow_fp8_kernel(int slots, NarrowDims dims) {
    return dims == NarrowDims::K128V128 ? narrow_fp8_kernel_of<128, 128>(slots) : narrow_fp8_kernel_of<0, 0>(slots);
}

}  // namespace gqla::cuda

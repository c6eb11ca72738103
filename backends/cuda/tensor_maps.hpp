// SPDX-License-Identifier: Apache-2.0
// TMA tensor maps of the cache pools, for the kernels that load whole tiles
// with the tensor memory accelerator (compute capability 9.0).
#pragma once

#include <cuda.h>  // CUtensorMap (a plain struct: nothing links libcuda)

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla::cuda {

// Map of `rows` token rows of `dim` 16-bit elements, `row_stride` elements
// apart, starting at `base`, loaded as 128B-swizzled boxes of 64 columns x
// box_rows rows. Each box row is one 128-byte line, and the L2 fetches just
// that line: promoting to 256 bytes (H200, bf16, same runs) made GQA decode
// at B=64 T=4096 7% slower (278.6 against 259.4 us) and the absorb path at
// H=32 3% slower (331 against 321 us); H=128 was within 1% either way.
// False for other dtypes than bf16/f16, where the driver lacks
// cuTensorMapEncodeTiled (it is reached through the runtime, so the module
// needs no libcuda link) or where it rejects the geometry.
bool encode_row_map(CUtensorMap* map, gqla_dtype cache, const void* base, int32_t dim, int64_t rows, int64_t row_stride,
                    int box_rows);

}  // namespace gqla::cuda

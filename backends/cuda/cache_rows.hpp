// SPDX-License-Identifier: Apache-2.0
// Writing token rows into the paged pools, and building expanded (KC | VE)
// rows from the latent pool. Shared by appends, the kept expanded cache
// (path switch, new weights) and the transient GQA form of one call, so that
// every expanded row is computed and rounded into the cache dtype the same way.
#pragma once

#include <cstdint>

#include "core/backend_api.h"
#include "session.hpp"

namespace gqla::cuda {

// rows x groups x dim elements of `src` (a device view; row r at
// r * strides[0], group g `src_group_stride` further, first column
// `src_col_offset_elems` in) -> pool `layer` at the token indices `tokens`
// (page * page_size + slot, device memory), converted to the pool's format
// (8-bit pools: quantized with scales, one per row or per block of it; or,
// for stored rows of dtype FP8_E4M3, copied with their `src_scales`: device
// memory, [rows][groups][blocks] f32).
void scatter_into(Session& s, const gqla_view& src, int64_t src_group_stride, int64_t src_col_offset_elems,
                  const DeviceBuffer& pool, int layer, int64_t groups, int32_t dim, PoolFormat format,
                  const int64_t* tokens, int32_t rows, const float* src_scales = nullptr);

// Where expanded rows go: a KC pool, a VE pool and the layer inside both.
// The kept expanded cache writes layer l into its layer l; the transient
// pool of the GQA_TRANSIENT form holds one layer, so every layer lands in its
// layer 0.
struct ExpandedPools {
    const DeviceBuffer* kc;
    const DeviceBuffer* ve;
    int layer;
    PoolFormat format;  // of both pools
};

// Latent rows given as a device tensor instead of read from the latent pool:
// row i at data + i * row_stride elements (a session without the latent
// pool expands its appended rows from the staged input).
struct LatentRows {
    const void* data = nullptr;
    gqla_dtype dtype = GQLA_DTYPE_F32;
    int64_t row_stride = 0;
};

// Expanded rows of `layer` for `rows` tokens (device token indices, at most
// s.expand_chunk of them): E [rows][G*(d_c+d_v)] = C [rows][r] . W_UKV^T with
// the latent rows in the projection dtype (the cache dtype) and products
// accumulated in f32, rounded once to that dtype, then scattered per group
// into dst. The latent rows are the pool's at those tokens, or `given`'s
// first `rows` rows, rounded to the cache dtype first so that both give the
// same expanded rows. Throws INVALID_STATE when the layer has no weights.
void expand_latent_chunk(Session& s, int layer, const int64_t* d_tokens, int32_t rows, const ExpandedPools& dst,
                         const LatentRows* given = nullptr);

// The same for any number of tokens, in chunks of s.expand_chunk.
void expand_latent_rows(Session& s, int layer, const int64_t* d_tokens, int64_t n, const ExpandedPools& dst,
                        const LatentRows* given = nullptr);

}  // namespace gqla::cuda

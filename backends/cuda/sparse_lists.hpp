// SPDX-License-Identifier: Apache-2.0
// Sparse (top-k) calls, docs/sparse-attention.md: before the attention
// launches, one pass turns each query row's list of positions into the
// tokens the kernels gather, so that the kernels see a sparse row as a
// dense sequence of `count` tokens and keep every dense code path.
#pragma once

#include <cstdint>

#include "core/backend_api.h"
#include "session.hpp"

namespace gqla::cuda {

// For every query row of the uniform batch `a` (row b * q_len + qi of
// a.indices, device memory): the visible entries of its list
// (0 <= j <= length - q_len + qi; -1 padding, invisible and out-of-range
// positions dropped, repeats kept), in list order, as page << 32 | slot at
// s.sparse_tokens + row * a.topk, and their number at s.sparse_counts + row.
// decode() sized both buffers for the whole call (growing them only when a
// call needs more, so a captured call must follow one of at least its size);
// this allocates and synchronizes nothing.
void compact_sparse_lists(Session& s, const gqla_decode_args& a);

// After compact_sparse_lists: the `topk` entries of each of the first `rows`
// query rows as pool row indices (page * page_size + slot) at out[row *
// topk + k], device memory; entries past a row's count name one of its kept
// tokens (pool row 0 for a row with none), so that the transient form can
// expand exactly out[0 .. rows * topk) whatever the counts (known only on the
// device).
void write_listed_pool_rows(Session& s, int64_t rows, int32_t topk, int64_t* out);

}  // namespace gqla::cuda

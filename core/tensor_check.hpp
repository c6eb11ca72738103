// SPDX-License-Identifier: Apache-2.0
// Checks of a gqla_tensor crossing the ABI against what a call expects, and
// its conversion to the backend's gqla_view. Allocates nothing unless it
// fails (it runs on the decode path).
#pragma once

#include <cstdint>

#include "core/backend_api.h"

namespace gqla {

// Where a session runs: decides which tensor devices it accepts.
struct DevicePlacement {
    gqla_device_type device;  // CPU or CUDA (resolved)
    int32_t index;
};

struct TensorSpec {
    const char* name;          // argument name used in messages, e.g. "q"
    int32_t ndim;              // exact (1..4)
    const char* dim_names[4];  // e.g. {"batch", "s_q", "num_heads", "head_dim"}
    int64_t shape[4];          // exact extents; kAnyExtent: any >= 0
    int dtype;                 // exact gqla_dtype, or kAnyDtype
    bool allow_empty;          // a zero-size tensor may have data == NULL
};

constexpr int64_t kAnyExtent = -1;
constexpr int kAnyDtype = 0;

// Throws INVALID_ARGUMENT naming spec.name and what was expected.
gqla_view check_tensor(const gqla_tensor* t, const TensorSpec& spec, const DevicePlacement& where);

// Most positions one query may list in a sparse call (the last extent of
// `indices`): far above any indexer's top-k (DeepSeek-V3.2: 2048), small
// enough that topk * total_q entries never overflow anything downstream.
constexpr int64_t kMaxTopk = int64_t(1) << 20;

// What an index tensor (sparse attention) must look like: `rows` query
// rows; uniform calls (batch > 0) also accept [batch, s_q, topk].
struct IndexSpec {
    const char* name;  // "indices"
    int64_t rows;      // total query rows of the call
    int64_t batch;     // uniform calls: B (0: ragged, only [rows, topk])
    int64_t s_q;       // uniform calls: s_q
};

// Checks an I32 [rows, topk] (or uniform [batch, s_q, topk]) tensor with
// 1 <= topk <= kMaxTopk, innermost stride 1, on a device the session accepts,
// and returns it as a 2-d view [rows, topk] (one row per query, in the
// order of q's rows). Throws INVALID_ARGUMENT naming spec.name.
gqla_view check_index_tensor(const gqla_tensor* t, const IndexSpec& spec, const DevicePlacement& where);

// The minimum struct_size a v1 gqla_tensor has.
constexpr size_t kTensorV1Size = sizeof(gqla_tensor);

}  // namespace gqla

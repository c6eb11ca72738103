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
    const char* name;              // argument name used in messages, e.g. "q"
    int32_t ndim;                  // exact (1..4)
    const char* dim_names[4];      // e.g. {"batch", "s_q", "num_heads", "head_dim"}
    int64_t shape[4];              // exact extents; kAnyExtent: any >= 0
    int dtype;                     // exact gqla_dtype, or kAnyDtype
    bool allow_empty;              // a zero-size tensor may have data == NULL
};

constexpr int64_t kAnyExtent = -1;
constexpr int kAnyDtype = 0;

// Throws INVALID_ARGUMENT naming spec.name and what was expected.
gqla_view check_tensor(const gqla_tensor* t, const TensorSpec& spec, const DevicePlacement& where);

// The minimum struct_size a v1 gqla_tensor has.
constexpr size_t kTensorV1Size = sizeof(gqla_tensor);

}  // namespace gqla

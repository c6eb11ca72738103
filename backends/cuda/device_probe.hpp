// SPDX-License-Identifier: Apache-2.0
// CUDA device discovery and probe (see probe.cpp).
#pragma once

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla::cuda {

int32_t visible_device_count();
// Throws BackendError.
void probe_device(int32_t index, uint32_t flags, gqla_probe_info* out);

}  // namespace gqla::cuda

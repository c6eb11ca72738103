// SPDX-License-Identifier: Apache-2.0
// Which compute backend serves which device. The CPU backend is linked in;
// the CUDA backend is a module (libgqla_cuda.so) loaded with dlopen on first
// use, once per process, never unloaded:
//   1. $GQLA_CUDA_MODULE (a path) when set, else
//   2. libgqla_cuda.so.1 / libgqla_cuda.so in the directory of libgqla.so, else
//   3. the same names through the dynamic loader's default search path.
#pragma once

#include <string>

#include "core/backend_api.h"

namespace gqla {

// The CUDA module's vtable, or nullptr when it cannot be used; then *why_not
// (when given) says why: module not found, entry point missing, ABI mismatch.
const gqla_backend_vtable* cuda_backend(std::string* why_not = nullptr);

// Device AUTO resolved: $GQLA_DEVICE=cpu|cuda forces the choice; otherwise
// CUDA when the module loads and at least one GPU is visible, else CPU.
// CPU/CUDA pass through unchanged. Throws INVALID_ARGUMENT for a bad
// $GQLA_DEVICE value and UNSUPPORTED when $GQLA_DEVICE=cuda cannot be served.
gqla_device_type resolve_device(gqla_device_type requested);

// The vtable that drives `device` (CPU or CUDA, already resolved) with device
// ordinal `index`. Throws UNSUPPORTED saying why CUDA cannot be used (module
// not found, no GPU visible, ABI mismatch) and INVALID_ARGUMENT for an index
// beyond the visible GPUs.
const gqla_backend_vtable* backend_for(gqla_device_type device, int32_t index);

// Devices of a type visible now (CPU: 1; CUDA: 0 without module or GPU).
int32_t visible_device_count(gqla_device_type device);

// gqla::probe_device (probe.hpp) that throws with its message on failure.
gqla_probe_info probe_through_backend(gqla_device_type device, int32_t index, uint32_t flags);

}  // namespace gqla

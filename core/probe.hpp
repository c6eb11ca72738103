// SPDX-License-Identifier: Apache-2.0
// Hardware probe: what the device can move and compute, for the cost model.
#pragma once

#include <cstdint>
#include <string>

#include "gqla/gqla.h"

namespace gqla {

// Writes `info` into the caller's struct, honouring a smaller struct_size
// from an older header (0 means "current size", as internal callers pass);
// INVALID_ARGUMENT when the struct cannot even hold `device`.
gqla_status deliver_probe_info(const gqla_probe_info& info, gqla_probe_info* out);

// Probe of any device through its backend: the CPU backend's probe
// (backends/cpu/probe/cpu_probe.hpp), CUDA through the loaded module
// (UNSUPPORTED when it is absent). AUTO resolves as sessions do
// (backend_registry's resolve_device). Never throws; the overload with
// `message` also says why a probe failed (module not found, bad index, ...).
// *out is filled up to its struct_size (0 = the current size).
gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out);
gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out,
                         std::string* message);

}  // namespace gqla

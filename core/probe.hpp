// SPDX-License-Identifier: Apache-2.0
// Hardware probe: what the device can move and compute, for the cost model.
#pragma once

#include <cstdint>
#include <string>

#include "gqla/gqla.h"

namespace gqla {

// CPU probe: vendor/model (cpuid), logical/physical/affinity cores, ISA bits,
// cache sizes (sysfs). Without GQLA_PROBE_CALIBRATE read_gbps and the peaks
// are estimates; with it they are measured (~150 ms idle, ~250 ms at worst,
// once per process, cached; persisted to the file named by GQLA_PROBE_CACHE
// when set). Honors GQLA_MAX_ISA (e.g. "avx2", "sse42", "none") to cap
// isa_flags; the measured peak then uses the capped ISA too. Thread-safe;
// concurrent calibrations are serialized. A measurement that fails leaves
// that number's estimate: `measured` says which numbers were measured,
// calibrated = 1 only when all were. Estimates assume kAssumedClockGhz
// (cpu_estimates.hpp) unless sysfs exposes the base clock.
gqla_status probe_cpu(uint32_t flags, gqla_probe_info* out);

// ISA bits of the host after the GQLA_MAX_ISA cap (what kernels may use).
uint64_t cpu_isa_flags();

// Probe of any device: CPU directly, CUDA through the loaded module
// (UNSUPPORTED when it is absent). AUTO resolves as sessions do
// (backend_registry's resolve_device). Never throws; the overload with
// `message` also says why a probe failed (module not found, bad index, ...).
// *out is filled up to its struct_size (0 = the current size).
gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out);
gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out,
                         std::string* message);

}  // namespace gqla

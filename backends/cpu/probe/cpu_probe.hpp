// SPDX-License-Identifier: Apache-2.0
// The CPU backend's hardware probe (the core reaches it through the CPU
// vtable's probe entry, core/probe.hpp's probe_device).
#pragma once

#include <cstdint>

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

}  // namespace gqla

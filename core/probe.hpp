// Hardware probe: what the device can move and compute, for the cost model.
#pragma once

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla {

// CPU probe: vendor/model (cpuid), logical/physical/affinity cores, ISA bits,
// cache sizes (sysfs). Without GQLA_PROBE_CALIBRATE read_gbps and the peaks
// are estimates; with it they are measured (<= 200 ms, once per process,
// cached; persisted to the file named by GQLA_PROBE_CACHE when set).
// Honors GQLA_MAX_ISA (e.g. "avx2", "sse42", "none") to cap isa_flags.
gqla_status probe_cpu(uint32_t flags, gqla_probe_info* out);

// ISA bits of the host after the GQLA_MAX_ISA cap (what kernels may use).
uint64_t cpu_isa_flags();

// Probe of any device: CPU directly, CUDA through the loaded module
// (UNSUPPORTED when it is absent).
gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out);

}  // namespace gqla

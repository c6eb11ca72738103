// SPDX-License-Identifier: Apache-2.0
// gqla::probe_device: the probe of any device through its backend (the CPU
// backend's backends/cpu/probe, the CUDA module's device_probe), and the
// struct_size-aware copy every probe result goes out through.
#include <cstddef>
#include <cstring>
#include <string>

#include "core/backend_api.h"
#include "core/backend_registry.hpp"
#include "core/error.hpp"
#include "core/probe.hpp"
#include "core/status_translation.hpp"

namespace gqla {

// Writes `info` into the caller's struct, honouring a smaller struct_size
// from an older header (0 means "current size", as internal callers pass).
gqla_status deliver_probe_info(const gqla_probe_info& info, gqla_probe_info* out) {
    size_t size = out->struct_size;
    if (size == 0 || size > sizeof(gqla_probe_info)) size = sizeof(gqla_probe_info);
    if (size < offsetof(gqla_probe_info, device) + sizeof(info.device)) return GQLA_ERR_INVALID_ARGUMENT;
    std::memcpy(out, &info, size);
    out->struct_size = size;
    return GQLA_OK;
}

gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out,
                         std::string* message) {
    if (out == nullptr) {
        if (message) *message = "out: expected a gqla_probe_info to fill, got NULL";
        return GQLA_ERR_INVALID_ARGUMENT;
    }
    gqla_status result = GQLA_OK;
    auto probe = [&] {
        const gqla_device_type resolved = resolve_device(device);
        if (resolved == GQLA_DEVICE_CPU) {
            if (index != 0) fail(GQLA_ERR_INVALID_ARGUMENT, "device_index: the CPU is device 0, got %d", index);
            result = gqla_cpu_backend()->probe(0, flags, out);
            return;
        }
        const gqla_backend_vtable* cuda = backend_for(GQLA_DEVICE_CUDA, index);
        gqla_probe_info info{};
        info.struct_size = sizeof(info);
        gqla_status st = cuda->probe(index, flags, &info);
        if (st != GQLA_OK) {
            if (message) *message = std::string("CUDA backend probe of device ") + std::to_string(index) + " failed";
            result = st;
            return;
        }
        info.device = GQLA_DEVICE_CUDA;
        info.device_index = index;
        // The CUDA probe measures bandwidth and peak together.
        if (info.calibrated && info.measured == 0) info.measured = GQLA_MEASURED_READ_GBPS | GQLA_MEASURED_PEAK;
        result = deliver_probe_info(info, out);
    };
    const gqla_status thrown = status_of(probe, [message](gqla_status, const char* what) {
        if (message) *message = what;
    });
    return thrown != GQLA_OK ? thrown : result;
}

gqla_status probe_device(gqla_device_type device, int32_t index, uint32_t flags, gqla_probe_info* out) {
    return probe_device(device, index, flags, out, nullptr);
}

}  // namespace gqla

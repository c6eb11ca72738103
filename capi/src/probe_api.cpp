// SPDX-License-Identifier: Apache-2.0
// Device count and probe, routed through the backend registry.
#include "capi/src/api_guard.hpp"
#include "core/backend_registry.hpp"
#include "core/cpu_features.hpp"
#include "core/enum_value.hpp"

using gqla::capi::guarded;

extern "C" {

gqla_status gqla_device_count(gqla_device_type device, int32_t* out_count) {
    return guarded("gqla_device_count", [&] {
        gqla::capi::require_non_null(out_count, "out_count");
        const int value = gqla::enum_value(device);
        if (value != GQLA_DEVICE_CPU && value != GQLA_DEVICE_CUDA)
            gqla::fail(GQLA_ERR_INVALID_ARGUMENT, "device: expected GQLA_DEVICE_CPU or GQLA_DEVICE_CUDA, got %d",
                       value);
        *out_count = gqla::visible_device_count(device);
    });
}

const char* gqla_isa_name(uint64_t isa_flag) { return gqla::isa_flag_name(isa_flag); }

gqla_status gqla_probe(gqla_device_type device, int32_t device_index, uint32_t flags, gqla_probe_info* out) {
    return guarded("gqla_probe", [&] {
        gqla::capi::require_out_struct(out, "out", sizeof(gqla_probe_info), "gqla_probe_info");
        if ((flags & ~GQLA_PROBE_CALIBRATE) != 0)
            gqla::fail(GQLA_ERR_INVALID_ARGUMENT, "flags: unknown bits 0x%x (known: GQLA_PROBE_CALIBRATE)",
                       flags & ~GQLA_PROBE_CALIBRATE);
        // Checked through its bytes first: an out-of-range int from C must not
        // be loaded as the enum (undefined in C++).
        const int value = gqla::enum_value(device);
        if (value != GQLA_DEVICE_AUTO && value != GQLA_DEVICE_CPU && value != GQLA_DEVICE_CUDA)
            gqla::fail(GQLA_ERR_INVALID_ARGUMENT,
                       "device: expected GQLA_DEVICE_AUTO, GQLA_DEVICE_CPU or GQLA_DEVICE_CUDA, got %d", value);
        if (device_index < 0)
            gqla::fail(GQLA_ERR_INVALID_ARGUMENT, "device_index: expected >= 0, got %d", device_index);
        gqla::capi::write_out_struct(out, gqla::probe_through_backend(device, device_index, flags));
    });
}

}  // extern "C"

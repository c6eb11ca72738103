// SPDX-License-Identifier: Apache-2.0
// gqla_config_default / gqla_config_validate.
#include "capi/src/api_guard.hpp"
#include "core/backend_registry.hpp"
#include "core/config.hpp"

extern "C" gqla_status gqla_config_default(gqla_config* cfg, gqla_kind kind) {
    return gqla::capi::guarded("gqla_config_default", [&] {
        gqla::capi::require_non_null(cfg, "cfg");
        *cfg = gqla::default_config(kind);
    });
}

extern "C" gqla_status gqla_config_validate(const gqla_config* cfg) {
    return gqla::capi::guarded("gqla_config_validate", [&] {
        gqla_config c = gqla::read_config(cfg, "cfg");
        gqla::validate_config(c);
        // The device must be one this build and machine can serve.
        gqla_device_type device = gqla::resolve_device(c.device);
        gqla::backend_for(device, c.device_index);
    });
}

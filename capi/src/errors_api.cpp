// SPDX-License-Identifier: Apache-2.0
// Status names, the thread-local last-error message and the version.
#include <string>

#include "capi/src/api_guard.hpp"
#include "core/enum_value.hpp"

namespace gqla::capi {
namespace {
thread_local std::string last_error;
}

void record_error(const char* function, const char* message) noexcept {
    try {
        last_error.assign(function);
        last_error.append(": ");
        last_error.append(message ? message : "");
    } catch (...) {
        last_error.clear();  // no memory for the message: keep the status at least
    }
}

}  // namespace gqla::capi

extern "C" {

const char* gqla_status_string(gqla_status status) { return gqla::status_description(gqla::enum_value(status)); }

const char* gqla_last_error_message(void) { return gqla::capi::last_error.c_str(); }

int32_t gqla_version(void) { return GQLA_VERSION; }

const char* gqla_version_string(void) {
#define GQLA_STR2(x) #x
#define GQLA_STR(x) GQLA_STR2(x)
    return GQLA_STR(GQLA_VERSION_MAJOR) "." GQLA_STR(GQLA_VERSION_MINOR) "." GQLA_STR(GQLA_VERSION_PATCH);
#undef GQLA_STR
#undef GQLA_STR2
}

}  // extern "C"

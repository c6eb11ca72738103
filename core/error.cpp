// SPDX-License-Identifier: Apache-2.0
#include "core/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace gqla {

void fail(gqla_status status, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    va_list copy;
    va_copy(copy, args);
    int needed = std::vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string message;
    if (needed > 0) {
        std::vector<char> buf(static_cast<size_t>(needed) + 1);
        std::vsnprintf(buf.data(), buf.size(), fmt, args);
        message.assign(buf.data(), static_cast<size_t>(needed));
    }
    va_end(args);
    throw Error(status, std::move(message));
}

const char* status_description(int status) {
    switch (status) {
        case GQLA_OK:
            return "GQLA_OK: success";
        case GQLA_ERR_INVALID_ARGUMENT:
            return "GQLA_ERR_INVALID_ARGUMENT: NULL pointer, bad shape/dtype/stride or out-of-range value";
        case GQLA_ERR_OUT_OF_MEMORY:
            return "GQLA_ERR_OUT_OF_MEMORY: host or device allocation failed";
        case GQLA_ERR_CAPACITY:
            return "GQLA_ERR_CAPACITY: the page pool (token capacity) or a sized limit is exhausted";
        case GQLA_ERR_UNSUPPORTED:
            return "GQLA_ERR_UNSUPPORTED: valid request this build or device cannot serve";
        case GQLA_ERR_NOT_FOUND:
            return "GQLA_ERR_NOT_FOUND: unknown sequence id";
        case GQLA_ERR_INVALID_STATE:
            return "GQLA_ERR_INVALID_STATE: call not allowed in the session's current state";
        case GQLA_ERR_BACKEND:
            return "GQLA_ERR_BACKEND: the compute backend reported a failure";
        case GQLA_ERR_INTERNAL:
            return "GQLA_ERR_INTERNAL: internal error in gqla (please report it)";
    }
    return "GQLA_ERR_UNKNOWN: not a gqla_status value";
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// Turning a gqla_status into a Python exception of the matching gqla.Error
// subclass. The exception classes live in pure Python (gqla/_errors.py) so
// they can use multiple inheritance (InvalidArgument is also a ValueError);
// this file only carries (status, message) across the C++ -> Python boundary.
#pragma once

#include <gqla/gqla.h>

#include <stdexcept>
#include <string>

namespace gqla_py {

// Thrown by the binding code; translated into gqla.<Subclass>(message, status).
class status_error : public std::runtime_error {
public:
    status_error(gqla_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    gqla_status status() const { return status_; }

private:
    gqla_status status_;
};

// Throw the status_error of a failed C call, with the library's thread-local
// message (it names the offending argument). No-op for GQLA_OK.
inline void check(gqla_status status) {
    if (status == GQLA_OK) return;
    const char* message = gqla_last_error_message();
    if (message == nullptr || message[0] == '\0') message = gqla_status_string(status);
    throw status_error(status, message);
}

[[noreturn]] inline void invalid_argument(const std::string& message) {
    throw status_error(GQLA_ERR_INVALID_ARGUMENT, message);
}

// Install the pybind11 translator for status_error (once, at module import).
void register_status_error_translator();

}  // namespace gqla_py

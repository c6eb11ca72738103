// SPDX-License-Identifier: Apache-2.0
// The one exception type of the library. Everything below the C entry points
// reports failure by throwing gqla::Error; the entry points turn it into a
// gqla_status plus the thread-local message of gqla_last_error_message().
// Messages name the offending argument and say what was expected, e.g.
//   "q: expected 4 dims [batch, s_q, num_heads, head_dim], got 3".
#pragma once

#include <exception>
#include <sstream>
#include <string>
#include <utility>

#include "gqla/gqla.h"

namespace gqla {

class Error : public std::exception {
public:
    Error(gqla_status status, std::string message) : status_(status), message_(std::move(message)) {}
    gqla_status status() const noexcept { return status_; }
    const char* what() const noexcept override { return message_.c_str(); }

private:
    gqla_status status_;
    std::string message_;
};

// Throw Error(status, printf-formatted message).
[[noreturn]] void fail(gqla_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Throw Error(status, concatenation of parts streamed with operator<<).
template <class... Parts>
[[noreturn]] void fail_stream(gqla_status status, const Parts&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    throw Error(status, os.str());
}

// Static "GQLA_ERR_X: description" for every status, including unknown values.
const char* status_description(int status);

// True for the values gqla_status defines.
inline bool status_known(int status) { return status >= GQLA_OK && status <= GQLA_ERR_INTERNAL; }

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// The opaque gqla_session of the C ABI: a gqla::Session behind the C name.
#pragma once

#include "core/session.hpp"
#include "gqla/gqla.h"

struct gqla_session {
    explicit gqla_session(const gqla_config& cfg) : impl(cfg) {}
    gqla::Session impl;
};

namespace gqla::capi {

inline Session& session_of(gqla_session* s) {
    if (s == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "session: NULL");
    return s->impl;
}

inline const Session& session_of(const gqla_session* s) {
    if (s == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "session: NULL");
    return s->impl;
}

}  // namespace gqla::capi

// SPDX-License-Identifier: Apache-2.0
// Decode path selection.
#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"

using gqla::capi::guarded;
using gqla::capi::session_of;

extern "C" {

gqla_status gqla_select_path(gqla_session* session, gqla_path path) {
    return guarded("gqla_select_path", [&] { session_of(session).select_path(path); });
}

gqla_status gqla_get_path(const gqla_session* session, gqla_path* active, gqla_path* requested) {
    return guarded("gqla_get_path", [&] {
        const gqla::Session& s = session_of(session);
        gqla::capi::require_non_null(active, "active");
        gqla_path a = GQLA_PATH_AUTO, r = GQLA_PATH_AUTO;
        s.paths(&a, &r);
        *active = a;
        if (requested != nullptr) *requested = r;
    });
}

}  // extern "C"

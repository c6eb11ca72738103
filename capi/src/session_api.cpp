// SPDX-License-Identifier: Apache-2.0
// Session lifetime, weights, config/stats getters, stream.
#include <new>

#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"
#include "core/config.hpp"

using gqla::capi::guarded;
using gqla::capi::session_of;

extern "C" {

gqla_status gqla_session_create(const gqla_config* cfg, gqla_session** out) {
    if (out != nullptr) *out = nullptr;
    return guarded("gqla_session_create", [&] {
        gqla::capi::require_non_null(out, "out");
        gqla_config c = gqla::read_config(cfg, "cfg");
        *out = new gqla_session(c);
    });
}

void gqla_session_destroy(gqla_session* session) { delete session; }

gqla_status gqla_session_get_config(const gqla_session* session, gqla_config* out) {
    return guarded("gqla_session_get_config", [&] {
        const gqla::Session& s = session_of(session);
        gqla::capi::require_out_struct(out, "out", gqla::kConfigV1Size, "gqla_config");
        gqla::capi::write_out_struct(out, s.config());
    });
}

gqla_status gqla_set_weights(gqla_session* session, int32_t layer, const gqla_tensor* w_ukv) {
    return guarded("gqla_set_weights", [&] {
        gqla::Session& s = session_of(session);
        gqla::capi::require_non_null(w_ukv, "w_ukv");
        s.set_weights(layer, w_ukv);
    });
}

gqla_status gqla_session_stats(const gqla_session* session, gqla_stats* out) {
    return guarded("gqla_session_stats", [&] {
        const gqla::Session& s = session_of(session);
        gqla::capi::require_out_struct(out, "out", sizeof(gqla_stats), "gqla_stats");
        gqla::capi::write_out_struct(out, s.stats());
    });
}

gqla_status gqla_session_set_stream(gqla_session* session, void* stream) {
    return guarded("gqla_session_set_stream", [&] { session_of(session).set_stream(stream); });
}

gqla_status gqla_session_synchronize(gqla_session* session) {
    return guarded("gqla_session_synchronize", [&] { session_of(session).synchronize(); });
}

}  // extern "C"

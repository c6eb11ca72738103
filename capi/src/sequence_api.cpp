// SPDX-License-Identifier: Apache-2.0
// Sequence add / release / fork / length / export / import.
#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"

using gqla::capi::guarded;
using gqla::capi::require_non_null;
using gqla::capi::session_of;

extern "C" {

gqla_status gqla_sequence_add(gqla_session* session, gqla_seq_id* out) {
    return guarded("gqla_sequence_add", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(out, "out");
        *out = s.add_sequence();
    });
}

gqla_status gqla_sequence_release(gqla_session* session, gqla_seq_id seq) {
    return guarded("gqla_sequence_release", [&] { session_of(session).release_sequence(seq); });
}

gqla_status gqla_sequence_fork(gqla_session* session, gqla_seq_id parent, gqla_seq_id* child) {
    return guarded("gqla_sequence_fork", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(child, "child");
        *child = s.fork_sequence(parent);
    });
}

gqla_status gqla_sequence_length(const gqla_session* session, gqla_seq_id seq, int32_t layer, int64_t* out_length) {
    return guarded("gqla_sequence_length", [&] {
        const gqla::Session& s = session_of(session);
        require_non_null(out_length, "out_length");
        *out_length = s.sequence_length(seq, layer);
    });
}

gqla_status gqla_sequence_export(const gqla_session* session, gqla_seq_id seq, void* buffer, size_t capacity,
                                 size_t* needed) {
    return guarded("gqla_sequence_export", [&] {
        const gqla::Session& s = session_of(session);
        require_non_null(needed, "needed");
        s.export_sequence(seq, buffer, capacity, needed);
    });
}

gqla_status gqla_sequence_import(gqla_session* session, const void* buffer, size_t size, gqla_seq_id* out) {
    return guarded("gqla_sequence_import", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(buffer, "buffer");
        require_non_null(out, "out");
        *out = s.import_sequence(buffer, size);
    });
}

}  // extern "C"

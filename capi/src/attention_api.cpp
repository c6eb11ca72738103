// SPDX-License-Identifier: Apache-2.0
// The cache-writing and attention entry points: append, append_batch, decode.
#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"

using gqla::capi::guarded;
using gqla::capi::require_non_null;
using gqla::capi::session_of;

extern "C" {

gqla_status gqla_append(gqla_session* session, int32_t layer, gqla_seq_id seq, const gqla_tensor* a,
                        const gqla_tensor* b) {
    return guarded("gqla_append", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(a, "a");
        require_non_null(b, "b");
        s.append(layer, seq, a, b);
    });
}

gqla_status gqla_append_batch(gqla_session* session, int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs,
                              const int64_t* counts, const gqla_tensor* a, const gqla_tensor* b) {
    return guarded("gqla_append_batch", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(seqs, "seqs");
        require_non_null(counts, "counts");
        require_non_null(a, "a");
        require_non_null(b, "b");
        s.append_batch(layer, num_seqs, seqs, counts, a, b);
    });
}

gqla_status gqla_decode(gqla_session* session, int32_t layer, int32_t batch, const gqla_seq_id* seqs,
                        const gqla_tensor* q, gqla_tensor* o, gqla_tensor* lse) {
    return guarded("gqla_decode", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(seqs, "seqs");
        require_non_null(q, "q");
        require_non_null(o, "o");
        s.decode(layer, batch, seqs, q, o, lse);
    });
}

}  // extern "C"

// SPDX-License-Identifier: Apache-2.0
// The cache-writing and attention entry points: append, append_batch,
// decode and the general attention call.
#include <cstddef>

#include "capi/src/api_guard.hpp"
#include "capi/src/session_handle.hpp"
#include "core/enum_value.hpp"
#include "core/error.hpp"

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

gqla_status gqla_attention_args_default(gqla_attention_args* args) {
    return guarded("gqla_attention_args_default", [&] {
        require_non_null(args, "args");
        *args = gqla_attention_args{};
        args->struct_size = sizeof(gqla_attention_args);
        args->path = GQLA_PATH_AUTO;
    });
}

gqla_status gqla_attention(gqla_session* session, const gqla_attention_args* args) {
    return guarded("gqla_attention", [&] {
        gqla::Session& s = session_of(session);
        require_non_null(args, "args");
        // Version 1.1 holds every field up to path_taken; later versions append.
        constexpr size_t kArgsV1Size = offsetof(gqla_attention_args, path_taken) + sizeof(gqla_path*);
        if (args->struct_size < kArgsV1Size)
            gqla::fail(GQLA_ERR_INVALID_ARGUMENT,
                       "args->struct_size: expected >= %zu (sizeof(gqla_attention_args); use "
                       "gqla_attention_args_default), got %zu",
                       kArgsV1Size, args->struct_size);
        require_non_null(args->seqs, "args->seqs");
        require_non_null(args->q, "args->q");
        require_non_null(args->o, "args->o");
        gqla::Session::AttentionCall call;
        call.layer = args->layer;
        call.batch = args->batch;
        call.ids = args->seqs;
        call.q_lens = args->q_lens;
        call.q = args->q;
        call.o = args->o;
        call.lse = args->lse;
        call.path_value = gqla::enum_value(args->path);  // any int a C caller stored
        // Version 1.2 appended `indices`; a 1.1 caller's struct ends before it.
        constexpr size_t kArgsV2Size = offsetof(gqla_attention_args, indices) + sizeof(const gqla_tensor*);
        if (args->struct_size >= kArgsV2Size) call.indices = args->indices;
        const gqla_path taken = s.attention(call);
        if (args->path_taken != nullptr) *args->path_taken = taken;
    });
}

}  // extern "C"

// SPDX-License-Identifier: Apache-2.0
// Where the query rows of one attention call live. Uniform calls hold every
// sequence's queries in [B, s_q, H, .] views; ragged calls pack them in
// sequence order in [N, H, .] views (core/backend_api.h). Either way query k
// of sequence b, of length L with n queries, sees positions j <= L - n + k.
#pragma once

#include <cstdint>

#include "backends/cpu/io_rows.hpp"
#include "core/backend_api.h"

namespace gqla::cpu {

struct CallRows {
    const gqla_decode_args* a;

    // Uniform calls take s_q from the call: it is what the views' shapes say.
    int32_t q_len(int64_t b) const { return a->ragged ? a->seqs[b].q_len : a->q_len; }
    int64_t length(int64_t b) const { return a->seqs[b].length; }
    // Last position query k of sequence b may see.
    int64_t limit(int64_t b, int64_t k) const { return length(b) - q_len(b) + k; }

    const void* q(int64_t b, int64_t k, int64_t h) const {
        return a->ragged ? view_at(a->q, a->seqs[b].q_row + k, h) : view_at(a->q, b, k, h);
    }
    void* o(int64_t b, int64_t k, int64_t h) const {
        return a->ragged ? view_at_mut(a->o, a->seqs[b].q_row + k, h) : view_at_mut(a->o, b, k, h);
    }
    bool wants_lse() const { return a->lse.data != nullptr; }
    float* lse(int64_t b, int64_t k, int64_t h) const {
        return static_cast<float*>(a->ragged ? view_at_mut(a->lse, a->seqs[b].q_row + k, h)
                                             : view_at_mut(a->lse, b, k, h));
    }
};

}  // namespace gqla::cpu

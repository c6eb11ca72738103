// SPDX-License-Identifier: Apache-2.0
// The two attention paths over a uniform batch (every sequence with a.q_len
// queries) whose q / o / lse already live on the device. decode.cpp stages
// host tensors and cuts ragged calls into uniform runs before calling these.
#pragma once

#include <cstdint>

#include "core/backend_api.h"
#include "session.hpp"

namespace gqla::cuda {

// A [B, s_q, H, dim] tensor in device memory: pointer, dtype and the element
// strides of its first three dims (the innermost is 1).
struct Rows3 {
    void* data;
    int32_t dtype;
    int64_t s[3];
};

// GQA kind, and the GQLA GQA path: over the kept expanded cache, or with
// a.transient over the transient pool (filled for this call beforehand by
// expand_for_transient_call). lse: [B, s_q, H] f32 with strides lse_s, or null.
void decode_gqa_path(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
                     const int64_t lse_s[3]);

// GQLA absorb path: query projection, MQA over the latent, output projection.
void decode_absorb_path(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
                        const int64_t lse_s[3]);

}  // namespace gqla::cuda

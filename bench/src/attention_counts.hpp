// SPDX-License-Identifier: Apache-2.0
// The work of one attention call in each form, counted on what the causal
// rule lets queries see: with q queries over a sequence of L tokens, query i
// sees L - q + 1 + i positions, so a prefill chunk does about half the work
// of q full-length decode rows (the count gqla_session_predict_cost uses for
// decode, q * L, would inflate a prefill row's TFLOP/s up to twice).
//
// FLOPs per visible (query, key) pair and head:
//   GQA form (GQA kind, GQLA over the kept or a transient expanded cache)
//       2 * (Dq + Dv)               scores and the weighted sum of values
//   absorb form
//       2 * (r + d_r) + 2 * r       scores over [c | kr], sum over c
//     plus per query row and head 2 * (d_c + d_v) * r (q~ and output projections)
//   transient form = GQA form plus the expansion GEMM of the call's context,
//       2 * r * G * (d_c + d_v) per context token
// Bytes: the cache the form reads (GQA kind K/V; kept GQA path expanded
// cache + kr; absorb and transient the latent + kr and the weights, the
// transient rows being formed on chip) plus q in and o out: the least
// traffic each form needs, so the roofline share it gives is an upper bound.
#pragma once

#include <cstdint>
#include <vector>

#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct AttentionCounts {
    double visible_pairs = 0;   // sum over sequences of visible (query, key) pairs
    double context_tokens = 0;  // cached tokens of the call's sequences
    double query_rows = 0;
    double flops = 0;
    double bytes = 0;
};

// lengths[b] cached tokens and q_lens[b] queries of sequence b. `form` is
// GQLA_PATH_GQA, _ABSORB or _GQA_TRANSIENT (GQA kind: always the GQA form).
AttentionCounts count_attention(const Preset& p, gqla_path form, gqla_dtype cache, gqla_dtype io,
                                const std::vector<int64_t>& lengths, const std::vector<int32_t>& q_lens);

}  // namespace gqla::bench

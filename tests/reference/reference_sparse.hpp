// SPDX-License-Identifier: Apache-2.0
// Float64 reference of sparse (top-k) attention: dense attention restricted
// to the positions each query lists. Written from the definition, like
// tests/reference/reference.hpp: scores, a max-shifted softmax, a weighted sum.
//
// Query i of a sequence of length L with s_q queries reads the entries
// idx[i * topk .. i * topk + topk) and attends to every entry j with
// 0 <= j <= L - s_q + i, once per occurrence (a position listed twice counts
// as two equal keys). Other entries (-1 padding, invisible positions,
// anything outside [0, L)) are skipped, never read. A query with no visible
// entry gets o = 0 and lse = -inf.
#pragma once

#include <cstdint>

namespace gqla::ref {

// GQA: q [s_q, H, D], K [L, G, D], V [L, G, Dv], idx [s_q, topk]
//   -> o [s_q, H, Dv], lse [s_q, H] (lse may be nullptr).
void gqa_sparse_decode(int H, int G, int D, int Dv, int64_t L, int s_q, double scale, const double* q, const double* K,
                       const double* V, const int32_t* idx, int topk, double* o, double* lse);

// GQLA, keys and values formed per group from the latent (neither path's
// algebra): q [s_q, H, d_c + d_r], W [G*(d_c+d_v), r], C [L, r], KR [L, d_r],
// idx [s_q, topk] -> o [s_q, H, d_v], lse [s_q, H].
void gqla_sparse_decode(int H, int G, int r, int d_c, int d_r, int d_v, int64_t L, int s_q, double scale,
                        const double* q, const double* W, const double* C, const double* KR, const int32_t* idx,
                        int topk, double* o, double* lse);

}  // namespace gqla::ref

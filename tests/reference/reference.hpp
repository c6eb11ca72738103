// SPDX-License-Identifier: Apache-2.0
// Float64 reference of the decode math: the oracle every backend, test,
// benchmark and the demo compares against. Dense, single-sequence,
// deliberately simple (no paging, no blocking, no shortcuts) so it is easy
// to trust.
//
// Non-finite inputs: query i reads only the positions it may see (j <=
// L - s_q + i); the others are skipped, never multiplied by a zero weight, so
// a NaN or inf there changes nothing. At a visible position IEEE arithmetic
// decides: a NaN in q, a key or a value makes the outputs it feeds NaN, an
// inf value makes them non-finite, a +inf score makes the head's output NaN
// and a -inf score weighs 0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gqla::ref {

// GQA decode of one sequence.
//   q [s_q, H, D], K [L, G, D], V [L, G, Dv]  ->  o [s_q, H, Dv], lse [s_q, H]
// Query i sits at position L - s_q + i and attends to j <= L - s_q + i.
// lse may be nullptr.
void gqa_decode(int H, int G, int D, int Dv, int64_t L, int s_q, double scale, const double* q, const double* K,
                const double* V, double* o, double* lse);

// GQLA decode of one sequence, straight from the definition (keys/values
// formed per group from the latent; neither path's algebra).
//   q [s_q, H, d_c + d_r] (nope part first), W [G*(d_c+d_v), r] (kv_b_proj
//   layout), C [L, r], KR [L, d_r]  ->  o [s_q, H, d_v], lse [s_q, H]
// One token's key [W_UK[g] c | kr] ([G][d_c + d_r]) and value W_UV[g] c
// ([G][d_v]) for every group g, W being W_UKV [G*(d_c+d_v), r].
void gqla_token_rows(int G, int r, int d_c, int d_r, int d_v, const double* W, const double* c, const double* kr,
                     double* keys, double* vals);

// The same for L tokens: keys [L, G, d_c + d_r], values [L, G, d_v], the
// expanded rows the GQA path of a GQLA session attends over.
void gqla_expanded_rows(int G, int r, int d_c, int d_r, int d_v, int64_t L, const double* W, const double* C,
                        const double* KR, double* keys, double* vals);

void gqla_decode(int H, int G, int r, int d_c, int d_r, int d_v, int64_t L, int s_q, double scale, const double* q,
                 const double* W, const double* C, const double* KR, double* o, double* lse);

// sum of a[i] * b[i] over n elements, in four interleaved partial sums (a
// float64 sum in any order is far inside every tolerance the tests use; one
// running sum would make the references latency-bound).
double dot(const double* a, const double* b, int64_t n);

// ||a - ref|| / ||ref|| (L2 over n elements); returns +inf if a has a NaN/inf.
double rel_l2(const double* a, const double* ref, size_t n);
double rel_l2(const float* a, const double* ref, size_t n);

}  // namespace gqla::ref

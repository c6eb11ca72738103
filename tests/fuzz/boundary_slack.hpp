// SPDX-License-Identifier: Apache-2.0
// How far attention outputs can move when some key and value elements are
// known only to within a bound: the 8-bit expanded rows of the GQLA GQA path,
// whose elements at e4m3 rounding boundaries gqla may store one step away
// from the fuzzer's float64 rebuild (fp8_rows.hpp). The fuzzer then holds a
// decode to its usual bound plus this slack, rather than to the loose bound
// of the 8-bit rounding itself (6e-2 against the unquantized rows): away
// from the few boundary elements the check stays as tight as elsewhere.
//
// For one query row with probabilities p_j over its positions, scores moved
// by at most D_j = scale * sum_d |q_d| dk_jd and values by at most dv_je:
// with Z_min = sum_j p_j exp(-D_j) and Z_max = sum_j p_j exp(D_j), every
// moved probability p'_j = p_j exp(a_j) / sum_k p_k exp(a_k) (|a_j| <= D_j)
// has p'_j / p_j within [exp(-D_j) / Z_max, exp(D_j) / Z_min], so with
// R_j = max(exp(D_j) / Z_min - 1, 1 - exp(-D_j) / Z_max):
//   |o'_e - o_e| <= sum_j p_j exp(D_j) / Z_min dv_je + sum_j p_j R_j |v_je - o_e|
//   |lse' - lse| <= max(log Z_max, -log Z_min)
// (o' - o = sum_j p'_j (v'_j - v_j) + sum_j (p'_j - p_j)(v_j - o), and
// lse' - lse = log sum_j p_j exp(a_j)). Exact, not a first-order estimate:
// it holds however many elements sit at a boundary (r = 1 with bf16 weights
// puts many exactly on one: every product is exact there).
#pragma once

#include <cstdint>

namespace fuzz {

// GQA form over one sequence: q [n, H, Dk], keys [L, G, Dk], vals [L, G, Dv]
// (the rows the reference used), dk and dv (same shapes) the largest
// deviation of each element. Query i sees j <= L - n + i; idx [n, topk]
// (nullptr: dense) restricts it to the listed positions, once per
// occurrence, as gqla::ref::gqa_sparse_decode does. Writes slack_o [n, H,
// Dv] and slack_lse [n, H] (0 for a row without a visible position).
void attention_slack(int H, int G, int Dk, int Dv, int64_t L, int n, double scale, const double* q, const double* keys,
                     const double* vals, const double* dk, const double* dv, const int32_t* idx, int topk,
                     double* slack_o, double* slack_lse);

}  // namespace fuzz

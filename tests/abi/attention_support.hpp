// SPDX-License-Identifier: Apache-2.0
// Support of the gqla_attention tests: one call stated as a request (ragged
// q_lens or uniform s_q, a per-call path, strided views, lse or not), run on
// a harness session and compared sequence by sequence with the float64
// reference.
#pragma once

#include <cstdint>
#include <vector>

#include "harness.hpp"

namespace attention {

// Sequence ids are assigned as Ids(...) temporaries (moved): copy-assigning a
// vector<int64_t> trips a false -Wnonnull warning of GCC 12 at -O3.
using Ids = std::vector<gqla_seq_id>;

// path_taken is preset to AUTO, which gqla_attention never reports (it names
// the form that ran), so it shows whether the call wrote it. (An out-of-range
// value would be undefined behaviour to load.)
const gqla_path kUnwritten = GQLA_PATH_AUTO;

// One gqla_attention call as a test states it.
struct Request {
    int32_t layer = 0;
    std::vector<gqla_seq_id> seqs;
    std::vector<int32_t> q_lens;  // empty: q_lens NULL, s_q queries per sequence (4-d q)
    int32_t s_q = 0;
    gqla_path path = GQLA_PATH_AUTO;
    bool with_lse = true;
    bool padded = false;  // every outer stride has a gap that must stay untouched
    bool check = true;    // compare every sequence with the reference

    int32_t rows_of(size_t i) const { return q_lens.empty() ? s_q : q_lens[i]; }
    int64_t total_rows() const {
        int64_t n = 0;
        for (size_t i = 0; i < seqs.size(); ++i) n += rows_of(i);
        return n;
    }
};

struct Result {
    gqla_status status = GQLA_ERR_INTERNAL;
    gqla_path taken = kUnwritten;
    uint64_t seed = 0;
    // Worst over the sequences, against the reference on the inputs as the
    // cache stores them (o_err, lse_err) and as given (the *_given ones,
    // bounded by given_tol).
    double o_err = 0, lse_err = 0, o_err_given = 0, lse_err_given = 0, given_tol = 0;
    bool gaps_untouched = true;
    std::vector<double> o, lse;  // packed rows as returned: [N, H, Dv], [N, H]
};

// Queries for a request: [N, H, Dq] values in the io dtype.
abi::Buffer random_rows(abi::Harness& h, int64_t rows);

// Runs the request with queries q_dense ([N, H, Dq] in packed order) and
// compares every sequence with the reference.
Result attend(abi::Harness& h, const Request& rq, abi::Buffer& q_dense);
// Same, with fresh random queries.
Result attend(abi::Harness& h, const Request& rq);

// The odd GQLA shape with a smaller latent (still nothing a power of two or a
// multiple of 64): the float64 reference re-expands every cached token per
// call, which dominates these tests' time at r = 384.
gqla_config light_gqla_config(int32_t groups);

}  // namespace attention

// Assert an attention call succeeded and matched the reference (see
// CHECK_RESULT_MATCHES in harness.hpp).
#define CHECK_ATTENTION_MATCHES(result, tol) CHECK_RESULT_MATCHES("gqla_attention", result, tol)

// SPDX-License-Identifier: Apache-2.0
// Ragged calls of gqla_cuda_backend_test (per-sequence query counts, rows
// packed in sequence order): one call on host or padded device tensors,
// checked against the float64 reference, against the uniform calls of its
// runs of equal query counts, and GQLA's three forms against each other.
// Shared by the ragged and the prefill cases.
#pragma once

#include <string>
#include <vector>

#include "cuda_backend_fixture.hpp"

namespace gqla::test {

// Query counts of the ragged cases: runs {1}, {3, 3}, {1, 1}, {8}, {2}.
inline const std::vector<int> kRaggedQLens = {1, 3, 3, 1, 1, 8, 2};
inline const std::vector<int64_t> kRaggedLengths = {9, 40, 130, 64, 700, 33, 300};

// Prefill chunks: 4 heads per group x 32-300 queries (128-1200 rows a
// group: the sm_90a prefill kernel on Hopper, partial last row blocks), a
// ragged call mixing chunks of 40 and 64 queries, a whole 300-token prompt
// in one chunk (n = L) and a decode token; then one long sequence whose one
// row block per group is split many ways (merged by the combine pass).
inline const std::vector<int> kPrefillQLens = {40, 40, 64, 300, 1};
inline const std::vector<int64_t> kPrefillLengths = {100, 333, 64, 300, 3000};

inline int query_dim(const gqla_backend_desc& d) {
    return d.kind == GQLA_KIND_GQLA ? d.nope_dim + d.rope_dim : d.head_dim;
}
inline int64_t sum_of(const std::vector<int>& v) {
    int64_t n = 0;
    for (int x : v) n += x;
    return n;
}

// Outputs of one call, rows packed in sequence order: o [N, H, dv], lse [N, H].
struct CallOutput {
    std::vector<float> o, lse;
};

// One call of layer `layer` over `ids`, sequence b with q_lens[b] queries,
// q [N, H, dq] (f32, rows in sequence order). ragged: [N, H, .] views;
// otherwise every q_len must be equal and the views are [B, s_q, H, .].
// device_io: q / o / lse in device memory with padded head and token strides
// (so every run's view must use them), else contiguous host tensors.
CallOutput attention_call(Harness& h, int layer, const std::vector<int>& ids, const std::vector<int>& q_lens,
                          const std::vector<float>& q, gqla_path path, bool transient, bool ragged, bool device_io);

// A call's outputs against the float64 reference over the recorded rows.
void check_reference(const Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                     const std::vector<int>& q_lens, const std::vector<float>& q, const CallOutput& out);

// Two computations that should agree to f32 rounding (the same kernels on
// the same rows, or expanded rows rounded the same way).
void check_agree(const std::string& name, const CallOutput& a, const CallOutput& b, double tol = 1e-5);

// A ragged call (host and device tensors) against the reference, and against
// one uniform call per run of equal query counts, which is what it runs
// (the same kernels on the same rows: equal to f32 rounding).
void check_ragged(Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                  const std::vector<int>& q_lens, gqla_path path, bool transient);

// GQLA: ragged calls on the absorb path, the transient GQA form (no kept
// expanded cache) and the kept GQA path; the three forms agree.
void test_ragged_gqla(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
                      const std::vector<int>& q_lens = kRaggedQLens,
                      const std::vector<int64_t>& lengths = kRaggedLengths);

}  // namespace gqla::test

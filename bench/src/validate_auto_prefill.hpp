// SPDX-License-Identifier: Apache-2.0
// The prefill part of --validate-auto: for prefill chunks (s_q 64, 512,
// 2048) gqla_attention chooses per call among three forms, the absorb path,
// the GQA path over the kept expanded cache (when the session keeps it) and
// the transient GQA form. Every form is measured with an explicit path; AUTO's
// pick is the form an AUTO call reports taking, on a session that keeps only
// the latent (absorb vs transient) and on one that keeps the expanded cache
// too (all three).
#pragma once

#include <string>
#include <vector>

#include "bench_env.hpp"
#include "decode_workload.hpp"
#include "options.hpp"

namespace gqla::bench {

// The workload both AUTO grids start from: preset p with a latent-only
// (absorb) session of the run's device, dtypes, threads and page size, at
// `context` tokens per sequence.
WorkloadSpec absorb_session_spec(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype cache_dtype,
                                 int64_t context);

// Measures the grid; returns the JSON object printed under "prefill" and
// appends failures to `errors`.
std::string run_prefill_grid(const Options& opt, const BenchEnv& env, std::vector<std::string>* errors);

}  // namespace gqla::bench

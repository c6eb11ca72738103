// SPDX-License-Identifier: Apache-2.0
// --validate-auto: does AUTO pick the faster path? For every GQLA preset and
// cell of batch x context x s_q, measure both paths and compare with the
// choice gqla_session_predict_cost reports; also how close the predicted
// times are to the measured ones. Prefill chunks (s_q 64, 512, 2048) are
// judged on gqla_attention's per-call choice (validate_auto_prefill.hpp).
#pragma once

#include "bench_env.hpp"
#include "options.hpp"

namespace gqla::bench {

// Prints one JSON object; returns the process exit code.
int run_validate_auto(const Options& opt, const BenchEnv& env);

}  // namespace gqla::bench

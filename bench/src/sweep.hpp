// SPDX-License-Identifier: Apache-2.0
// The default mode of gqla-bench: time every (preset, dtype, path, batch,
// context, s_q) case of the options, next to a naive baseline and the
// roofline floor, and print a table or one JSON object per case.
#pragma once

#include "bench_env.hpp"
#include "options.hpp"

namespace gqla::bench {

// Returns the process exit code (non-zero when a case failed or an accuracy
// check broke its bound in docs/numerics.md).
int run_sweep(const Options& opt, const BenchEnv& env);

}  // namespace gqla::bench

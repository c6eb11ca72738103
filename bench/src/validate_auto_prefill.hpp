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
#include "presets.hpp"
#include "progress.hpp"

namespace gqla::bench {

// The workload both AUTO grids start from: preset p with a latent-only
// (absorb) session of the run's device, dtypes, threads and page size, at
// `context` tokens per sequence.
WorkloadSpec absorb_session_spec(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype cache_dtype,
                                 int64_t context);

// The cells of the grid that fit its FLOP and memory budgets, grouped by
// the (preset, context) session they share, and the ones dropped.
struct PrefillPlan {
    struct Shape {
        int batch, s_q;
    };
    struct Session {
        const Preset* preset;
        int64_t context;
        std::vector<Shape> shapes;
    };
    std::vector<Session> sessions;
    std::vector<std::string> dropped;

    // Timings: every form of every kept cell.
    long long cells() const;
};

PrefillPlan plan_prefill_grid(const Options& opt, const BenchEnv& env);

// Measures the planned grid; returns the JSON object printed under
// "prefill", appends failures to `errors` and reports each timing to `progress`.
std::string run_prefill_grid(const PrefillPlan& plan, const Options& opt, const BenchEnv& env,
                             std::vector<std::string>* errors, Progress& progress);

}  // namespace gqla::bench

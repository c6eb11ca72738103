// SPDX-License-Identifier: Apache-2.0
// The sparse part of --validate-auto: for top-k calls (every query lists K
// positions of its visible prefix) gqla_attention chooses per call among the
// absorb path, the transient GQA form (only the listed rows up-projected) and
// the GQA path over the kept expanded cache. On a session that keeps the
// expanded cache every form is measured with an explicit path, and AUTO's
// pick is the form an AUTO call reports taking.
#pragma once

#include <string>
#include <vector>

#include "bench_env.hpp"
#include "options.hpp"
#include "presets.hpp"
#include "progress.hpp"

namespace gqla::bench {

struct SparsePlan {
    struct Session {
        const Preset* preset;
        int64_t context;
        int batch;
    };
    std::vector<Session> sessions;
    std::vector<std::string> dropped;

    // Timings: every form of every (K, s_q) cell of every session.
    long long cells() const;
};

SparsePlan plan_sparse_grid(const Options& opt, const BenchEnv& env);

// Measures the planned grid; returns the JSON object printed under
// "sparse", appends failures to `errors` and reports each timing to `progress`.
std::string run_sparse_grid(const SparsePlan& plan, const Options& opt, const BenchEnv& env,
                            std::vector<std::string>* errors, Progress& progress);

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
#include "path_report.hpp"

#include <cstdio>

namespace gqla::demo {
namespace {

const char* bound_name(gqla_bound b) { return b == GQLA_BOUND_COMPUTE ? "compute" : "memory"; }

void print_one(const char* name, const gqla_path_cost& c) {
    std::printf("    %-7s %9.2f MB %9.3f GFLOP  memory %8.3f ms  compute %8.3f ms  -> %8.3f ms (%s-bound)\n", name,
                c.bytes / 1e6, c.flops / 1e9, c.memory_s * 1e3, c.compute_s * 1e3, c.time_s * 1e3, bound_name(c.bound));
}

}  // namespace

void print_path_costs(const gqla_workload& w, const gqla_cost_report& r) {
    // The bandwidth the reads were priced at: the probe's, or on a CPU what
    // the session's threads pull at most when that is less (docs/cost-model.md).
    const double priced_gbps = r.gqa.memory_s > 0 ? r.gqa.bytes / r.gqa.memory_s / 1e9 : 0.0;
    std::printf("  batch %d, context %lld, s_q %d (reads priced at %.1f GB/s):\n", w.batch,
                static_cast<long long>(w.context), w.q_len, priced_gbps);
    print_one("gqa", r.gqa);
    print_one("absorb", r.absorb);
    const bool absorb = r.chosen == GQLA_PATH_ABSORB;
    const gqla_path_cost& pick = absorb ? r.absorb : r.gqa;
    const gqla_path_cost& other = absorb ? r.gqa : r.absorb;
    std::printf("    AUTO -> %s: predicted %.2fx faster", absorb ? "absorb" : "gqa", other.time_s / pick.time_s);
    if (pick.bound == GQLA_BOUND_MEMORY && other.bound == GQLA_BOUND_MEMORY)
        std::printf(" (both memory-bound; it reads %.1fx fewer bytes)", other.bytes / pick.bytes);
    else if (other.bound == GQLA_BOUND_COMPUTE)
        std::printf(" (the %s path is compute-bound: %.1fx the FLOPs)", absorb ? "gqa" : "absorb",
                    other.flops / pick.flops);
    std::printf("; building the expanded cache once costs %.3f ms\n", r.expand_s * 1e3);
}

}  // namespace gqla::demo

// SPDX-License-Identifier: Apache-2.0
#include "validate_auto_sparse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "json_writer.hpp"
#include "sparse_session.hpp"
#include "support.hpp"
#include "validate_auto_grid.hpp"

namespace gqla::bench {
namespace {

const int kTopks[] = {256, 2048};
const int kQueryLens[] = {1, 4};
const int kCpuBatches[] = {1, 8};
const int kGpuBatches[] = {1, 64};
constexpr int64_t kCpuContext = 16384;
constexpr int64_t kGpuContext = 65536;

// The budgets of validate_auto_grid.hpp: a form whose one call would take
// more FLOPs (by the library's own count) is not timed on that device, and a
// session whose cache (latent + expanded) exceeds the byte budget is dropped.

struct Cell {
    const Preset* preset;
    int batch, s_q, topk;
    int64_t context;
    double meas[kFormCount] = {0, 0, 0};  // seconds; infinity: not timed (over the FLOP budget)
    gqla_path_cost cost[kFormCount] = {};
    gqla_path call_chosen = GQLA_PATH_AUTO;  // gqla_session_predict_cost's pick without the kept cache
    gqla_path auto_pick = GQLA_PATH_AUTO;    // the form an AUTO call took
};

std::string cell_label(const Cell& c, gqla_path form) {
    return std::string(c.preset->name) + " batch " + std::to_string(c.batch) + " context " + std::to_string(c.context) +
           " topk " + std::to_string(c.topk) + " s_q " + std::to_string(c.s_q) + " " + path_name(form) + " (sparse)";
}

// The form the prediction prices cheapest, the kept cache's GQA path included.
int predicted_best_of(const Cell& c) {
    int best = 0;
    for (int k = 1; k < kFormCount; ++k)
        if (c.cost[k].time_s < c.cost[best].time_s) best = k;
    return best;
}

}  // namespace

long long SparsePlan::cells() const {
    return static_cast<long long>(sessions.size()) * std::size(kTopks) * std::size(kQueryLens) * kFormCount;
}

SparsePlan plan_sparse_grid(const Options& opt, const BenchEnv& env) {
    const bool on_cpu = env.device == GQLA_DEVICE_CPU;
    const double cell_budget = on_cpu ? kCpuCellBytes : 0.5 * static_cast<double>(env.memory_cap);
    const int64_t context = on_cpu ? kCpuContext : kGpuContext;
    const gqla_dtype dtype = opt.dtypes.front();
    SparsePlan plan;
    for (const Preset& p : all_presets()) {
        if (!p.is_gqla()) continue;  // one form only: nothing to choose
        const double per_token = stored_bytes_per_token(p, GQLA_PATH_GQA, dtype);
        for (int b : on_cpu ? kCpuBatches : kGpuBatches) {
            if (b * static_cast<double>(context) * per_token <= cell_budget)
                plan.sessions.push_back({&p, context, b});
            else
                plan.dropped.push_back(std::string(p.name) + " batch " + std::to_string(b) + " context " +
                                       std::to_string(context) + " (sparse)");
        }
    }
    return plan;
}

std::string run_sparse_grid(const SparsePlan& plan, const Options& opt, const BenchEnv& env,
                            std::vector<std::string>* errors, Progress& progress) {
    const bool on_cpu = env.device == GQLA_DEVICE_CPU;
    const double flop_budget = on_cpu ? kCpuCallFlops : kGpuCallFlops;
    const int reps = std::min(opt.reps, on_cpu ? 5 : 15);
    const gqla_dtype dtype = opt.dtypes.front();
    std::vector<Cell> cells;
    const double t_start = now_s();

    for (const SparsePlan::Session& session : plan.sessions) {
        const Preset& p = *session.preset;
        long long timed = 0;
        try {
            // Path GQA: the session keeps the expanded cache beside the latent.
            SparseSession work(p, GQLA_PATH_GQA, dtype, opt, session.batch, session.context, 4);
            for (int topk : kTopks)
                for (int s_q : kQueryLens) {
                    Cell c{&p, session.batch, s_q, topk, session.context};
                    const gqla_cost_report r = work.predict(s_q, topk);
                    c.cost[0] = r.absorb;
                    c.cost[1] = r.transient;
                    c.cost[2] = r.gqa;
                    c.call_chosen = r.call_chosen;
                    std::vector<int32_t> idx = indexer_lists(session.batch, s_q, session.context, topk, 42);
                    double cpu_s = 0;
                    for (int k = 0; k < kFormCount; ++k) {
                        gqla_path taken = GQLA_PATH_AUTO;
                        c.meas[k] = c.cost[k].flops > flop_budget
                                        ? std::numeric_limits<double>::infinity()
                                        : work.time(kForms[k], s_q, idx, topk, reps, opt.hot, &taken, &cpu_s);
                        if (std::isfinite(c.meas[k]) && taken != kForms[k])
                            throw GqlaError(GQLA_ERR_INTERNAL, std::string("sparse path ") + path_name(kForms[k]) +
                                                                   " ran on " + path_name(taken));
                        ++timed;
                        progress.done(cell_label(c, kForms[k]));
                    }
                    work.time(GQLA_PATH_AUTO, s_q, idx, topk, 1, opt.hot, &c.auto_pick, &cpu_s);
                    cells.push_back(c);
                }
        } catch (const std::exception& e) {  // GqlaError, or the bench's own runtime errors
            errors->push_back(std::string(p.name) + " batch " + std::to_string(session.batch) +
                              " (sparse): " + e.what());
            progress.done(std::string(p.name) + " (sparse) failed",
                          static_cast<long long>(std::size(kTopks) * std::size(kQueryLens) * kFormCount) - timed);
        }
    }

    // AUTO's pick among the three forms; and the pick of a session without
    // the kept cache (call_chosen: absorb or transient, the first two forms)
    // against the faster of those two.
    Scores all_forms, latent;
    int as_predicted = 0;
    std::string rows = "[";
    for (const Cell& c : cells) {
        const double regret = all_forms.add(c, c.auto_pick);
        latent.add(c, c.call_chosen, 2);
        as_predicted += form_index(c.auto_pick) == predicted_best_of(c);
        JsonObject j;
        j.str("preset", c.preset->name)
            .integer("batch", c.batch)
            .integer("context", c.context)
            .integer("topk", c.topk)
            .integer("s_q", c.s_q);
        for (int k = 0; k < kFormCount; ++k) {
            const std::string form = path_name(kForms[k]);
            if (std::isfinite(c.meas[k]))
                j.num(("meas_" + form + "_ms").c_str(), c.meas[k] * 1e3, 4);
            else
                j.raw(("meas_" + form + "_ms").c_str(), "null");
            j.num(("pred_" + form + "_ms").c_str(), c.cost[k].time_s * 1e3, 4);
        }
        j.str("call_chosen", path_name(c.call_chosen))
            .str("pred_best", path_name(kForms[predicted_best_of(c)]))
            .str("auto", path_name(c.auto_pick))
            .str("best", path_name(kForms[best_of(c)]))
            .num("regret", regret, 3);
        rows += (rows.size() > 1 ? "," : "") + j.dump();
    }
    rows += "]";

    JsonObject out;
    out.str("forms",
            "absorb, transient (only the listed latent rows up-projected), gqa (over the kept expanded cache); "
            "measured with explicit per-call paths on a session keeping the expanded cache, AUTO's pick from an "
            "AUTO call's path_taken; a form over the FLOP budget is not timed (null); auto_as_predicted: cells where "
            "AUTO "
            "took the form priced cheapest (pred_best); call_chosen is the pick without the kept cache, judged in "
            "latent_only against the faster of absorb and transient")
        .raw("topk", "[256,2048]")
        .raw("s_q", "[1,4]");
    all_forms.write(out);
    out.integer("auto_as_predicted", as_predicted)
        .raw("latent_only", latent.json())
        .num("seconds", now_s() - t_start, 3)
        .raw("dropped", json_string_array(plan.dropped))
        .raw("rows", rows);
    return out.dump();
}

}  // namespace gqla::bench

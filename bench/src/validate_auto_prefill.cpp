// SPDX-License-Identifier: Apache-2.0
#include "validate_auto_prefill.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "attention_counts.hpp"
#include "decode_workload.hpp"
#include "json_writer.hpp"
#include "support.hpp"
#include "validate_auto_grid.hpp"

namespace gqla::bench {
namespace {

const int kBatches[] = {1, 8, 64};
const int64_t kContexts[] = {512, 4096, 16384};
const int kQueryLens[] = {64, 512, 2048};

struct Cell {
    const Preset* preset;
    int batch, s_q;
    int64_t context;
    double meas[kFormCount] = {0, 0, 0};
    gqla_path_cost cost[kFormCount] = {};    // the library's prediction
    gqla_path call_chosen = GQLA_PATH_AUTO;  // gqla_session_predict_cost's pick, no expanded cache kept
    gqla_path auto_latent = GQLA_PATH_AUTO;  // the form an AUTO call took on the latent-only session
    gqla_path auto_kept = GQLA_PATH_AUTO;    // ... and with the expanded cache kept
};

// FLOPs of the costliest form of one call (what decides whether the cell runs).
double costliest_flops(const Preset& p, gqla_dtype dtype, gqla_dtype io, int batch, int64_t context, int s_q) {
    const std::vector<int64_t> lengths(static_cast<size_t>(batch), context);
    const std::vector<int32_t> q_lens(static_cast<size_t>(batch), s_q);
    double most = 0;
    for (gqla_path form : kForms) most = std::max(most, count_attention(p, form, dtype, io, lengths, q_lens).flops);
    return most;
}

// Bytes per cached token of a (preset, context) session: latent + expanded
// cache, and on CUDA the transient form's layer of expanded rows for every
// page of the pool.
double cached_bytes_per_token(const Preset& p, gqla_dtype dtype, bool on_cpu) {
    const double expanded =
        stored_bytes_per_token(p, GQLA_PATH_GQA, dtype) - stored_bytes_per_token(p, GQLA_PATH_ABSORB, dtype);
    return stored_bytes_per_token(p, GQLA_PATH_GQA, dtype) + (on_cpu ? 0.0 : expanded);
}

std::string cell_label(const Cell& c, gqla_path form) {
    return std::string(c.preset->name) + " batch " + std::to_string(c.batch) + " context " + std::to_string(c.context) +
           " s_q " + std::to_string(c.s_q) + " " + path_name(form);
}

}  // namespace

WorkloadSpec absorb_session_spec(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype cache_dtype,
                                 int64_t context) {
    WorkloadSpec spec;
    spec.preset = &p;
    spec.shape.device = env.device;
    spec.shape.path = GQLA_PATH_ABSORB;
    spec.shape.cache_dtype = cache_dtype;
    spec.shape.io_dtype = opt.io_dtype;
    spec.shape.threads = opt.threads;
    spec.shape.page_size = opt.page_size;
    spec.context = context;
    return spec;
}

long long PrefillPlan::cells() const {
    long long n = 0;
    for (const Session& s : sessions) n += static_cast<long long>(s.shapes.size()) * kFormCount;
    return n;
}

PrefillPlan plan_prefill_grid(const Options& opt, const BenchEnv& env) {
    const bool on_cpu = env.device == GQLA_DEVICE_CPU;
    const double flop_budget = on_cpu ? kCpuCallFlops : kGpuCallFlops;
    const double cell_budget = on_cpu ? kCpuCellBytes : 0.5 * static_cast<double>(env.memory_cap);
    const gqla_dtype dtype = opt.dtypes.front();
    PrefillPlan plan;
    for (const Preset& p : all_presets()) {
        if (!p.is_gqla()) continue;
        const double per_token = cached_bytes_per_token(p, dtype, on_cpu);
        for (int64_t context : kContexts) {
            PrefillPlan::Session session{&p, context, {}};
            for (int s_q : kQueryLens) {
                if (s_q > context) continue;
                for (int b : kBatches) {
                    if (costliest_flops(p, dtype, opt.io_dtype, b, context, s_q) > flop_budget ||
                        b * static_cast<double>(context) * per_token > cell_budget) {
                        plan.dropped.push_back(std::string(p.name) + " batch " + std::to_string(b) + " context " +
                                               std::to_string(context) + " s_q " + std::to_string(s_q));
                        continue;
                    }
                    session.shapes.push_back({b, s_q});
                }
            }
            if (!session.shapes.empty()) plan.sessions.push_back(session);
        }
    }
    return plan;
}

std::string run_prefill_grid(const PrefillPlan& plan, const Options& opt, const BenchEnv& env,
                             std::vector<std::string>* errors, Progress& progress) {
    const bool on_cpu = env.device == GQLA_DEVICE_CPU;
    const double cell_budget = on_cpu ? kCpuCellBytes : 0.5 * static_cast<double>(env.memory_cap);
    const int reps = std::min(opt.reps, on_cpu ? 5 : 15);
    const double min_seconds = on_cpu ? 0.05 : 0.02;
    const gqla_dtype dtype = opt.dtypes.front();
    std::vector<Cell> cells;
    const double t_start = now_s();

    for (const PrefillPlan::Session& session : plan.sessions) {
        const Preset& p = *session.preset;
        const int64_t context = session.context;
        const double per_token = cached_bytes_per_token(p, dtype, on_cpu);
        std::vector<Cell> kept;
        for (const PrefillPlan::Shape& shape : session.shapes)
            kept.push_back(Cell{&p, shape.batch, shape.s_q, context});
        WorkloadSpec spec = absorb_session_spec(p, opt, env, dtype, context);
        for (const Cell& c : kept) {
            spec.batch = std::max(spec.batch, c.batch);
            spec.max_s_q = std::max(spec.max_s_q, c.s_q);
            spec.max_q_tokens = std::max<int64_t>(spec.max_q_tokens, static_cast<int64_t>(c.batch) * c.s_q);
        }
        // Two batches to alternate between: prefill calls are compute
        // bound, the rotation only keeps one call's cache out of the next.
        const int64_t cap = static_cast<int64_t>(cell_budget / (per_token * static_cast<double>(context)));
        spec.sets = cap >= 2 * spec.batch ? 2 : 1;
        long long timed = 0;
        try {
            DecodeWorkload work(spec);
            for (Cell& c : kept) {
                const gqla_cost_report r = work.predict(c.batch, c.s_q);
                c.cost[0] = r.absorb;
                c.cost[1] = r.transient;
                c.cost[2] = r.gqa;
                c.call_chosen = r.call_chosen;
                for (int k = 0; k < 2; ++k) {
                    c.meas[k] =
                        work.time_calls(CallShape::uniform(c.batch, c.s_q, kForms[k]), reps, 1.0, opt.hot, min_seconds);
                    ++timed;
                    progress.done(cell_label(c, kForms[k]));
                }
                work.call(0, CallShape::uniform(c.batch, c.s_q, GQLA_PATH_AUTO));
                c.auto_latent = work.last_path_taken();
            }
            work.select_path(GQLA_PATH_GQA);  // expand once, outside the timings
            for (Cell& c : kept) {
                c.meas[2] =
                    work.time_calls(CallShape::uniform(c.batch, c.s_q, GQLA_PATH_GQA), reps, 1.0, opt.hot, min_seconds);
                if (work.last_path_taken() != GQLA_PATH_GQA)
                    throw GqlaError(GQLA_ERR_INTERNAL, std::string("path GQA over the kept cache ran on ") +
                                                           path_name(work.last_path_taken()));
                ++timed;
                progress.done(cell_label(c, GQLA_PATH_GQA));
                work.call(0, CallShape::uniform(c.batch, c.s_q, GQLA_PATH_AUTO));
                c.auto_kept = work.last_path_taken();
            }
            cells.insert(cells.end(), kept.begin(), kept.end());
        } catch (const GqlaError& e) {
            errors->push_back(std::string(p.name) + " context " + std::to_string(context) + " (prefill): " + e.what());
            progress.done(std::string(p.name) + " context " + std::to_string(context) + " (prefill) failed",
                          static_cast<long long>(kept.size()) * kFormCount - timed);
        }
    }

    Scores latent, with_kept;
    int pick_as_predicted = 0;
    std::string rows = "[";
    for (const Cell& c : cells) {
        const double regret_latent = latent.add(c, c.auto_latent, 2);
        const double regret_kept = with_kept.add(c, c.auto_kept);
        pick_as_predicted += c.auto_latent == c.call_chosen;
        JsonObject j;
        j.str("preset", c.preset->name).integer("batch", c.batch).integer("context", c.context).integer("s_q", c.s_q);
        for (int k = 0; k < kFormCount; ++k) {
            const std::string form = path_name(kForms[k]);
            j.num(("meas_" + form + "_ms").c_str(), c.meas[k] * 1e3, 4)
                .num(("pred_" + form + "_ms").c_str(), c.cost[k].time_s * 1e3, 4);
        }
        j.str("call_chosen", path_name(c.call_chosen))
            .str("auto_latent", path_name(c.auto_latent))
            .str("best_latent", path_name(kForms[best_of(c, 2)]))
            .num("regret_latent", regret_latent, 3)
            .str("auto_kept", path_name(c.auto_kept))
            .str("best_kept", path_name(kForms[best_of(c, kFormCount)]))
            .num("regret_kept", regret_kept, 3);
        // The library's counts and rates, for refitting the efficiencies.
        for (int k = 0; k < kFormCount; ++k) {
            const std::string form = path_name(kForms[k]);
            j.num(("bytes_" + form).c_str(), c.cost[k].bytes, 12).num(("flops_" + form).c_str(), c.cost[k].flops, 12);
        }
        j.num("read_gbps", c.cost[0].bytes / c.cost[0].memory_s * 1e-9, 6)
            .num("peak_gflops", c.cost[0].flops / c.cost[0].compute_s * 1e-9, 6);
        rows += (rows.size() > 1 ? "," : "") + j.dump();
    }
    rows += "]";

    JsonObject out;
    out.str("forms",
            "absorb, transient (GQA form over latent rows up-projected per call), gqa (over the kept "
            "expanded cache); measured with explicit per-call paths, AUTO's pick from an AUTO call's path_taken")
        .raw("s_q", "[64,512,2048]")
        .raw("latent_only", latent.json())
        .raw("kept_cache", with_kept.json())
        .integer("auto_latent_as_predicted", pick_as_predicted)
        .num("seconds", now_s() - t_start, 3)
        .raw("dropped", json_string_array(plan.dropped))
        .raw("rows", rows);
    return out.dump();
}

}  // namespace gqla::bench

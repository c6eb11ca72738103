// SPDX-License-Identifier: Apache-2.0
#include "validate_auto.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "build_info.hpp"
#include "decode_workload.hpp"
#include "json_writer.hpp"
#include "progress.hpp"
#include "support.hpp"
#include "validate_auto_grid.hpp"
#include "validate_auto_prefill.hpp"
#include "validate_auto_sparse.hpp"

namespace gqla::bench {
namespace {

const int kBatches[] = {1, 8, 64};
const int64_t kContexts[] = {512, 4096, 16384};
const int kQueryLens[] = {1, 2, 4};
// Timing rounds of the decode grid on a CPU (see run_validate_auto).
constexpr int kCpuDecodeRounds = 2;

// On the 2-core CPU the whole sweep must fit in about a minute: a cell is
// kept when its cache on the GQA path (latent + expanded) stays under
// kCpuCellBytes (validate_auto_grid.hpp).
// Sequences a (preset, context) session holds on CPU: enough disjoint batches
// to rotate over for cold caches, within the same byte budget.
constexpr double kCpuRotationBytes = 256.0 * 1024 * 1024;

struct Row {
    const Preset* preset;
    int batch, s_q;
    int64_t context;
    double pred[2] = {0, 0};  // [0] GQA path, [1] absorb path (seconds)
    double meas[2] = {0, 0};
    gqla_path_cost cost[2] = {};  // what the prediction priced, for refitting the efficiencies
    gqla_path chosen = GQLA_PATH_AUTO;
};

int index_of(gqla_path p) { return p == GQLA_PATH_GQA ? 0 : 1; }

// One session of the decode grid: a preset at one context, timing every
// batch up to `max_batch` (the largest within the byte budget).
struct DecodeSession {
    const Preset* preset;
    int64_t context;
    int max_batch;

    // Timings of one round: both paths of every kept batch and s_q.
    long long cells() const {
        long long batches = 0;
        for (int b : kBatches) batches += b <= max_batch;
        return batches * static_cast<long long>(std::size(kQueryLens)) * 2;
    }
};

std::vector<DecodeSession> plan_decode_grid(gqla_dtype dtype, double cell_budget, std::vector<std::string>* dropped) {
    std::vector<DecodeSession> sessions;
    for (const Preset& p : all_presets()) {
        if (!p.is_gqla()) continue;  // one path only: nothing to choose
        const double per_token = stored_bytes_per_token(p, GQLA_PATH_GQA, dtype);
        for (int64_t context : kContexts) {
            int max_batch = 0;
            for (int b : kBatches) {
                if (b * static_cast<double>(context) * per_token <= cell_budget)
                    max_batch = b;
                else
                    dropped->push_back(std::string(p.name) + " batch " + std::to_string(b) + " context " +
                                       std::to_string(context));
            }
            if (max_batch > 0) sessions.push_back({&p, context, max_batch});
        }
    }
    return sessions;
}

std::string cell_label(const Row& r, const char* path) {
    return std::string(r.preset->name) + " batch " + std::to_string(r.batch) + " context " + std::to_string(r.context) +
           " s_q " + std::to_string(r.s_q) + " " + path;
}

}  // namespace

int run_validate_auto(const Options& opt, const BenchEnv& env) {
    const bool on_cpu = env.device == GQLA_DEVICE_CPU;
    const double cell_budget = on_cpu ? kCpuCellBytes : 0.5 * static_cast<double>(env.memory_cap);
    const double rotation_budget = on_cpu ? kCpuRotationBytes : 4.0 * kColdBytes;
    const int reps = std::min(opt.reps, on_cpu ? 7 : 15);
    // Calls below a few ms repeat for at least this long: 7 calls of 0.2 ms
    // would let one busy moment of a shared machine decide a cell.
    const double min_seconds = on_cpu ? 0.05 : 0.02;
    // Rounds over the decode grid (DecodeSession::cells): the GPU's timings
    // repeat to within a few percent, a shared 2-core host's do not.
    const int rounds = on_cpu ? kCpuDecodeRounds : 1;
    const gqla_dtype dtype = opt.dtypes.front();

    std::vector<Row> rows;
    std::vector<std::string> dropped;
    std::vector<std::string> errors;
    const double t_start = now_s();

    const std::vector<DecodeSession> decode_plan = plan_decode_grid(dtype, cell_budget, &dropped);
    const PrefillPlan prefill_plan = plan_prefill_grid(opt, env);
    const SparsePlan sparse_plan = plan_sparse_grid(opt, env);
    long long total_cells = prefill_plan.cells() + sparse_plan.cells();
    for (const DecodeSession& d : decode_plan) total_cells += d.cells() * rounds;
    Progress progress("gqla-bench validate-auto", total_cells, !opt.quiet);

    for (const DecodeSession& session : decode_plan) {
        const Preset& p = *session.preset;
        const int64_t context = session.context;
        const int max_batch = session.max_batch;
        const double per_token = stored_bytes_per_token(p, GQLA_PATH_GQA, dtype);
        long long timed = 0;
        const double read_per_seq = read_bytes_per_token(p, GQLA_PATH_GQA, dtype) * context;
        const int64_t want = static_cast<int64_t>(std::ceil(rotation_budget / read_per_seq));
        const int64_t cap = static_cast<int64_t>(cell_budget / (per_token * context));
        WorkloadSpec spec = absorb_session_spec(p, opt, env, dtype, context);
        spec.batch = max_batch;
        spec.max_s_q = 4;
        // Sequences = batch * sets: as many as the rotation wants, at
        // least one batch, at most what the byte budget allows.
        const int64_t nseq = std::max<int64_t>(max_batch, std::min<int64_t>(want, std::max<int64_t>(cap, max_batch)));
        spec.sets = static_cast<int>((nseq + max_batch - 1) / max_batch);

        std::vector<Row> cell_rows;
        try {
            DecodeWorkload work(spec);
            for (int b : kBatches) {
                if (b > max_batch) continue;
                for (int s_q : kQueryLens) {
                    Row r{&p, b, s_q, context};
                    const gqla_cost_report c = work.predict(b, s_q);
                    r.pred[0] = c.gqa.time_s;
                    r.pred[1] = c.absorb.time_s;
                    r.cost[0] = c.gqa;
                    r.cost[1] = c.absorb;
                    r.chosen = c.chosen;
                    cell_rows.push_back(r);
                }
            }
            // Each round times every cell on absorb, then (expanded once,
            // outside the timings) on the GQA path; a cell keeps the faster
            // median of its rounds per path, so a busy moment of a shared
            // host that hits one path's timing in one round decides nothing.
            for (int round = 0; round < rounds; ++round) {
                for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
                    work.select_path(path);
                    const int k = index_of(path);
                    for (Row& r : cell_rows) {
                        const double t = work.time_decode(r.batch, r.s_q, reps, 1.0, opt.hot, min_seconds);
                        r.meas[k] = round == 0 ? t : std::min(r.meas[k], t);
                        ++timed;
                        progress.done(cell_label(r, path_name(path)));
                    }
                }
            }
            rows.insert(rows.end(), cell_rows.begin(), cell_rows.end());
        } catch (const GqlaError& e) {
            errors.push_back(std::string(p.name) + " context " + std::to_string(context) + ": " + e.what());
            progress.done(std::string(p.name) + " context " + std::to_string(context) + " failed",
                          session.cells() * rounds - timed);
        }
    }

    int correct = 0, pred_close = 0, pred_pairs = 0;
    double regret_sum = 0, regret_max = 0;
    std::string rows_json = "[";
    for (const Row& r : rows) {
        const gqla_path best = r.meas[0] <= r.meas[1] ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        const double regret = r.meas[index_of(r.chosen)] / r.meas[index_of(best)] - 1.0;
        correct += r.chosen == best;
        regret_sum += regret;
        regret_max = std::max(regret_max, regret);
        for (int k = 0; k < 2; ++k) {
            ++pred_pairs;
            pred_close += std::fabs(r.pred[k] / r.meas[k] - 1.0) <= 0.35;
        }
        JsonObject j;
        j.str("preset", r.preset->name)
            .integer("batch", r.batch)
            .integer("context", r.context)
            .integer("s_q", r.s_q)
            .num("pred_gqa_ms", r.pred[0] * 1e3, 4)
            .num("pred_absorb_ms", r.pred[1] * 1e3, 4)
            .num("meas_gqa_ms", r.meas[0] * 1e3, 4)
            .num("meas_absorb_ms", r.meas[1] * 1e3, 4)
            .str("auto", path_name(r.chosen))
            .str("best", path_name(best))
            .num("regret", regret, 3)
            // Inputs of bench/fit_efficiency.py: the roofline counts of both
            // paths and the rates the session's probe priced them with.
            .num("bytes_gqa", r.cost[0].bytes, 12)
            .num("flops_gqa", r.cost[0].flops, 12)
            .num("bytes_absorb", r.cost[1].bytes, 12)
            .num("flops_absorb", r.cost[1].flops, 12)
            // ... of which the q~ and o projections (priced apart where the
            // backend reports absorb_projection_compute).
            .num("flops_absorb_projection",
                 double(r.batch) * r.s_q * r.preset->H * 2.0 * (r.preset->d_c + r.preset->d_v) * r.preset->r, 12)
            .num("read_gbps", r.cost[0].bytes / r.cost[0].memory_s * 1e-9, 6)
            .num("peak_gflops", r.cost[0].flops / r.cost[0].compute_s * 1e-9, 6);
        rows_json += (rows_json.size() > 1 ? "," : "") + j.dump();
    }
    rows_json += "]";

    // Prefill chunks: gqla_attention's per-call choice among three forms.
    const std::string prefill = run_prefill_grid(prefill_plan, opt, env, &errors, progress);
    // Sparse (top-k) calls: the same per-call choice, each query reading its own rows.
    const std::string sparse = run_sparse_grid(sparse_plan, opt, env, &errors, progress);

    const int cases = static_cast<int>(rows.size());
    JsonObject out;
    out.str("device", device_name(env.device))
        .str("dtype", dtype_label(dtype))
        .integer("cases", cases)
        .integer("correct", correct)
        .num("fraction", cases ? static_cast<double>(correct) / cases : NAN, 4)
        .num("mean_regret", cases ? regret_sum / cases : NAN, 4)
        .num("max_regret", cases ? regret_max : NAN, 4)
        .num("pred_within_35pct", pred_pairs ? static_cast<double>(pred_close) / pred_pairs : NAN, 4)
        .integer("pred_pairs", pred_pairs)
        .num("read_gbps_machine", env.roofline.read_gbps, 4)
        .num("peak_gflops_machine", env.roofline.peak_for(dtype), 4)
        .num("seconds", now_s() - t_start, 3)
        .str("note", std::string(on_cpu ? "GQLA presets only (GQA kind has one path); on CPU cells whose GQA-path "
                                          "cache exceeds 1.25 GiB are dropped (listed in 'dropped')"
                                        : "GQLA presets only (GQA kind has one path)") +
                         "; top-level fields: decode steps (s_q 1, 2, 4; session path GQA vs absorb); 'prefill': "
                         "chunks of s_q 64, 512, 2048 through gqla_attention (absorb, transient, GQA over the kept "
                         "cache); 'sparse': top-k calls (K 256, 2048; s_q 1, 4) over the same three forms")
        .raw("dropped", json_string_array(dropped))
        .raw("errors", json_string_array(errors))
        .raw("rows", rows_json)
        .raw("prefill", prefill)
        .raw("sparse", sparse);
    add_build_info(out);
    std::printf("%s\n", out.dump().c_str());
    return errors.empty() && cases > 0 ? 0 : 1;
}

}  // namespace gqla::bench

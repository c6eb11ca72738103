// SPDX-License-Identifier: Apache-2.0
#include "sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "accuracy_check.hpp"
#include "attention_counts.hpp"
#include "busy_threads.hpp"
#include "case_report.hpp"
#include "decode_workload.hpp"
#include "naive_baseline.hpp"
#include "progress.hpp"
#include "support.hpp"

namespace gqla::bench {
namespace {

// s_q up to this many queries is multi-token decoding (speculative steps):
// those rows go through gqla_decode as they always did, so their numbers
// stay comparable across versions. Larger s_q are prefill chunks.
constexpr int kDecodeMaxQueries = 16;

// GQA kind: its one path. GQLA: --path in order, each once.
std::vector<gqla_path> paths_for(const Preset& p, const Options& opt) {
    if (!p.is_gqla()) return {GQLA_PATH_GQA};
    std::vector<gqla_path> out;
    for (gqla_path path : opt.paths)
        if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
    return out;
}

// The session an attention row runs on: the expanded cache is kept only
// when the row asks for the GQA path over it; every other form reads the
// latent (absorb) or up-projects it per call (transient), and AUTO per call
// chooses between those two there, as on a server that keeps no expanded cache.
gqla_path attention_session_path(const Preset& p, gqla_path call) {
    if (!p.is_gqla()) return GQLA_PATH_AUTO;
    return call == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
}

// Sequence lengths of one case: `context` tokens each, or `lengths` (mean
// `context`) with --mixed; `label` names the kind in the output.
struct LengthCase {
    int64_t context;
    std::vector<int64_t> lengths;
    std::string label;

    std::vector<int64_t> of_batch(int batch) const {
        return lengths.empty() ? std::vector<int64_t>(static_cast<size_t>(batch), context) : lengths;
    }
};

// The rows one session times: decode rows (gqla_decode) or attention rows
// (gqla_attention), uniform s_q or the ragged mix.
struct RowGroup {
    bool attention = false;
    std::vector<int> s_qs;  // uniform rows
    bool ragged = false;    // one row: the --q-lens mix
};

std::vector<RowGroup> row_groups(const Options& opt, gqla_path path) {
    if (!opt.mix.empty()) return {RowGroup{true, {}, true}};
    RowGroup decode, attention;
    attention.attention = true;
    for (int s_q : opt.s_qs) {
        const bool attn = path == GQLA_PATH_GQA_TRANSIENT || s_q > kDecodeMaxQueries;
        (attn ? attention : decode).s_qs.push_back(s_q);
    }
    std::vector<RowGroup> groups;
    if (!decode.s_qs.empty()) groups.push_back(decode);
    if (!attention.s_qs.empty()) groups.push_back(attention);
    return groups;
}

// `runnable_s_q`: the largest s_q of the group the sequences can hold.
WorkloadSpec workload_spec(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype dtype, gqla_path path,
                           const RowGroup& group, int batch, const LengthCase& lc, int runnable_s_q,
                           std::string* why_not) {
    const int64_t context = lc.context;
    WorkloadSpec spec;
    spec.lengths = lc.lengths;
    spec.preset = &p;
    spec.shape.device = env.device;
    spec.shape.path = group.attention ? attention_session_path(p, path) : path;
    spec.shape.cache_dtype = dtype;
    spec.shape.io_dtype = opt.io_dtype;
    spec.shape.threads = opt.threads;
    spec.shape.page_size = opt.page_size;
    spec.batch = batch;
    spec.context = context;
    if (group.ragged) {
        spec.max_s_q = opt.mix.max_q_len();
        spec.max_q_tokens = opt.mix.total_queries();
    } else {
        spec.max_s_q = std::max(runnable_s_q, 1);
    }
    // AUTO: size the rotation for the path the cost model expects to run
    // (sizing for the small latent and then expanding it would cost minutes).
    gqla_path expected = spec.shape.path;
    if (p.is_gqla() && expected == GQLA_PATH_AUTO) {
        const gqla_config cfg = make_config(p, spec.shape);
        gqla_workload w{sizeof(gqla_workload), batch, context, spec.max_s_q, 0};
        gqla_cost_report r{};
        r.struct_size = sizeof r;
        expected = gqla_predict_cost(&cfg, nullptr, &w, &r) == GQLA_OK ? r.chosen : GQLA_PATH_GQA;
    }
    spec.sets = sets_for_cold(p, expected, dtype, batch, context, opt.cold_bytes(), opt.hot);
    // Fit the rotation into memory; a batch that alone exceeds it cannot run.
    // A call that may take the transient form needs room for expanded rows
    // of the session's pages too (the CUDA backend keeps one layer of them).
    const bool may_expand = spec.shape.path != GQLA_PATH_ABSORB || (group.attention && path != GQLA_PATH_ABSORB);
    const gqla_path stored_path = may_expand ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
    const double stored = stored_bytes_per_token(p, stored_path, dtype) * batch * static_cast<double>(context);
    spec.sets = std::min(spec.sets, static_cast<int>(static_cast<double>(env.memory_cap) / stored));
    if (spec.sets < 1)
        *why_not = "cache of " + std::to_string(static_cast<long long>(stored / 1e6)) +
                   " MB exceeds the memory cap of " + std::to_string(static_cast<long long>(env.memory_cap / 1000000)) +
                   " MB";
    return spec;
}

// Bytes, FLOPs, compute roof, roofline floor and prediction of a timed row.
void account(CaseResult& r, DecodeWorkload& work, const BenchEnv& env, const std::vector<int64_t>& lengths,
             const std::vector<int32_t>& q_lens) {
    const Preset& p = *r.preset;
    const double bandwidth = env.roofline.read_gbps * 1e9;
    if (!r.attention) {
        r.active = work.active_path();
        const gqla_cost_report cost = work.predict(r.batch, r.s_q);
        const gqla_path_cost c = r.active == GQLA_PATH_ABSORB ? cost.absorb : cost.gqa;
        r.pred = c;
        r.bytes = c.bytes;
        r.flops = c.flops;
        // CUDA: the cost model knows which peak (SIMT or tensor) the kernel uses.
        r.peak_gflops = env.device == GQLA_DEVICE_CUDA && c.compute_s > 0 ? c.flops / c.compute_s / 1e9
                                                                          : env.roofline.peak_for(r.dtype);
        r.floor_s = std::max(c.bytes / bandwidth, r.flops / (r.peak_gflops * 1e9));
        return;
    }
    r.active = p.is_gqla() ? work.last_path_taken() : GQLA_PATH_GQA;
    const AttentionCounts counts = count_attention(p, r.active, r.dtype, r.io_dtype, lengths, q_lens);
    r.bytes = counts.bytes;
    r.flops = counts.flops;
    r.visible_pairs = counts.visible_pairs;
    r.peak_gflops = env.roofline.peak_for(r.dtype);
    r.floor_s = std::max(r.bytes / bandwidth, r.flops / (r.peak_gflops * 1e9));
    if (r.mix.empty()) {  // the cost model prices uniform calls only
        const gqla_cost_report cost = work.predict(r.batch, r.s_q);
        r.pred = r.active == GQLA_PATH_ABSORB          ? cost.absorb
                 : r.active == GQLA_PATH_GQA_TRANSIENT ? cost.transient
                                                       : cost.gqa;
        if (p.is_gqla()) r.call_chosen = cost.call_chosen;
    }
}

// Times every row of `group` for one (preset, path, batch, lengths), one
// session per cache dtype of `dtypes`; results[k] holds dtype k's rows. With
// several dtypes (--interleave) their sessions live side by side (each with
// its share of the memory cap) and take turns call by call.
std::vector<std::vector<CaseResult>> time_cases(const Preset& p, const Options& opt, const BenchEnv& env,
                                                const std::vector<gqla_dtype>& dtypes, gqla_path path,
                                                const RowGroup& group, int batch, const LengthCase& lc,
                                                std::vector<WorkloadSpec>* specs_out) {
    const std::vector<int64_t> lengths = lc.of_batch(batch);
    const int64_t shortest = *std::min_element(lengths.begin(), lengths.end());
    int runnable_s_q = 0;
    for (int s_q : group.s_qs)
        if (s_q <= shortest) runnable_s_q = std::max(runnable_s_q, s_q);
    BenchEnv shared = env;
    shared.memory_cap = env.memory_cap / static_cast<int64_t>(dtypes.size());
    const size_t n = dtypes.size();
    std::vector<std::string> why_not(n);
    std::vector<std::unique_ptr<DecodeWorkload>> work(n);
    std::vector<bool> fits(n);
    specs_out->clear();
    for (size_t k = 0; k < n; ++k) {
        specs_out->push_back(
            workload_spec(p, opt, shared, dtypes[k], path, group, batch, lc, runnable_s_q, &why_not[k]));
        fits[k] = why_not[k].empty();
        if (fits[k] && (group.ragged ? opt.mix.max_q_len() <= shortest : runnable_s_q > 0)) {
            try {
                work[k] = std::make_unique<DecodeWorkload>((*specs_out)[k]);
            } catch (const GqlaError& e) {
                why_not[k] = e.what();
            }
        }
    }
    std::vector<CallShape> calls;
    if (group.ragged) calls.push_back(CallShape::ragged(opt.mix.q_lens(), path));
    for (int s_q : group.s_qs)
        calls.push_back(group.attention ? CallShape::uniform(batch, s_q, path) : CallShape::decode(batch, s_q));

    std::vector<std::vector<CaseResult>> results(n);
    for (const CallShape& call : calls) {
        std::vector<CaseResult> rows(n);
        std::vector<DecodeWorkload*> timed;
        std::vector<size_t> timed_k;
        for (size_t k = 0; k < n; ++k) {
            CaseResult& r = rows[k];
            r.preset = &p;
            r.attention = call.attention;
            r.requested = path;
            r.dtype = dtypes[k];
            r.io_dtype = opt.io_dtype;
            r.batch = call.batch;
            r.context = lc.context;
            r.lengths = lc.label;
            r.mix = group.ragged ? opt.mix.label() : "";
            r.s_q = call.s_q;
            r.query_rows = call.query_rows();
            r.sets = (*specs_out)[k].sets;
            r.error = why_not[k];
            r.expected_skip = !fits[k];
            if (r.error.empty() && call.s_q > shortest) {
                r.error = "s_q " + std::to_string(call.s_q) + " exceeds the " + std::to_string(shortest) +
                          " cached tokens of the shortest sequence";
                r.expected_skip = true;
            }
            if (work[k] && r.error.empty()) {
                timed.push_back(work[k].get());
                timed_k.push_back(k);
            }
        }
        try {
            std::vector<double> seconds;
            {
                const BusyThreads busy(opt.busy);
                // One workload: the same loop as time_calls.
                if (!timed.empty()) seconds = time_interleaved(timed, call, opt.reps, 3.0, opt.hot);
            }
            const std::vector<int32_t> q_lens =
                call.q_lens.empty() ? std::vector<int32_t>(static_cast<size_t>(call.batch), call.s_q) : call.q_lens;
            for (size_t i = 0; i < timed.size(); ++i) {
                CaseResult& r = rows[timed_k[i]];
                DecodeWorkload& w = *timed[i];
                r.seconds = seconds[i];
                r.p99_seconds = w.last_p99_seconds();
                r.calls = w.last_calls();
                r.busy = opt.busy;
                r.interleaved = timed.size() > 1;
                r.device_seconds = w.last_device_seconds();
                r.io_on_device = w.io_on_device();
                account(r, w, env, lengths, q_lens);
            }
        } catch (const GqlaError& e) {
            for (size_t k : timed_k) rows[k].error = e.what();
        }
        for (size_t k = 0; k < n; ++k) results[k].push_back(rows[k]);
    }
    return results;
}

// The length cases of one batch size: every --context, or with --mixed the
// spread lengths followed by their uniform equivalent.
std::vector<LengthCase> length_cases(const Options& opt, int batch) {
    std::vector<LengthCase> cases;
    if (opt.mixed_max == 0) {
        for (int64_t c : opt.contexts) cases.push_back({c, {}, ""});
        return cases;
    }
    LengthCase mixed;
    int64_t total = 0;
    for (int i = 0; i < batch; ++i) {
        const int64_t len =
            batch == 1 ? opt.mixed_max : opt.mixed_min + (opt.mixed_max - opt.mixed_min) * i / (batch - 1);
        mixed.lengths.push_back(len);
        total += len;
    }
    mixed.context = total / batch;
    mixed.label = "mixed " + std::to_string(opt.mixed_min) + ":" + std::to_string(opt.mixed_max);
    cases.push_back(mixed);
    cases.push_back({mixed.context, {}, "uniform (mean of mixed)"});
    return cases;
}

// The accuracy check of a timed row: the same session kind, dtype and form
// (AUTO resolved to the form it took), on short sequences that still hold
// every query of the row.
AccuracySpec accuracy_spec(const Preset& p, const WorkloadSpec& spec, const CaseResult& r, const Options& opt) {
    AccuracySpec acc;
    acc.preset = &p;
    acc.shape = spec.shape;
    acc.s_q = r.s_q;
    if (!r.attention) {
        acc.shape.path = r.active;
        return acc;
    }
    acc.attention = true;
    acc.call_path = r.active;
    acc.shape.path = attention_session_path(p, r.active);
    if (!r.mix.empty()) acc.q_lens = opt.mix.shrunk(2).q_lens();
    return acc;
}

// Rows the sweep will print, counted over the same loops as run_sweep.
long long planned_rows(const Options& opt, const std::vector<int>& batches) {
    long long rows = 0;
    for (const std::string& name : opt.presets) {
        const Preset& p = *find_preset(name);
        for (gqla_path path : paths_for(p, opt))
            for (int batch : batches)
                for (size_t c = 0; c < length_cases(opt, batch).size(); ++c)
                    for (const RowGroup& group : row_groups(opt, path))
                        rows += group.ragged ? 1 : static_cast<long long>(group.s_qs.size());
    }
    return rows * static_cast<long long>(opt.dtypes.size());
}

std::string progress_label(const CaseResult& r) {
    return std::string(r.preset->name) + " " + path_name(r.error.empty() ? r.active : r.requested) + " " +
           dtype_label(r.dtype) + " batch " + std::to_string(r.batch) + " context " + std::to_string(r.context) +
           (r.mix.empty() ? " s_q " + std::to_string(r.s_q) : " q_lens " + r.mix);
}

}  // namespace

int run_sweep(const Options& opt, const BenchEnv& env) {
    if (!opt.json) print_table_header(env);
    std::fflush(stdout);
    int failures = 0;
    std::map<std::string, double> accuracy_cache;
    std::map<std::tuple<std::string, int, int, int64_t, int>, NaiveResult> baseline_cache;
    const std::vector<int> batches = opt.mix.empty() ? opt.batches : std::vector<int>{opt.mix.batch()};
    Progress progress("gqla-bench sweep", planned_rows(opt, batches), !opt.quiet);

    for (const std::string& name : opt.presets) {
        const Preset& p = *find_preset(name);
        // --interleave: all dtypes of a row group at once, taking turns.
        std::vector<std::vector<gqla_dtype>> dtype_sets;
        if (opt.interleave)
            dtype_sets.push_back(opt.dtypes);
        else
            for (gqla_dtype d : opt.dtypes) dtype_sets.push_back({d});
        for (const std::vector<gqla_dtype>& dtypes : dtype_sets)
            for (gqla_path path : paths_for(p, opt))
                for (int batch : batches)
                    for (const LengthCase& lc : length_cases(opt, batch))
                        for (const RowGroup& group : row_groups(opt, path)) {
                            std::vector<WorkloadSpec> specs;
                            // The sessions are gone before the baseline allocates its own cache.
                            std::vector<std::vector<CaseResult>> by_dtype =
                                time_cases(p, opt, env, dtypes, path, group, batch, lc, &specs);
                            // Row by row, the dtypes of one row next to each other.
                            std::vector<CaseResult> results;
                            std::vector<size_t> of_dtype;
                            for (size_t i = 0; i < by_dtype[0].size(); ++i)
                                for (size_t k = 0; k < by_dtype.size(); ++k) {
                                    results.push_back(by_dtype[k][i]);
                                    of_dtype.push_back(k);
                                }
                            for (size_t row = 0; row < results.size(); ++row) {
                                CaseResult& r = results[row];
                                const gqla_dtype dtype = r.dtype;
                                const WorkloadSpec& spec = specs[of_dtype[row]];
                                if (!r.error.empty()) {
                                    if (!r.expected_skip) ++failures;
                                } else {
                                    if (opt.check_accuracy) {
                                        const std::string key = std::string(p.name) + "|" +
                                                                (r.attention ? "attention" : "decode") + "|" +
                                                                path_name(r.active) + "|" + dtype_label(dtype) + "|" +
                                                                std::to_string(r.s_q) + "|" + r.mix;
                                        auto it = accuracy_cache.find(key);
                                        if (it == accuracy_cache.end()) {
                                            double err = NAN;
                                            try {
                                                err = relative_error_vs_reference(accuracy_spec(p, spec, r, opt));
                                            } catch (const GqlaError& e) {
                                                std::fprintf(stderr, "accuracy check: %s\n", e.what());
                                            }
                                            it = accuracy_cache.emplace(key, err).first;
                                            const double bound = error_bound(dtype, opt.io_dtype);
                                            if (!(err <= bound)) {
                                                ++failures;
                                                std::fprintf(
                                                    stderr,
                                                    "%s %s %s s_q=%d%s%s: rel_err %.3g exceeds the bound %.0e\n",
                                                    p.name, path_name(r.active), dtype_label(dtype), r.s_q,
                                                    r.mix.empty() ? "" : " q_lens ", r.mix.c_str(), err, bound);
                                            }
                                        }
                                        r.rel_err = it->second;
                                    }
                                    if (!opt.baseline) {
                                        r.baseline_note = "disabled (--no-baseline)";
                                    } else if (r.attention) {
                                        r.baseline_note = "decode rows only";
                                    } else if (env.device == GQLA_DEVICE_CUDA) {
                                        r.baseline_note =
                                            "no in-process GPU baseline: see bench/cuda/torch_bench_presets.py";
                                    } else {
                                        const auto key = std::make_tuple(std::string(p.name), static_cast<int>(dtype),
                                                                         batch, lc.context, r.s_q);
                                        auto it = baseline_cache.find(key);
                                        if (it == baseline_cache.end())
                                            it = baseline_cache
                                                     .emplace(key, time_naive_baseline(
                                                                       p, dtype, batch, lc.context, r.s_q, env.threads,
                                                                       std::max(3, opt.reps / 4), opt.hot,
                                                                       opt.cold_bytes(), env.memory_cap))
                                                     .first;
                                        if (it->second.ran)
                                            r.baseline_s = it->second.seconds;
                                        else
                                            r.baseline_note = it->second.skipped;
                                    }
                                }
                                if (opt.json)
                                    print_json(r, env);
                                else
                                    print_table_row(r);
                                std::fflush(stdout);
                                progress.done(progress_label(r));
                            }
                        }
    }
    return failures == 0 ? 0 : 1;
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
#include "sweep.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "accuracy_check.hpp"
#include "busy_threads.hpp"
#include "decode_workload.hpp"
#include "json_writer.hpp"
#include "naive_baseline.hpp"
#include "support.hpp"

namespace gqla::bench {
namespace {

struct CaseResult {
    const Preset* preset = nullptr;
    gqla_path requested = GQLA_PATH_AUTO;
    gqla_path active = GQLA_PATH_AUTO;
    gqla_dtype dtype = GQLA_DTYPE_BF16;
    gqla_dtype io_dtype = GQLA_DTYPE_F32;
    int batch = 0, s_q = 0;
    int64_t context = 0;        // mean length with --mixed
    std::string lengths;        // "" (uniform), "mixed MIN:MAX" or "uniform (mean of mixed)"
    int sets = 0;
    bool io_on_device = false;  // q/o in GPU memory (no copies in the time)
    double seconds = 0;         // median wall time of one call
    double p99_seconds = 0;     // 99th percentile of the same calls
    int calls = 0;              // timed calls
    int busy = 0;               // --busy threads running meanwhile
    double device_seconds = 0;  // CUDA: median device time (events), 0 when not measured
    gqla_path_cost cost{};      // the library's count of bytes/FLOPs for the active path
    double floor_s = 0;         // max(bytes / measured bandwidth, flops / measured peak)
    std::optional<double> baseline_s;
    std::string baseline_note;
    std::optional<double> rel_err;
    std::string error;          // non-empty: the case could not run
};

std::vector<gqla_path> paths_for(const Preset& p, const Options& opt) {
    if (!p.is_gqla()) return {GQLA_PATH_GQA};
    if (opt.both_paths) return {GQLA_PATH_GQA, GQLA_PATH_ABSORB};
    return opt.paths;
}

void print_table_header(const BenchEnv& env) {
    std::printf("device %s | roofline: %.1f GB/s read, %.1f GFLOP/s f32 FMA peak", device_name(env.device),
                env.roofline.read_gbps, env.roofline.peak_gflops);
    if (env.roofline.peak_bf16_gflops > 0)
        std::printf(", %.1f GFLOP/s bf16 dot peak%s", env.roofline.peak_bf16_gflops,
                    env.roofline.kernels_use_bf16_dot ? " (roof of bf16 caches)" : " (not used by the kernels)");
    std::printf("\n  %s\n", env.roofline.source.c_str());
    std::printf("%-15s %-7s %-5s %5s %7s %4s %10s %10s %10s %8s %9s %6s %10s %10s %8s %9s\n", "preset", "path",
                "dtype", "batch", "context", "s_q", "ms", "p99_ms", "device_ms", "GB/s", "GFLOP/s", "roof", "pred_ms",
                "naive_ms", "speedup", "rel_err");
}

void print_table_row(const CaseResult& r) {
    if (!r.error.empty()) {
        std::printf("%-15s %-7s %-5s %5d %7lld %4d  skipped: %s\n", r.preset->name, path_name(r.requested),
                    dtype_label(r.dtype), r.batch, static_cast<long long>(r.context), r.s_q, r.error.c_str());
        return;
    }
    if (!r.lengths.empty()) std::printf("  (%s)\n", r.lengths.c_str());
    char naive[32] = "-", speedup[32] = "-", err[32] = "-", dev[32] = "-";
    if (r.device_seconds > 0) std::snprintf(dev, sizeof dev, "%.3f", r.device_seconds * 1e3);
    if (r.baseline_s) {
        std::snprintf(naive, sizeof naive, "%.3f", *r.baseline_s * 1e3);
        std::snprintf(speedup, sizeof speedup, "%.1fx", *r.baseline_s / r.seconds);
    }
    if (r.rel_err) std::snprintf(err, sizeof err, "%.1e", *r.rel_err);
    std::printf("%-15s %-7s %-5s %5d %7lld %4d %10.3f %10.3f %10s %8.1f %9.1f %5.0f%% %10.3f %10s %8s %9s\n",
                r.preset->name, path_name(r.active), dtype_label(r.dtype), r.batch, static_cast<long long>(r.context),
                r.s_q, r.seconds * 1e3, r.p99_seconds * 1e3, dev, r.cost.bytes / r.seconds / 1e9, r.cost.flops / r.seconds / 1e9,
                100.0 * r.floor_s / r.seconds, r.cost.time_s * 1e3, naive, speedup, err);
}

void print_json(const CaseResult& r, const BenchEnv& env) {
    JsonObject j;
    j.str("device", device_name(env.device))
        .str("preset", r.preset->name)
        .str("kind", r.preset->is_gqla() ? "gqla" : "gqa")
        .str("path", path_name(r.error.empty() ? r.active : r.requested))
        .str("path_requested", path_name(r.requested))
        .integer("H", r.preset->H)
        .integer("G", r.preset->G)
        .integer("batch", r.batch)
        .integer("context", r.context)
        .str("lengths", r.lengths.empty() ? "uniform" : r.lengths)
        .integer("s_q", r.s_q)
        .str("dtype", dtype_label(r.dtype))
        .str("io_dtype", dtype_label(r.io_dtype));
    if (!r.error.empty()) {
        j.null("ms").str("skipped", r.error);
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    j.num("ms", r.seconds * 1e3)
        .num("p99_ms", r.p99_seconds * 1e3)
        .integer("calls", r.calls)
        .integer("busy_threads", r.busy)
        .num("gbps", r.cost.bytes / r.seconds / 1e9)
        .num("gflops", r.cost.flops / r.seconds / 1e9)
        .num("roofline_frac", r.floor_s / r.seconds)
        .num("bytes", r.cost.bytes)
        .num("flops", r.cost.flops)
        .num("pred_ms", r.cost.time_s * 1e3)
        .str("pred_bound", r.cost.bound == GQLA_BOUND_COMPUTE ? "compute" : "memory");
    if (r.device_seconds > 0)
        j.num("device_ms", r.device_seconds * 1e3)
            .num("device_gbps", r.cost.bytes / r.device_seconds / 1e9)
            .num("device_roofline_frac", r.floor_s / r.device_seconds);
    if (r.baseline_s) j.num("baseline_ms", *r.baseline_s * 1e3).num("speedup", *r.baseline_s / r.seconds);
    else j.null("baseline_ms").str("baseline_note", r.baseline_note);
    if (r.rel_err) j.num("rel_err", *r.rel_err, 3);
    else j.null("rel_err");
    j.integer("cold_sets", r.sets)
        .str("io", r.io_on_device ? "device" : "host")
        .num("read_gbps_machine", env.roofline.read_gbps, 4)
        .num("peak_gflops_machine", env.roofline.peak_for(r.dtype), 4)
        .num("peak_fma_gflops_machine", env.roofline.peak_gflops, 4);
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace

namespace {

// Sequence lengths of one case: `context` tokens each, or `lengths` (mean
// `context`) with --mixed; `label` names the kind in the output.
struct LengthCase {
    int64_t context;
    std::vector<int64_t> lengths;
    std::string label;
};

WorkloadSpec workload_spec(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype dtype,
                           gqla_path path, int batch, const LengthCase& lc, std::string* why_not) {
    const int64_t context = lc.context;
    WorkloadSpec spec;
    spec.lengths = lc.lengths;
    spec.preset = &p;
    spec.shape.device = env.device;
    spec.shape.path = path;
    spec.shape.cache_dtype = dtype;
    spec.shape.io_dtype = opt.io_dtype;
    spec.shape.threads = opt.threads;
    spec.shape.page_size = opt.page_size;
    spec.batch = batch;
    spec.context = context;
    spec.max_s_q = *std::max_element(opt.s_qs.begin(), opt.s_qs.end());
    // AUTO: size the rotation for the path the cost model expects to run
    // (sizing for the small latent and then expanding it would cost minutes).
    gqla_path expected = path;
    if (p.is_gqla() && path == GQLA_PATH_AUTO) {
        const gqla_config cfg = make_config(p, spec.shape);
        gqla_workload w{sizeof(gqla_workload), batch, context, spec.max_s_q};
        gqla_cost_report r{};
        r.struct_size = sizeof r;
        expected = gqla_predict_cost(&cfg, nullptr, &w, &r) == GQLA_OK ? r.chosen : GQLA_PATH_GQA;
    }
    spec.sets = sets_for_cold(p, expected, dtype, batch, context, kColdBytes, opt.hot);
    // Fit the rotation into memory; a batch that alone exceeds it cannot run.
    const gqla_path stored_path = path == GQLA_PATH_ABSORB ? GQLA_PATH_ABSORB : GQLA_PATH_GQA;
    const double stored = stored_bytes_per_token(p, stored_path, dtype) * batch * static_cast<double>(context);
    spec.sets = std::min(spec.sets, static_cast<int>(static_cast<double>(env.memory_cap) / stored));
    if (spec.sets < 1)
        *why_not = "cache of " + std::to_string(static_cast<long long>(stored / 1e6)) +
                   " MB exceeds the memory cap of " + std::to_string(static_cast<long long>(env.memory_cap / 1000000)) +
                   " MB";
    return spec;
}

// Times every s_q of one (preset, dtype, path, batch, lengths) on one session.
std::vector<CaseResult> time_cases(const Preset& p, const Options& opt, const BenchEnv& env, gqla_dtype dtype,
                                   gqla_path path, int batch, const LengthCase& lc, WorkloadSpec* spec_out) {
    std::string why_not;
    const WorkloadSpec spec = workload_spec(p, opt, env, dtype, path, batch, lc, &why_not);
    *spec_out = spec;
    std::vector<CaseResult> results;
    std::unique_ptr<DecodeWorkload> work;
    if (why_not.empty()) {
        try {
            work = std::make_unique<DecodeWorkload>(spec);
        } catch (const GqlaError& e) {
            why_not = e.what();
        }
    }
    for (int s_q : opt.s_qs) {
        CaseResult r;
        r.preset = &p;
        r.requested = path;
        r.dtype = dtype;
        r.io_dtype = opt.io_dtype;
        r.batch = batch;
        r.context = lc.context;
        r.lengths = lc.label;
        r.s_q = s_q;
        r.sets = spec.sets;
        r.error = why_not;
        if (work) {
            try {
                {
                    const BusyThreads busy(opt.busy);
                    r.seconds = work->time_decode(batch, s_q, opt.reps, 3.0, opt.hot);
                }
                r.p99_seconds = work->last_p99_seconds();
                r.calls = work->last_calls();
                r.busy = opt.busy;
                r.device_seconds = work->last_device_seconds();
                r.active = work->active_path();
                r.io_on_device = work->io_on_device();
                const gqla_cost_report cost = work->predict(batch, s_q);
                r.cost = r.active == GQLA_PATH_ABSORB ? cost.absorb : cost.gqa;
                const double memory_floor = r.cost.bytes / (env.roofline.read_gbps * 1e9);
                // CUDA: the cost model knows which peak (SIMT or tensor) the kernel uses.
                const double compute_floor = env.device == GQLA_DEVICE_CUDA
                                                 ? r.cost.compute_s
                                                 : r.cost.flops / (env.roofline.peak_for(dtype) * 1e9);
                r.floor_s = std::max(memory_floor, compute_floor);
            } catch (const GqlaError& e) {
                r.error = e.what();
            }
        }
        results.push_back(r);
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
        const int64_t len = batch == 1 ? opt.mixed_max
                                       : opt.mixed_min + (opt.mixed_max - opt.mixed_min) * i / (batch - 1);
        mixed.lengths.push_back(len);
        total += len;
    }
    mixed.context = total / batch;
    mixed.label = "mixed " + std::to_string(opt.mixed_min) + ":" + std::to_string(opt.mixed_max);
    cases.push_back(mixed);
    cases.push_back({mixed.context, {}, "uniform (mean of mixed)"});
    return cases;
}

}  // namespace

int run_sweep(const Options& opt, const BenchEnv& env) {
    if (!opt.json) print_table_header(env);
    std::fflush(stdout);
    int failures = 0;
    std::map<std::tuple<std::string, int, int, int>, double> accuracy_cache;
    std::map<std::tuple<std::string, int, int, int64_t, int>, NaiveResult> baseline_cache;

    for (const std::string& name : opt.presets) {
        const Preset& p = *find_preset(name);
        for (gqla_dtype dtype : opt.dtypes)
            for (gqla_path path : paths_for(p, opt))
                for (int batch : opt.batches)
                    for (const LengthCase& lc : length_cases(opt, batch)) {
                        const int64_t context = lc.context;
                        WorkloadSpec spec;
                        // The session is gone before the baseline allocates its own cache.
                        std::vector<CaseResult> results =
                            time_cases(p, opt, env, dtype, path, batch, lc, &spec);
                        for (CaseResult& r : results) {
                            if (!r.error.empty()) {
                                if (r.error.find("memory cap") == std::string::npos) ++failures;
                            } else {
                                if (opt.check_accuracy) {
                                    const auto key = std::make_tuple(std::string(p.name), static_cast<int>(r.active),
                                                                     static_cast<int>(dtype), r.s_q);
                                    auto it = accuracy_cache.find(key);
                                    if (it == accuracy_cache.end()) {
                                        AccuracySpec acc;
                                        acc.preset = &p;
                                        acc.shape = spec.shape;
                                        acc.shape.path = r.active;
                                        acc.s_q = r.s_q;
                                        double err = NAN;
                                        try {
                                            err = relative_error_vs_reference(acc);
                                        } catch (const GqlaError& e) {
                                            std::fprintf(stderr, "accuracy check: %s\n", e.what());
                                        }
                                        it = accuracy_cache.emplace(key, err).first;
                                        const double bound = error_bound(dtype, opt.io_dtype);
                                        if (!(err <= bound)) {
                                            ++failures;
                                            std::fprintf(stderr, "%s %s %s s_q=%d: rel_err %.3g exceeds the bound %.0e\n",
                                                         p.name, path_name(r.active), dtype_label(dtype), r.s_q, err,
                                                         bound);
                                        }
                                    }
                                    r.rel_err = it->second;
                                }
                                if (!opt.baseline) {
                                    r.baseline_note = "disabled (--no-baseline)";
                                } else if (env.device == GQLA_DEVICE_CUDA) {
                                    r.baseline_note = "no in-process GPU baseline: see bench/cuda/torch_bench_presets.py";
                                } else {
                                    const auto key = std::make_tuple(std::string(p.name), static_cast<int>(dtype), batch,
                                                                     context, r.s_q);
                                    auto it = baseline_cache.find(key);
                                    if (it == baseline_cache.end())
                                        it = baseline_cache
                                                 .emplace(key, time_naive_baseline(p, dtype, batch, context, r.s_q,
                                                                                   env.threads, std::max(3, opt.reps / 4),
                                                                                   opt.hot, kColdBytes, env.memory_cap))
                                                 .first;
                                    if (it->second.ran) r.baseline_s = it->second.seconds;
                                    else r.baseline_note = it->second.skipped;
                                }
                            }
                            if (opt.json) print_json(r, env);
                            else print_table_row(r);
                            std::fflush(stdout);
                        }
                    }
    }
    return failures == 0 ? 0 : 1;
}

}  // namespace gqla::bench

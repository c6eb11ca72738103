// SPDX-License-Identifier: Apache-2.0
#include "case_report.hpp"

#include <cstdio>

#include "build_info.hpp"
#include "json_writer.hpp"

namespace gqla::bench {
namespace {

// "absorb", or "auto>transient" when AUTO chose per call.
std::string path_label(const CaseResult& r) {
    if (!r.error.empty()) return path_name(r.requested);
    if (r.attention && r.requested == GQLA_PATH_AUTO && r.preset->is_gqla())
        return std::string("auto>") + path_name(r.active);
    return path_name(r.active);
}

std::string s_q_label(const CaseResult& r) { return r.mix.empty() ? std::to_string(r.s_q) : "mix"; }

}  // namespace

void print_table_header(const BenchEnv& env) {
    std::printf("device %s | roofline: %.1f GB/s read, %.1f GFLOP/s f32 FMA peak", device_name(env.device),
                env.roofline.read_gbps, env.roofline.peak_gflops);
    if (env.roofline.peak_bf16_gflops > 0)
        std::printf(", %.1f GFLOP/s bf16 dot peak%s", env.roofline.peak_bf16_gflops,
                    env.roofline.kernels_use_bf16_dot ? " (roof of bf16 caches)" : " (not used by the kernels)");
    std::printf("\n  %s\n", env.roofline.source.c_str());
    std::printf("%-15s %-6s %-16s %-5s %5s %7s %5s %10s %10s %10s %8s %8s %6s %10s %10s %8s %9s\n", "preset", "call",
                "path", "dtype", "batch", "context", "s_q", "ms", "p99_ms", "device_ms", "GB/s", "TFLOP/s", "roof",
                "pred_ms", "naive_ms", "speedup", "rel_err");
}

void print_table_row(const CaseResult& r) {
    const char* call = r.attention ? "attn" : "decode";
    if (!r.error.empty()) {
        std::printf("%-15s %-6s %-16s %-5s %5d %7lld %5s  skipped: %s\n", r.preset->name, call, path_label(r).c_str(),
                    dtype_label(r.dtype), r.batch, static_cast<long long>(r.context), s_q_label(r).c_str(),
                    r.error.c_str());
        return;
    }
    if (!r.lengths.empty()) std::printf("  (%s)\n", r.lengths.c_str());
    if (!r.mix.empty())
        std::printf("  (q_lens %s: %d sequences, %lld query rows in one call)\n", r.mix.c_str(), r.batch,
                    static_cast<long long>(r.query_rows));
    char naive[32] = "-", speedup[32] = "-", err[32] = "-", dev[32] = "-", pred[32] = "-";
    if (r.device_seconds > 0) std::snprintf(dev, sizeof dev, "%.3f", r.device_seconds * 1e3);
    if (r.baseline_s) {
        std::snprintf(naive, sizeof naive, "%.3f", *r.baseline_s * 1e3);
        std::snprintf(speedup, sizeof speedup, "%.1fx", *r.baseline_s / r.seconds);
    }
    if (r.rel_err) std::snprintf(err, sizeof err, "%.1e", *r.rel_err);
    if (r.pred) std::snprintf(pred, sizeof pred, "%.3f", r.pred->time_s * 1e3);
    const double t = r.seconds;  // rates over the wall time, as the JSON's gbps (device_* there)
    std::printf("%-15s %-6s %-16s %-5s %5d %7lld %5s %10.3f %10.3f %10s %8.1f %8.3f %5.0f%% %10s %10s %8s %9s\n",
                r.preset->name, call, path_label(r).c_str(), dtype_label(r.dtype), r.batch,
                static_cast<long long>(r.context), s_q_label(r).c_str(), r.seconds * 1e3, r.p99_seconds * 1e3, dev,
                r.bytes / t / 1e9, r.flops / t / 1e12, 100.0 * r.floor_s / t, pred, naive, speedup, err);
}

void print_json(const CaseResult& r, const BenchEnv& env) {
    JsonObject j;
    j.str("device", device_name(env.device))
        .str("preset", r.preset->name)
        .str("kind", r.preset->is_gqla() ? "gqla" : "gqa")
        .str("api", r.attention ? "attention" : "decode")
        .str("path", path_name(r.error.empty() ? r.active : r.requested))
        .str("path_requested", path_name(r.requested))
        .integer("H", r.preset->H)
        .integer("G", r.preset->G)
        .integer("batch", r.batch)
        .integer("context", r.context)
        .str("lengths", r.lengths.empty() ? "uniform" : r.lengths)
        .integer("s_q", r.s_q);
    if (r.mix.empty())
        j.null("q_lens");
    else
        j.str("q_lens", r.mix);
    j.integer("query_rows", r.query_rows).str("dtype", dtype_label(r.dtype)).str("io_dtype", dtype_label(r.io_dtype));
    if (!r.error.empty()) {
        j.null("ms").str("skipped", r.error);
        add_build_info(j);
        std::printf("%s\n", j.dump().c_str());
        return;
    }
    j.num("ms", r.seconds * 1e3)
        .num("p99_ms", r.p99_seconds * 1e3)
        .integer("calls", r.calls)
        .integer("busy_threads", r.busy)
        .boolean("interleaved", r.interleaved)
        .num("gbps", r.bytes / r.seconds / 1e9)
        .num("gflops", r.flops / r.seconds / 1e9)
        .num("tflops", r.flops / r.seconds / 1e12)
        .num("roofline_frac", r.floor_s / r.seconds)
        .num("bytes", r.bytes)
        .num("flops", r.flops)
        .str("flops_count", r.attention ? "causal pairs of the form taken" : "gqla_session_predict_cost")
        .num("roof_gflops", r.peak_gflops, 6)
        .num("peak_frac", r.flops / r.seconds / (r.peak_gflops * 1e9), 4);
    if (r.attention) j.num("visible_pairs", r.visible_pairs, 12);
    if (r.call_chosen) j.str("call_chosen", path_name(*r.call_chosen));
    if (r.pred)
        j.num("pred_ms", r.pred->time_s * 1e3)
            .str("pred_bound", r.pred->bound == GQLA_BOUND_COMPUTE ? "compute" : "memory");
    else
        j.null("pred_ms");
    if (r.device_seconds > 0)
        j.num("device_ms", r.device_seconds * 1e3)
            .num("device_gbps", r.bytes / r.device_seconds / 1e9)
            .num("device_tflops", r.flops / r.device_seconds / 1e12)
            .num("device_roofline_frac", r.floor_s / r.device_seconds)
            .num("device_peak_frac", r.flops / r.device_seconds / (r.peak_gflops * 1e9), 4);
    if (r.baseline_s)
        j.num("baseline_ms", *r.baseline_s * 1e3).num("speedup", *r.baseline_s / r.seconds);
    else
        j.null("baseline_ms").str("baseline_note", r.baseline_note);
    if (r.rel_err)
        j.num("rel_err", *r.rel_err, 3);
    else
        j.null("rel_err");
    j.integer("cold_sets", r.sets)
        .str("io", r.io_on_device ? "device" : "host")
        .num("read_gbps_machine", env.roofline.read_gbps, 4)
        .num("peak_gflops_machine", env.roofline.peak_for(r.dtype), 4)
        .num("peak_fma_gflops_machine", env.roofline.peak_gflops, 4)
        .num("peak_bf16_gflops_machine", env.roofline.peak_bf16_gflops, 4);
    add_build_info(j);
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// gqla-demo: what the library sees on this machine, which GQLA path it picks
// and why, proof that both paths compute the same attention as a float64
// reference, and how prediction and measurement compare for one layer of
// LLaMA-3-8B converted to GQLA.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "accuracy_check.hpp"
#include "decode_workload.hpp"
#include "gqla/gqla.h"
#include "path_report.hpp"
#include "presets.hpp"
#include "probe_report.hpp"
#include "support.hpp"

namespace {

using namespace gqla::bench;

gqla_device_type parse_device(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--device" && i + 1 < argc) {
            const std::string v = argv[++i];
            if (v == "cpu") return GQLA_DEVICE_CPU;
            if (v == "cuda") return GQLA_DEVICE_CUDA;
            if (v == "auto") return GQLA_DEVICE_AUTO;
        }
        std::fprintf(stderr, "usage: gqla-demo [--device cpu|cuda|auto]\n");
        std::exit(a == "-h" || a == "--help" ? 0 : 2);
    }
    return GQLA_DEVICE_AUTO;
}

gqla_device_type resolve_device(gqla_device_type requested) {
    return requested == GQLA_DEVICE_AUTO ? resolve_auto_device() : requested;
}

void show_probe(gqla_device_type device) {
    gqla_probe_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    const double t0 = now_s();
    check(gqla_probe(device, 0, GQLA_PROBE_CALIBRATE, &info), "gqla_probe");
    std::printf("\n1. Probe of the %s (calibrated in %.0f ms)\n", device_name(device), (now_s() - t0) * 1e3);
    gqla::demo::print_probe(info);
}

void show_path_choice(const Preset& p, gqla_device_type device) {
    SessionShape shape;
    shape.device = device;
    shape.cache_dtype = GQLA_DTYPE_BF16;
    shape.max_tokens = 4096;
    gqla_config cfg = make_config(p, shape);
    gqla_session* session = nullptr;
    check(gqla_session_create(&cfg, &session), "gqla_session_create");
    std::printf("\n2. Which path AUTO picks for %s, bf16 cache (gqla_session_predict_cost)\n", p.description);
    try {
        for (int s_q : {1, 2, 4}) {
            gqla_workload w{};  // fields appended later (topk) stay 0: dense
            w.struct_size = sizeof w;
            w.batch = 1;
            w.context = 4096;
            w.q_len = s_q;
            gqla_cost_report r;
            std::memset(&r, 0, sizeof r);
            r.struct_size = sizeof r;
            check(gqla_session_predict_cost(session, &w, &r), "gqla_session_predict_cost");
            gqla::demo::print_path_costs(w, r);
        }
    } catch (...) {
        gqla_session_destroy(session);
        throw;
    }
    gqla_session_destroy(session);
}

// Returns false when a path misses its bound (docs/numerics.md, tolerances).
bool show_accuracy(const Preset& p, gqla_device_type device) {
    std::printf("\n3. Both paths vs the float64 reference (2 sequences of 37 and 70 tokens, s_q = 2, random inputs)\n");
    bool ok = true;
    for (gqla_dtype dtype : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        for (gqla_path path : {GQLA_PATH_GQA, GQLA_PATH_ABSORB}) {
            AccuracySpec spec;
            spec.preset = &p;
            spec.shape.device = device;
            spec.shape.path = path;
            spec.shape.cache_dtype = dtype;
            spec.s_q = 2;
            const double err = relative_error_vs_reference(spec);
            const bool pass = err <= error_bound(dtype);
            ok = ok && pass;
            std::printf("  %-6s path, %-4s cache: relative L2 error %.2e (bound %.0e) %s\n", path_name(path),
                        dtype_label(dtype), err, error_bound(dtype), pass ? "ok" : "FAILED");
        }
    }
    return ok;
}

double timed(const Preset& p, gqla_device_type device, gqla_path path, int64_t context, gqla_path_cost* predicted,
             gqla_path* chosen) {
    WorkloadSpec spec;
    spec.preset = &p;
    spec.shape.device = device;
    spec.shape.path = path;
    spec.shape.cache_dtype = GQLA_DTYPE_BF16;
    spec.batch = 1;
    spec.context = context;
    // 256 MiB per rotation is 8x a 32 MiB L3 and keeps the demo short.
    spec.sets = sets_for_cold(p, path, GQLA_DTYPE_BF16, 1, context, 256.0 * 1024 * 1024, false);
    DecodeWorkload work(spec);
    const gqla_cost_report r = work.predict(1, 1);
    *predicted = path == GQLA_PATH_GQA ? r.gqa : r.absorb;
    *chosen = r.chosen;
    return work.time_decode(1, 1, 15, 2.0);
}

void show_timings(const Preset& p, gqla_device_type device) {
    std::printf("\n4. One decode step of a %s layer, batch 1, s_q 1, bf16 cache\n", p.name);
    std::printf(
        "   (cold caches: calls rotate over >= 256 MiB of cache, so each reads lines the previous ones did not "
        "touch;\n    median of up to 15 calls)\n");
    std::printf("  %8s | %12s %12s | %12s %12s | %-7s %-7s\n", "context", "gqa pred ms", "gqa meas ms", "absorb pred",
                "absorb meas", "AUTO", "fastest");
    for (int64_t context : {1024, 4096, 16384}) {
        gqla_path_cost pred_gqa, pred_absorb;
        gqla_path chosen = GQLA_PATH_AUTO;
        const double gqa = timed(p, device, GQLA_PATH_GQA, context, &pred_gqa, &chosen);
        const double absorb = timed(p, device, GQLA_PATH_ABSORB, context, &pred_absorb, &chosen);
        std::printf("  %8lld | %12.3f %12.3f | %12.3f %12.3f | %-7s %-7s\n", static_cast<long long>(context),
                    pred_gqa.time_s * 1e3, gqa * 1e3, pred_absorb.time_s * 1e3, absorb * 1e3, path_name(chosen),
                    gqa <= absorb ? "gqa" : "absorb");
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const gqla_device_type requested = parse_device(argc, argv);
    const Preset& p = *find_preset("llama3-8b-gqla");
    gqla_device_type device = GQLA_DEVICE_CPU;
    try {
        device = resolve_device(requested);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gqla-demo: %s\n", e.what());
        return 1;
    }
    std::printf("gqla %s — decode attention for GQA and GQLA, on the %s\n", gqla_version_string(), device_name(device));
    const double t0 = now_s();
    try {
        show_probe(device);
        show_path_choice(p, device);
        const bool accurate = show_accuracy(p, device);
        show_timings(p, device);
        std::printf("\nDone in %.1f s. %s\n", now_s() - t0,
                    accurate ? "Both paths match the float64 reference." : "ACCURACY CHECK FAILED.");
        return accurate ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gqla-demo: %s\n", e.what());
        return 1;
    }
}

// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_bf16_dot_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "backends/cpu/probe/cpu_calibration_kernels.hpp"
#include "core/cpu_features.hpp"

namespace gqla {

namespace {

using Clock = std::chrono::steady_clock;

// Warm-up first: an idle core starts at a low clock, and some power their
// 512-bit units up only under load. Then both loops in turn, best of several
// short trials each (a trial a scheduler interrupts only reads low).
constexpr std::chrono::milliseconds kWarmup{3};
constexpr double kTrialSeconds = 0.3e-3;
constexpr int kTrials = 5;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double flops_per_second(FmaLoopFn loop, uint64_t iters, float* sink) {
    const Clock::time_point t = Clock::now();
    const double flops = loop(iters, sink);
    const double s = seconds_since(t);
    return s > 0 ? flops / s : 0.0;
}

bool measure(uint64_t isa_flags) {
    const FmaLoopFn fma = pick_fma_loop(isa_flags), dot = pick_bf16_dot_loop(isa_flags);
    if (!dot) return false;
    float sink = 0;
    constexpr uint64_t kStep = 1024;
    const Clock::time_point start = Clock::now();
    uint64_t steps = 0;
    while (Clock::now() - start < kWarmup) {
        fma(kStep, &sink);
        ++steps;
    }
    const double step_seconds = std::chrono::duration<double>(kWarmup).count() / static_cast<double>(steps);
    const uint64_t iters = std::max<uint64_t>(kStep, static_cast<uint64_t>(kTrialSeconds / step_seconds * kStep));
    double fma_rate = 0, dot_rate = 0;
    for (int t = 0; t < kTrials; ++t) {
        fma_rate = std::max(fma_rate, flops_per_second(fma, iters, &sink));
        dot_rate = std::max(dot_rate, flops_per_second(dot, iters, &sink));
    }
    volatile float keep = sink;
    (void)keep;
    return dot_rate >= kBf16DotAdvantage * fma_rate;
}

}  // namespace

bool bf16_dot_pays(uint64_t isa_flags) {
    if (!isa_has(isa_flags, kIsaBf16Dot)) return false;
    if (const char* force = std::getenv("GQLA_CPU_BF16_DOT"); force && *force) return *force != '0';
    static const bool pays = measure(isa_flags);
    return pays;
}

}  // namespace gqla

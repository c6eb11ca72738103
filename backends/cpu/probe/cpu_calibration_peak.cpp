// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <chrono>

#include "backends/cpu/probe/cpu_calibration_kernels.hpp"
#include "backends/cpu/probe/cpu_calibration_measures.hpp"
#include "backends/cpu/probe/cpu_calibration_stats.hpp"

namespace gqla {

namespace {

using Clock = CalibrationClock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// Warm-up: a core that was idle starts at a low clock (and, on some cores,
// with its 512-bit units powered down at reduced throughput); reaching its
// loaded clock takes from microseconds to tens of milliseconds, in steps
// (a governor or the firmware raises it every few ms); 20 ms timed from
// cold read 40-70% of the peak on a Zen 5 host. Run in 1 ms slices until
// the rate has not risen by 2% for 8 ms.
constexpr microseconds kWarmupSlice{1000};
constexpr milliseconds kWarmupMin{10}, kWarmupMax{50};
constexpr int kSettledSlices = 8;
constexpr double kStillRising = 1.02;

// Trials of fixed work sized to ~2 ms at the warmed-up rate: long against the
// clock's resolution, short against a scheduler's time slice (so most trials
// run uninterrupted on a busy host).
constexpr double kTrialSeconds = 2e-3;
constexpr int kTrials = 9;
constexpr uint64_t kMinTrialIters = 1024;
// Below this a thread's CPU time is too coarse to divide by.
constexpr double kMinCpuSeconds = 0.5e-3;

// Dependent additions per clock reading (~0.25 ms at 4 GHz), best of a few.
constexpr uint64_t kClockRounds = 16384;
constexpr int kClockReadings = 3;
// Iterations between looks at the clock during warm-up (~6 us of FMAs).
constexpr uint64_t kItersPerCheck = 1024;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// Runs the FMA loop until the per-slice rate settles; returns the best
// slice's iterations per second.
double warm_up(FmaLoopFn fma, float* sink, double flops_per_iter) {
    const Clock::time_point start = Clock::now();
    double best = 0;
    int since_rise = 0;
    for (;;) {
        const Clock::time_point slice_start = Clock::now();
        double flops = 0;
        Clock::time_point now;
        do {
            flops += fma(kItersPerCheck, sink);
            now = Clock::now();
        } while (now - slice_start < kWarmupSlice);
        const double rate = flops / flops_per_iter / seconds_between(slice_start, now);
        if (rate > best * kStillRising)
            since_rise = 0;
        else
            ++since_rise;
        best = std::max(best, rate);
        const auto elapsed = now - start;
        if (elapsed >= kWarmupMax || (elapsed >= kWarmupMin && since_rise >= kSettledSlices)) return best;
    }
}

double clock_ghz_now() {
    double best = 0;
    for (int i = 0; i < kClockReadings; ++i) {
        const Clock::time_point a = Clock::now();
        const uint64_t adds = dependent_adds(kClockRounds);
        const double s = seconds_between(a, Clock::now());
        if (s > 0) best = std::max(best, static_cast<double>(adds) / s * 1e-9);
    }
    return best;
}

}  // namespace

PeakReading measure_peak_gflops(const std::vector<int>& cpus, const CpuIdentity& id, const CpuTopology& topo,
                                uint64_t isa_flags, Clock::time_point deadline) {
    const FmaLoopFn fma = pick_fma_loop(isa_flags);
    const size_t n = cpus.size();
    float probe_sink = 0;
    const double flops_per_iter = fma(1, &probe_sink);

    StartBarrier barrier(n);
    // One flag per trial: thread 0 writes trial k's before it arrives at
    // that trial's barrier, the others read it after, so all agree even when
    // one thread is still leaving the previous barrier.
    std::vector<std::atomic<bool>> stop(kTrials);
    std::vector<std::vector<ThreadSample>> trials(kTrials, std::vector<ThreadSample>(n));
    std::vector<int> trials_run(n, 0);
    std::vector<double> clock_ghz(n, 0.0);
    std::vector<float> sinks(n, 0.0f);

    run_pinned(cpus, [&](size_t t) {
        barrier.wait();
        const double iters_per_second = warm_up(fma, &sinks[t], flops_per_iter);
        const uint64_t iters = std::max(kMinTrialIters, static_cast<uint64_t>(iters_per_second * kTrialSeconds));
        for (int k = 0; k < kTrials; ++k) {
            if (t == 0 && k > 0 && Clock::now() >= deadline) stop[k].store(true, std::memory_order_relaxed);
            barrier.wait();
            if (stop[k].load(std::memory_order_relaxed)) break;
            ThreadSample& s = trials[k][t];
            const double cpu0 = thread_cpu_seconds();
            s.start = Clock::now();
            s.units = fma(iters, &sinks[t]);
            s.end = Clock::now();
            s.cpu_seconds = thread_cpu_seconds() - cpu0;
            trials_run[t] = k + 1;
        }
        barrier.wait();
        clock_ghz[t] = clock_ghz_now();
    });

    const int done = *std::min_element(trials_run.begin(), trials_run.end());
    std::vector<double> rates;
    for (int k = 0; k < done; ++k)
        rates.push_back(std::max(wall_rate(trials[k]), cpu_time_rate(trials[k], kMinCpuSeconds)));

    PeakReading r;
    r.raw_gflops = upper_quartile(rates);
    r.clock_ghz = *std::max_element(clock_ghz.begin(), clock_ghz.end());
    r.ceiling_gflops = theoretical_peak_gflops_f32(id, topo, isa_flags, r.clock_ghz);
    r.gflops = clamp_to_limit(r.raw_gflops, r.ceiling_gflops);
    volatile float keep = probe_sink;
    for (float s : sinks) keep = keep + s;
    return r;
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "backends/cpu/probe/cpu_calibration_kernels.hpp"
#include "backends/cpu/probe/cpu_calibration_measures.hpp"
#include "backends/cpu/probe/cpu_calibration_stats.hpp"

namespace gqla {

namespace {

using Clock = CalibrationClock;

constexpr size_t kHugePage = size_t(2) << 20;
// Filled and checked against the deadline in blocks of 256 KiB.
constexpr size_t kBlockFloats = 64 * 1024;
constexpr size_t kBlockBytes = kBlockFloats * sizeof(float);
// Sweeps after the first (which still finds the end of the fill in the
// cache, so it is not counted). The upper quartile of 6 is the 3rd best.
constexpr int kSweeps = 6;
constexpr int kMinSweeps = 3;
// Scattered reads: runs of one 8 KiB page each (32 tokens of a 128-wide
// bf16 row, or 16 of a 256-wide one: what the attention kernels read of a
// paged cache per group and page) at random places in the first half of
// each thread's buffer, the part the last sweep left least of in the cache;
// each trial reads its own slice of that half, every run once, in random
// order, with the run two ahead prefetched as the kernels prefetch the next
// block. The upper quartile of the trials counts, as for the sweeps.
constexpr size_t kRunBytes = 8192;
constexpr size_t kRunFloats = kRunBytes / sizeof(float);
constexpr int kScatterTrials = 5;
constexpr int kPrefetchRunsAhead = 2;

// Aligned to huge pages and advised to use them: faulting in a buffer of
// hundreds of MiB in 4 KiB pages would cost most of the time budget.
struct HugeBuffer {
    float* data = nullptr;
    explicit HugeBuffer(size_t bytes) {
        data = static_cast<float*>(std::aligned_alloc(kHugePage, bytes));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (data) madvise(data, bytes, MADV_HUGEPAGE);
#endif
    }
    ~HugeBuffer() { std::free(data); }
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;
};

// Every float written (not one per page): each line then holds data in
// DRAM, and no page can be the shared zero page or merged with another.
void fill_block(float* p, size_t block) {
    const float base = static_cast<float>(block & 1023);
    for (size_t i = 0; i < kBlockFloats; ++i) p[i] = base + static_cast<float>(i & 255) * 1e-3f;
}

// Run indices [first, first + count) in a random order (a fixed seed per
// thread and trial: the same order on every call, no two threads alike).
std::vector<uint32_t> shuffled_runs(size_t first, size_t count, uint64_t seed) {
    std::vector<uint32_t> runs(count);
    for (size_t i = 0; i < count; ++i) runs[i] = static_cast<uint32_t>(first + i);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = count; i > 1; --i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
        std::swap(runs[i - 1], runs[static_cast<size_t>(x % i)]);
    }
    return runs;
}

float read_runs(const float* base, const std::vector<uint32_t>& runs, ReadLoopFn read) {
    float sum = 0.0f;
    for (size_t i = 0; i < runs.size(); ++i) {
        if (i + kPrefetchRunsAhead < runs.size()) {
            const char* ahead = reinterpret_cast<const char*>(base + runs[i + kPrefetchRunsAhead] * kRunFloats);
            for (size_t line = 0; line < kRunBytes; line += 64) __builtin_prefetch(ahead + line, 0, 2);
        }
        sum += read(base + runs[i] * kRunFloats, kRunFloats);
    }
    return sum;
}

// Wall rates of trials [first, the fewest any thread ran): a trial too short
// to time (a coarse clock) would give a rate with no bound, so none of those
// count.
std::vector<double> trial_rates(const std::vector<std::vector<ThreadSample>>& trials, int first,
                                const std::vector<int>& trials_run, double resolution) {
    const int done = *std::min_element(trials_run.begin(), trials_run.end());
    std::vector<double> rates;
    for (int k = first; k < done; ++k) {
        Clock::time_point begin = trials[k][0].start, end = trials[k][0].end;
        for (const ThreadSample& s : trials[k]) begin = std::min(begin, s.start), end = std::max(end, s.end);
        if (long_enough_to_time(std::chrono::duration<double>(end - begin).count(), resolution))
            rates.push_back(wall_rate(trials[k]));
    }
    return rates;
}

}  // namespace

ReadReading measure_read_gbps(const std::vector<int>& cpus, size_t bytes_per_thread, size_t min_bytes_per_thread,
                              uint64_t isa_flags, Clock::time_point fill_deadline, Clock::time_point fill_cap,
                              Clock::time_point deadline) {
    const size_t n = cpus.size();
    const size_t blocks_wanted = std::max<size_t>(1, bytes_per_thread / kBlockBytes);
    const size_t blocks_needed = std::min(blocks_wanted, (min_bytes_per_thread + kBlockBytes - 1) / kBlockBytes);
    const ReadLoopFn read = pick_read_loop(isa_flags);
    const double resolution = steady_clock_resolution_seconds();

    StartBarrier barrier(n);
    // One flag per trial: thread 0 writes trial k's before it arrives at
    // that trial's barrier, the others read it after, so all agree even when
    // one thread is still leaving the previous barrier.
    std::vector<std::atomic<bool>> stop(kSweeps + 1);
    std::vector<size_t> blocks_filled(n, 0);
    std::vector<std::vector<ThreadSample>> sweeps(kSweeps + 1, std::vector<ThreadSample>(n));
    std::vector<int> sweeps_run(n, 0);
    std::vector<std::vector<ThreadSample>> scatters(kScatterTrials, std::vector<ThreadSample>(n));
    std::vector<int> scatters_run(n, 0);
    std::vector<float> sinks(n, 0.0f);

    run_pinned(cpus, [&](size_t t) {
        // Allocated and first touched by the thread that reads it, so its
        // pages sit on that thread's NUMA node.
        HugeBuffer buf(blocks_wanted * kBlockBytes);
        if (buf.data) {
            size_t b = 0;
            while (b < blocks_wanted && Clock::now() < fill_deadline) fill_block(buf.data + b * kBlockFloats, b), ++b;
            while (b < blocks_needed && Clock::now() < fill_cap) fill_block(buf.data + b * kBlockFloats, b), ++b;
            blocks_filled[t] = b;
        }
        barrier.wait();
        // Equal sweeps for all, as long as the shortest filled buffer.
        const size_t blocks = *std::min_element(blocks_filled.begin(), blocks_filled.end());
        if (blocks < blocks_needed) return;
        for (int k = 0; k <= kSweeps; ++k) {
            if (t == 0 && k > kMinSweeps && Clock::now() >= deadline) stop[k].store(true, std::memory_order_relaxed);
            barrier.wait();
            if (stop[k].load(std::memory_order_relaxed)) break;
            ThreadSample& s = sweeps[k][t];
            s.start = Clock::now();
            sinks[t] += read(buf.data, blocks * kBlockFloats);
            s.end = Clock::now();
            s.units = static_cast<double>(blocks * kBlockBytes);
            sweeps_run[t] = k + 1;
        }
        // Scattered runs once the sweeps are done (a few ms: not bounded by
        // the deadline, which only stops sweeps from starting).
        const size_t runs_per_trial = blocks * kBlockBytes / 2 / kRunBytes / kScatterTrials;
        if (runs_per_trial < 16) return;
        for (int k = 0; k < kScatterTrials; ++k) {
            const std::vector<uint32_t> runs = shuffled_runs(k * runs_per_trial, runs_per_trial, t * 131 + k + 1);
            barrier.wait();
            ThreadSample& s = scatters[k][t];
            s.start = Clock::now();
            sinks[t] += read_runs(buf.data, runs, read);
            s.end = Clock::now();
            s.units = static_cast<double>(runs_per_trial * kRunBytes);
            scatters_run[t] = k + 1;
        }
    });

    // Sweep 0 warms up; the scattered trials start on a warm core.
    const std::vector<double> rates = trial_rates(sweeps, 1, sweeps_run, resolution);
    const std::vector<double> scattered = trial_rates(scatters, 0, scatters_run, resolution);
    volatile float keep = 0;
    for (float s : sinks) keep = keep + s;
    ReadReading r;
    r.stream_gbps = static_cast<int>(rates.size()) >= kMinSweeps ? upper_quartile(rates) : 0;
    r.scattered_gbps = static_cast<int>(scattered.size()) >= kMinSweeps ? upper_quartile(scattered) : 0;
    return r;
}

}  // namespace gqla

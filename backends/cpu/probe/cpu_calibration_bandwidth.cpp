// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>

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

}  // namespace

double measure_read_gbps(const std::vector<int>& cpus, size_t bytes_per_thread, size_t min_bytes_per_thread,
                         uint64_t isa_flags, Clock::time_point fill_deadline, Clock::time_point deadline) {
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
    std::vector<float> sinks(n, 0.0f);

    run_pinned(cpus, [&](size_t t) {
        // Allocated and first touched by the thread that reads it, so its
        // pages sit on that thread's NUMA node.
        HugeBuffer buf(blocks_wanted * kBlockBytes);
        if (buf.data) {
            size_t b = 0;
            while (b < blocks_wanted && Clock::now() < fill_deadline) fill_block(buf.data + b * kBlockFloats, b), ++b;
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
    });

    const int done = *std::min_element(sweeps_run.begin(), sweeps_run.end());
    std::vector<double> rates;
    for (int k = 1; k < done; ++k) {  // sweep 0 warms up
        Clock::time_point first = sweeps[k][0].start, last = sweeps[k][0].end;
        for (const ThreadSample& s : sweeps[k]) first = std::min(first, s.start), last = std::max(last, s.end);
        // A sweep too short to time (a coarse clock) would give a rate with
        // no bound; none of those count.
        if (long_enough_to_time(std::chrono::duration<double>(last - first).count(), resolution))
            rates.push_back(wall_rate(sweeps[k]));
    }
    volatile float keep = 0;
    for (float s : sinks) keep = keep + s;
    return static_cast<int>(rates.size()) >= kMinSweeps ? upper_quartile(rates) : 0;
}

}  // namespace gqla

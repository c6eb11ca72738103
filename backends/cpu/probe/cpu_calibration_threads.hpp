// SPDX-License-Identifier: Apache-2.0
// Threads of the CPU calibration: one pinned thread per CPU of the affinity
// mask, started together for each trial so their timings overlap.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace gqla {

using CalibrationClock = std::chrono::steady_clock;

// Runs body(i) on one thread per CPU of `cpus`, pinned there (best effort:
// an unpinned thread still measures), and waits for all of them.
void run_pinned(const std::vector<int>& cpus, const std::function<void(size_t)>& body);

// CPU time of the calling thread in seconds (0 where unavailable).
double thread_cpu_seconds();

// Lets `count` threads start a trial together: wait() returns in every
// thread once all have arrived. Waiters yield, so on a host with more
// runnable threads than CPUs the late ones get to run.
class StartBarrier {
public:
    explicit StartBarrier(size_t count) : count_(count) {}
    void wait();

private:
    const size_t count_;
    std::atomic<size_t> arrived_{0};
    std::atomic<uint64_t> generation_{0};
};

}  // namespace gqla

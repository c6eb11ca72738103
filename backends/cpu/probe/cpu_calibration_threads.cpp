// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_calibration_threads.hpp"

#include <ctime>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace gqla {

namespace {

void pin_current_thread(int cpu) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)cpu;
#endif
}

}  // namespace

void run_pinned(const std::vector<int>& cpus, const std::function<void(size_t)>& body) {
    std::vector<std::thread> threads;
    threads.reserve(cpus.size());
    for (size_t i = 0; i < cpus.size(); ++i) {
        threads.emplace_back([&, i] {
            pin_current_thread(cpus[i]);
            body(i);
        });
    }
    for (auto& t : threads) t.join();
}

double thread_cpu_seconds() {
#if defined(__linux__)
    timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
#endif
    return 0;
}

void StartBarrier::wait() {
    const uint64_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == count_) {
        arrived_.store(0, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
        return;
    }
    while (generation_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
}

}  // namespace gqla

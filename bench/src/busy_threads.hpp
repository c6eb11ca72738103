// SPDX-License-Identifier: Apache-2.0
// --busy N: threads of the bench's own that keep N CPUs busy while a case is
// timed, standing in for an application whose threads compete with the
// library's for the same cores.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace gqla::bench {

class BusyThreads {
public:
    explicit BusyThreads(int n) {
        for (int i = 0; i < n; ++i)
            threads_.emplace_back([this] {
                // Plain integer work that never sleeps or yields.
                volatile unsigned sink = 0;
                while (!stop_.load(std::memory_order_relaxed))
                    for (unsigned k = 0; k < 4096; ++k) sink = sink * 1664525u + 1013904223u;
            });
    }
    ~BusyThreads() {
        stop_.store(true, std::memory_order_relaxed);
        for (std::thread& t : threads_) t.join();
    }
    BusyThreads(const BusyThreads&) = delete;
    BusyThreads& operator=(const BusyThreads&) = delete;

private:
    std::atomic<bool> stop_{false};
    std::vector<std::thread> threads_;
};

}  // namespace gqla::bench

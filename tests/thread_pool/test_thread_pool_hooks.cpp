// SPDX-License-Identifier: Apache-2.0
// Interleavings of the CPU backend's thread pool that the scheduler gives
// only rarely, replayed every time by holding a worker at a test hook.
#include <doctest/doctest.h>

#include <semaphore.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backends/cpu/thread_pool.hpp"
#include "backends/cpu/thread_pool_test_hooks.hpp"

namespace {

// While armed, a worker reaching the hook says so and waits to be released.
std::atomic<bool> g_hold{false};
sem_t g_held, g_release;

}  // namespace

namespace gqla::cpu::pool_test_hooks {

void before_worker_reads_call() {
    if (!g_hold.exchange(false)) return;
    sem_post(&g_held);
    while (sem_wait(&g_release) != 0) {
    }
}

}  // namespace gqla::cpu::pool_test_hooks

TEST_CASE("a pool destroyed while a worker wakes for the last call still ends") {
    // The worker is woken by a call the caller then finishes alone; it is
    // held right after its wait while the pool is destroyed, and released
    // only once the destructor has set stop_ and moved the call number. It
    // must see stop_ and return, so the destructor's join ends. (This
    // interleaving hung a 30-minute API-sequence fuzzer run in a session's
    // destruction right after a call.)
    REQUIRE(sem_init(&g_held, 0, 0) == 0);
    REQUIRE(sem_init(&g_release, 0, 0) == 0);
    auto* pool = new gqla::cpu::ThreadPool(2);
    // Let the worker start and fall asleep waiting for a call.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g_hold = true;
    std::atomic<int> ran{0};
    pool->parallel_for(2, 1, [&](int64_t, int64_t, int) { ran.fetch_add(1); });
    CHECK(ran.load() == 2);
    while (sem_wait(&g_held) != 0) {
    }
    std::atomic<bool> destroyed{false};
    std::thread destroyer([&] {
        delete pool;
        destroyed = true;
    });
    // The destructor sets stop_, moves the call number and joins.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sem_post(&g_release);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!destroyed && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!destroyed) {
        std::fprintf(stderr, "thread pool: the destructor's join never ended (a worker missed stop_)\n");
        std::_Exit(1);
    }
    destroyer.join();
    sem_destroy(&g_held);
    sem_destroy(&g_release);
}

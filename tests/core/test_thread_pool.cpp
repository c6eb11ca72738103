// SPDX-License-Identifier: Apache-2.0
// The CPU backend's thread pool: every item once, slots private to one
// thread at a time, nesting and concurrent callers, and a call that finishes
// while its workers are kept from running.
#include <doctest/doctest.h>

#include <dirent.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/thread_pool.hpp"

using gqla::cpu::ThreadPool;

namespace {

// Runs `items` items in chunks of `grain` and checks each ran exactly once,
// with a slot in range that no other thread held at the same time.
void check_exactly_once(ThreadPool& pool, int64_t items, int64_t grain) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(items));
    std::vector<std::atomic<int>> in_slot(static_cast<size_t>(pool.participants()));
    std::atomic<int> bad_slot{0}, shared_slot{0};
    pool.parallel_for(items, grain, [&](int64_t begin, int64_t end, int slot) {
        if (slot < 0 || slot >= pool.participants()) {
            bad_slot.fetch_add(1);
            return;
        }
        if (in_slot[static_cast<size_t>(slot)].fetch_add(1) != 0) shared_slot.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
        in_slot[static_cast<size_t>(slot)].fetch_sub(1);
    });
    CHECK(bad_slot.load() == 0);
    CHECK(shared_slot.load() == 0);
    int64_t wrong = 0;
    for (auto& r : runs) wrong += r.load() != 1;
    CHECK(wrong == 0);
}

// Thread ids of this process's pool workers (the pool names them gqla-cpu).
std::vector<pid_t> worker_tids() {
    std::vector<pid_t> tids;
    DIR* dir = opendir("/proc/self/task");
    if (!dir) return tids;
    while (dirent* e = readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        const std::string comm_path = std::string("/proc/self/task/") + e->d_name + "/comm";
        std::FILE* f = std::fopen(comm_path.c_str(), "r");
        if (!f) continue;
        char comm[32] = {};
        const bool ok = std::fgets(comm, sizeof comm, f) != nullptr;
        std::fclose(f);
        if (ok && std::strncmp(comm, "gqla-cpu", 8) == 0) tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    }
    closedir(dir);
    return tids;
}

// A signal that parks the thread receiving it until released: a stand-in
// for a worker the scheduler does not run.
sem_t g_parked, g_release;
void park_thread(int) {
    sem_post(&g_parked);
    while (sem_wait(&g_release) != 0) {
    }
}

}  // namespace

TEST_CASE("thread pool: every item runs exactly once") {
    for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        CHECK(pool.participants() == threads);
        for (int64_t items : {1, 2, 7, 64, 1000, 100003})
            for (int64_t grain : {int64_t{1}, int64_t{3}, pool.even_grain(items), int64_t{1} << 20})
                check_exactly_once(pool, items, grain);
    }
}

TEST_CASE("thread pool: zero items and more threads than items") {
    ThreadPool pool(8);
    int calls = 0;
    pool.parallel_for(0, 1, [&](int64_t, int64_t, int) { ++calls; });
    pool.parallel_for(-5, 1, [&](int64_t, int64_t, int) { ++calls; });
    CHECK(calls == 0);
    for (int64_t items = 1; items < 8; ++items) check_exactly_once(pool, items, 1);
    // A pool of one thread runs everything on the caller, as slot 0.
    ThreadPool single(1);
    std::atomic<int> off_caller{0};
    const std::thread::id me = std::this_thread::get_id();
    single.parallel_for(100, 1, [&](int64_t, int64_t, int slot) {
        if (slot != 0 || std::this_thread::get_id() != me) off_caller.fetch_add(1);
    });
    CHECK(off_caller.load() == 0);
}

TEST_CASE("thread pool: back-to-back calls reuse the workers") {
    ThreadPool pool(4);
    std::atomic<int64_t> sum{0};
    for (int call = 0; call < 2000; ++call)
        pool.parallel_for(17, 1, [&](int64_t begin, int64_t end, int) {
            for (int64_t i = begin; i < end; ++i) sum.fetch_add(i);
        });
    CHECK(sum.load() == 2000 * (16 * 17 / 2));
}

TEST_CASE("thread pool: nested calls on the same pool and on another pool") {
    ThreadPool outer(4), inner(3);
    std::vector<std::atomic<int>> same(64 * 16), other(64 * 16);
    outer.parallel_for(64, 1, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) {
            // The same pool is busy with this call: the nested call runs here.
            outer.parallel_for(16, 1, [&](int64_t b, int64_t e, int) {
                for (int64_t j = b; j < e; ++j) same[static_cast<size_t>(i * 16 + j)].fetch_add(1);
            });
            inner.parallel_for(16, 1, [&](int64_t b, int64_t e, int) {
                for (int64_t j = b; j < e; ++j) other[static_cast<size_t>(i * 16 + j)].fetch_add(1);
            });
        }
    });
    int wrong = 0;
    for (auto& c : same) wrong += c.load() != 1;
    for (auto& c : other) wrong += c.load() != 1;
    CHECK(wrong == 0);
}

TEST_CASE("thread pool: concurrent callers on one pool and on their own pools") {
    ThreadPool shared(3);
    constexpr int kCallers = 4, kCalls = 300, kItems = 37;
    std::vector<std::unique_ptr<ThreadPool>> own;
    for (int c = 0; c < kCallers; ++c) own.push_back(std::make_unique<ThreadPool>(2));
    std::atomic<int> wrong{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c)
        callers.emplace_back([&, c] {
            for (int call = 0; call < kCalls; ++call) {
                ThreadPool& pool = call % 2 ? shared : *own[static_cast<size_t>(c)];
                std::vector<std::atomic<int>> runs(kItems);
                pool.parallel_for(kItems, 1 + call % 3, [&](int64_t begin, int64_t end, int slot) {
                    if (slot < 0 || slot >= pool.participants()) wrong.fetch_add(1);
                    for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
                });
                for (auto& r : runs) wrong += r.load() != 1;
            }
        });
    for (std::thread& t : callers) t.join();
    CHECK(wrong.load() == 0);
}

TEST_CASE("thread pool: a call finishes while its workers cannot run") {
    REQUIRE(sem_init(&g_parked, 0, 0) == 0);
    REQUIRE(sem_init(&g_release, 0, 0) == 0);
    struct sigaction sa {
    }, old{};
    sa.sa_handler = park_thread;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR2, &sa, &old) == 0);
    {
        ThreadPool pool(4);
        // Wait until every worker has started (named itself).
        std::vector<pid_t> tids = worker_tids();
        for (int tries = 0; tids.size() < 3 && tries < 2000; ++tries) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            tids = worker_tids();
        }
        REQUIRE(tids.size() == 3);
        for (pid_t tid : tids) REQUIRE(syscall(SYS_tgkill, getpid(), tid, SIGUSR2) == 0);
        for (size_t i = 0; i < tids.size(); ++i)
            while (sem_wait(&g_parked) != 0) {
            }

        // Every worker is parked: the caller alone runs the whole call.
        std::atomic<int> by_worker{0};
        std::vector<std::atomic<int>> runs(500);
        pool.parallel_for(500, 1, [&](int64_t begin, int64_t end, int slot) {
            if (slot != 0) by_worker.fetch_add(1);
            for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
        });
        int wrong = 0;
        for (auto& r : runs) wrong += r.load() != 1;
        CHECK(wrong == 0);
        CHECK(by_worker.load() == 0);
        // Released, the workers rejoin later calls without running old items.
        for (size_t i = 0; i < tids.size(); ++i) sem_post(&g_release);
        for (int call = 0; call < 50; ++call) check_exactly_once(pool, 64, 1);
    }
    sigaction(SIGUSR2, &old, nullptr);
    sem_destroy(&g_parked);
    sem_destroy(&g_release);
}

TEST_CASE("thread pool: a worker late from one call never takes a chunk of the next") {
    // Many short calls back to back with different chunk counts: a worker
    // that read the claim word of a finished call and resumes while the next
    // call is being set up must not run a chunk twice or count one the call
    // does not have (which once left the caller waiting for ever). A call
    // that hangs fails the test instead of blocking it.
    ThreadPool pool(3);
    std::atomic<bool> finished{false};
    std::atomic<int64_t> wrong{0};
    std::thread runner([&] {
        std::vector<std::atomic<int>> runs(8);
        for (int call = 0; call < 200000; ++call) {
            const int64_t items = 2 + call % 5;
            for (int64_t i = 0; i < items; ++i) runs[static_cast<size_t>(i)].store(0, std::memory_order_relaxed);
            pool.parallel_for(items, 1, [&](int64_t begin, int64_t end, int) {
                for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
            });
            for (int64_t i = 0; i < items; ++i) wrong += runs[static_cast<size_t>(i)].load() != 1;
        }
        finished = true;
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!finished && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!finished) {
        std::fprintf(stderr,
                     "thread pool: a call never finished (the caller waits for a chunk count it cannot reach)\n");
        std::_Exit(1);
    }
    runner.join();
    CHECK(wrong.load() == 0);
}

// SPDX-License-Identifier: Apache-2.0
// Persistent worker threads for the CPU backend's parallel loops, built to
// stay fast when the host is busy with other work.
//
// A call hands out its items through one atomic counter: the calling thread
// takes items itself, workers join as they wake, and the call is complete
// when every item has run, not when every worker has arrived. A worker the
// scheduler has not started yet therefore never holds a call up; only an
// item already taken by a thread that is then descheduled can make it wait.
// Idle workers spin briefly (the next phase of a decode usually follows
// within microseconds) and then sleep on a futex, so a busy host gets its
// CPUs back instead of sharing them with spinning threads.
//
// One pool serves one call at a time. A call that finds the pool already
// running another call (a second thread, or an item that itself calls
// parallel_for on the same pool) runs its items on the calling thread alone,
// so calls never wait for each other and nesting cannot deadlock. Distinct
// pools are independent.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace gqla::cpu {

class ThreadPool {
public:
    // `participants` threads run a call: the caller plus participants - 1
    // workers started now (fewer if the system refuses a thread).
    explicit ThreadPool(int participants);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    // Upper bound (exclusive) of the slot numbers passed to bodies.
    int participants() const { return participants_; }

    // Runs body(begin, end, slot) over [0, items) in chunks of `grain` items
    // (the last one shorter), each chunk exactly once, and returns when all
    // have run. `slot` identifies the thread running the chunk: no two
    // threads of one call share a slot, so per-slot scratch is private.
    // The body must not throw (a worker has nowhere to pass it on).
    template <class Body>
    void parallel_for(int64_t items, int64_t grain, Body&& body) {
        using B = std::remove_reference_t<Body>;
        run(
            items, grain,
            [](void* b, int64_t begin, int64_t end, int slot) { (*static_cast<B*>(b))(begin, end, slot); },
            const_cast<void*>(static_cast<const void*>(&body)));
    }

    // parallel_for with even_grain(items): contiguous runs, as a static
    // schedule would give, that still balance when a thread is held up.
    template <class Body>
    void parallel_for_spread(int64_t items, Body&& body) {
        parallel_for(items, even_grain(items), std::forward<Body>(body));
    }

    // A grain that gives each participant a few chunks: contiguous runs like
    // a static schedule, yet a late or descheduled worker's share is taken
    // by the others.
    int64_t even_grain(int64_t items) const {
        const int64_t chunks = static_cast<int64_t>(participants_) * 4;
        return items <= chunks ? 1 : (items + chunks - 1) / chunks;
    }

private:
    using ChunkFn = void (*)(void* body, int64_t begin, int64_t end, int slot);

    void run(int64_t items, int64_t grain, ChunkFn fn, void* body);
    void worker_main(int slot);
    // Takes and runs chunks of whichever call is current until none is left.
    void take_chunks(int slot);
    void wait_for_new_call(uint32_t seen);
    void wait_until_done(uint32_t chunks);

    const int participants_;
    std::vector<std::thread> workers_;

    // The current call. Written by its caller before it is published through
    // claim_; a worker reads fn_/body_/items_/grain_ only once it owns a chunk,
    // when the call cannot end under it.
    std::atomic<ChunkFn> fn_{nullptr};
    std::atomic<void*> body_{nullptr};
    std::atomic<int64_t> items_{0};
    std::atomic<int64_t> grain_{1};
    // One word holds (call number mod 2^24, the call's chunk count, the next
    // chunk to take), so a compare-exchange on it succeeds only against the
    // call whose count it checked: a worker still holding an earlier call's
    // word fails instead of taking a chunk that call does not have while the
    // caller of the next call rewrites the fields above.
    static constexpr int kChunkBits = 20;
    static constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
    alignas(64) std::atomic<uint64_t> claim_{0};
    alignas(64) std::atomic<uint32_t> done_{0};  // chunks finished (futex word of the caller)
    std::atomic<uint32_t> caller_sleeping_{0};
    alignas(64) std::atomic<uint32_t> call_number_{0};  // futex word of idle workers
    std::atomic<uint32_t> sleeping_workers_{0};
    std::atomic<bool> stop_{false};
    alignas(64) std::atomic<bool> busy_{false};  // a call is running
};

}  // namespace gqla::cpu

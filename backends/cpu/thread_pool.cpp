// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <system_error>

#if defined(GQLA_THREAD_POOL_TEST_HOOKS)  // tests/thread_pool: pauses at the points named
#include "backends/cpu/thread_pool_test_hooks.hpp"
#define GQLA_POOL_HOOK(point) ::gqla::cpu::pool_test_hooks::point()
#else
#define GQLA_POOL_HOOK(point) ((void)0)
#endif

#if defined(__linux__)
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gqla::cpu {

namespace {

// How long a thread polls before it sleeps on a futex.
// Idle workers poll briefly: the next phase of a decode is published within
// a microsecond or two of the previous one's end, and between calls a
// sleeping worker leaves the host's CPUs to the application (and, woken,
// gets them back promptly: the scheduler favours threads that slept).
constexpr auto kWorkerSpin = std::chrono::microseconds(5);
// A caller waiting for its call's last chunks polls longer: once it sleeps,
// another runnable thread takes its CPU, and on a busy host getting the CPU
// back can cost a scheduler slice (ms). On 2 CPUs beside 2 busy processes
// the p99 of a 1 ms decode was 5.5-6 ms with 200 us here, 8.5 ms with 50 us.
constexpr auto kCallerSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words are plain 32-bit integers");

// Sleeps while *word == expected (returns at once otherwise, or spuriously).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
#else
    if (word->load() == expected) std::this_thread::yield();
#endif
}

void futex_wake_all(std::atomic<uint32_t>* word) {
#if defined(__linux__)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
    (void)word;
#endif
}

// Polls `ready` for `spin`; true when it became true in that time.
template <class Ready>
bool spin_until(Ready ready, std::chrono::microseconds spin) {
    const auto deadline = std::chrono::steady_clock::now() + spin;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (ready()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= deadline) return ready();
    }
}

}  // namespace

ThreadPool::ThreadPool(int participants) : participants_(std::max(1, participants)) {
    workers_.reserve(static_cast<size_t>(participants_ - 1));
    for (int slot = 1; slot < participants_; ++slot) {
        try {
            workers_.emplace_back([this, slot] { worker_main(slot); });
        } catch (const std::system_error&) {
            break;  // the caller and the workers that did start still run every call
        }
    }
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_seq_cst);
    call_number_.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&call_number_);
    for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(int64_t items, int64_t grain, ChunkFn fn, void* body) {
    if (items <= 0) return;
    grain = std::max<int64_t>(1, grain);
    // Chunk counts and indices live in kChunkBits-wide fields of claim_.
    constexpr int64_t kMaxChunks = static_cast<int64_t>(kChunkMask);
    if ((items + grain - 1) / grain > kMaxChunks) grain = (items + kMaxChunks - 1) / kMaxChunks;
    const uint32_t chunks = static_cast<uint32_t>((items + grain - 1) / grain);

    if (workers_.empty() || chunks == 1 || busy_.exchange(true, std::memory_order_acquire)) {
        for (int64_t begin = 0; begin < items; begin += grain) fn(body, begin, std::min(items, begin + grain), 0);
        return;
    }

    const uint32_t call = call_number_.load(std::memory_order_relaxed) + 1;
    fn_.store(fn, std::memory_order_relaxed);
    body_.store(body, std::memory_order_relaxed);
    items_.store(items, std::memory_order_relaxed);
    grain_.store(grain, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(
        (static_cast<uint64_t>(call & 0xffffffu) << (2 * kChunkBits)) | (static_cast<uint64_t>(chunks) << kChunkBits),
        std::memory_order_release);
    call_number_.store(call, std::memory_order_seq_cst);
    if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(&call_number_);

    take_chunks(0);
    wait_until_done(chunks);
    busy_.store(false, std::memory_order_release);
}

void ThreadPool::take_chunks(int slot) {
    uint64_t v = claim_.load(std::memory_order_acquire);
    for (;;) {
        const uint32_t next = static_cast<uint32_t>(v & kChunkMask);
        const uint32_t chunks = static_cast<uint32_t>((v >> kChunkBits) & kChunkMask);
        if (next >= chunks) return;
        // Succeeds only while v is still the current call's word.
        if (!claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // This chunk is ours: its call cannot end before we count it done.
        const int64_t grain = grain_.load(std::memory_order_relaxed);
        const int64_t items = items_.load(std::memory_order_relaxed);
        const int64_t begin = static_cast<int64_t>(next) * grain;
        fn_.load(std::memory_order_relaxed)(body_.load(std::memory_order_relaxed), begin,
                                            std::min(items, begin + grain), slot);
        if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == chunks &&
            caller_sleeping_.load(std::memory_order_seq_cst))
            futex_wake_all(&done_);
        v = claim_.load(std::memory_order_acquire);
    }
}

void ThreadPool::wait_until_done(uint32_t chunks) {
    auto done = [&] { return done_.load(std::memory_order_acquire) == chunks; };
    if (spin_until(done, kCallerSpin)) return;
    // The rest is in the hands of threads the scheduler may have put aside:
    // sleep, leaving them this CPU.
    caller_sleeping_.store(1, std::memory_order_seq_cst);
    for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != chunks;) futex_wait(&done_, d);
    caller_sleeping_.store(0, std::memory_order_relaxed);
}

void ThreadPool::wait_for_new_call(uint32_t seen) {
    auto changed = [&] { return call_number_.load(std::memory_order_acquire) != seen; };
    if (spin_until(changed, kWorkerSpin)) return;
    sleeping_workers_.fetch_add(1, std::memory_order_seq_cst);
    while (call_number_.load(std::memory_order_seq_cst) == seen) futex_wait(&call_number_, seen);
    sleeping_workers_.fetch_sub(1, std::memory_order_relaxed);
}

void ThreadPool::worker_main(int slot) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "gqla-cpu");
#endif
    uint32_t seen = 0;
    for (;;) {
        wait_for_new_call(seen);
        GQLA_POOL_HOOK(before_worker_reads_call);
        // The call number first, then stop_: the destructor sets stop_ before
        // it moves the call number, so a worker that reads the moved number
        // sees stop_ too. Read the other way round, a destructor that ran
        // between the two reads left the worker asleep on a call number no
        // call would ever move again, and the join waited for ever.
        seen = call_number_.load(std::memory_order_acquire);
        if (stop_.load(std::memory_order_acquire)) return;
        take_chunks(slot);
    }
}

}  // namespace gqla::cpu

#include "core/cpu_calibration.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#endif

#include "core/cpu_calibration_kernels.hpp"

namespace gqla {

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

constexpr size_t kMiB = size_t(1) << 20;

// Each measurement runs in short rounds that all threads start together and
// reports its best round. A round in which some thread was preempted (a busy
// host, a noisy neighbour VM) comes out slow and is outvoted by one in which
// all threads ran -- the hardware's capability, which is what the cost model
// needs. Windows keep the whole probe near 100 ms.
constexpr Millis kFmaWindow{20}, kFmaRound{2};
constexpr Millis kReadWindow{30}, kReadRound{3};
// Faulting the buffer in is usually ~25 ms but can stall on memory
// compaction or a busy host: stop at kTouchWindow once each thread holds its
// minimum slice, and at kTouchHardLimit in any case (then bandwidth is not
// measured at all rather than blowing the probe's time budget).
constexpr Millis kTouchWindow{50}, kTouchHardLimit{130};

// Work between two looks at the clock: 256 KiB of reads, or 1024 rounds of
// 12 FMA chains (~6 us on a 3 GHz core), both far above the clock's cost.
constexpr size_t kReadBlockFloats = 64 * 1024;
constexpr uint64_t kFmaRoundsPerCheck = 1024;
constexpr size_t kHugePage = 2 * kMiB;
constexpr size_t kPageFloats = 4096 / sizeof(float);

void pin_current_thread(int cpu) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: unpinned still measures
#else
    (void)cpu;
#endif
}

// Runs body(i) on one thread per CPU of `cpus`, pinned there.
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

// Runs rounds until `window` has passed: in each, every thread calls
// work(thread, round_end) together, which works until round_end and returns
// the units it did. Returns the best round's units per second (in 1e9): all
// threads' units over the time from the round's start to its last finisher.
double best_round_rate(const std::vector<int>& cpus, Millis window, Millis round,
                       const std::function<double(size_t, Clock::time_point)>& work) {
    const size_t n = cpus.size();
    std::atomic<size_t> arrived{0};
    std::atomic<uint64_t> generation{0};
    std::atomic<bool> stop{false};
    Clock::time_point round_start;  // written by the last arriver before it bumps `generation`
    std::vector<double> units(n, 0.0);
    std::vector<Clock::time_point> finished(n);
    double best = 0;
    Clock::time_point window_end;
    bool window_started = false;

    // The last thread to arrive closes the previous round (scores it) and opens the next.
    auto close_and_open = [&] {
        const Clock::time_point now = Clock::now();
        if (window_started) {
            double total = 0;
            Clock::time_point last = round_start;
            for (size_t i = 0; i < n; ++i) {
                total += units[i];
                last = std::max(last, finished[i]);
            }
            const double seconds = std::chrono::duration<double>(last - round_start).count();
            if (seconds > 0) best = std::max(best, total / seconds * 1e-9);
        } else {
            window_started = true;
            window_end = now + window;
        }
        stop.store(now >= window_end, std::memory_order_relaxed);
        round_start = now;
        arrived.store(0, std::memory_order_relaxed);
        generation.fetch_add(1, std::memory_order_release);
    };

    run_pinned(cpus, [&](size_t t) {
        for (;;) {
            const uint64_t gen = generation.load(std::memory_order_acquire);
            if (arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
                close_and_open();
            } else {
                while (generation.load(std::memory_order_acquire) == gen) std::this_thread::yield();
            }
            if (stop.load(std::memory_order_relaxed)) return;
            units[t] = work(t, round_start + round);
            finished[t] = Clock::now();
        }
    });
    return best;
}

// Buffer aligned to huge pages and advised to use them: faulting in 256 MiB
// in 4 KiB pages alone would cost most of the time budget.
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

double measure_read_gbps(const std::vector<int>& cpus, size_t buffer_bytes, size_t min_bytes_per_thread,
                         uint64_t isa_flags) {
    const size_t threads = cpus.size();
    // Each thread owns a contiguous slice whose size is a whole number of read blocks.
    const size_t block_bytes = kReadBlockFloats * sizeof(float);
    const size_t blocks_per_thread = std::max<size_t>(1, buffer_bytes / block_bytes / threads);
    HugeBuffer buf(blocks_per_thread * threads * block_bytes);
    if (!buf.data) return 0;
    ReadLoopFn read = pick_read_loop(isa_flags);
    auto slice = [&](size_t t) { return buf.data + t * blocks_per_thread * kReadBlockFloats; };

    // First touch by the owner so pages land on its NUMA node. One store per
    // 4 KiB page suffices: the kernel zeroes the page (the bulk of the cost),
    // and the zeros read back as fast as any data (the loads are what is
    // timed, not the sums). Each slice needs min_blocks: a slice is re-read
    // only after the threads sharing its L3 swept theirs, and that reuse
    // distance must exceed the cache for the reads to come from memory.
    // Threads that reach their minimum help the others to theirs (a thread
    // preempted on a busy host would otherwise stall the whole probe), then
    // extend their own slice until kTouchWindow.
    const size_t min_blocks = std::min(blocks_per_thread, min_bytes_per_thread / block_bytes + 1);
    std::unique_ptr<std::atomic<size_t>[]> claimed(new std::atomic<size_t>[threads]);
    for (size_t t = 0; t < threads; ++t) claimed[t].store(0);
    auto claim = [&](size_t owner, size_t limit, size_t* block) {
        size_t cur = claimed[owner].load();
        while (cur < limit)
            if (claimed[owner].compare_exchange_weak(cur, cur + 1)) {
                *block = cur;
                return true;
            }
        return false;
    };
    auto touch = [&](size_t owner, size_t block) {
        float* p = slice(owner) + block * kReadBlockFloats;
        for (size_t i = 0; i < kReadBlockFloats; i += kPageFloats) p[i] = 1e-3f;
    };
    const Clock::time_point touch_start = Clock::now();
    const Clock::time_point touch_deadline = touch_start + kTouchWindow, touch_limit = touch_start + kTouchHardLimit;
    run_pinned(cpus, [&](size_t t) {
        size_t b = 0;
        for (size_t k = 0; k < threads; ++k) {
            const size_t owner = (t + k) % threads;
            while (Clock::now() < touch_limit && claim(owner, min_blocks, &b)) touch(owner, b);
        }
        while (Clock::now() < touch_deadline && claim(t, blocks_per_thread, &b)) touch(t, b);
    });
    std::vector<size_t> blocks_touched(threads);
    for (size_t t = 0; t < threads; ++t) blocks_touched[t] = claimed[t].load();
    // Equal slices, so no thread cycles through a small one that stays cached.
    const size_t blocks_read = *std::min_element(blocks_touched.begin(), blocks_touched.end());
    // Slices that fit the cache would measure the cache: report no number
    // (the probe then falls back to its estimate) rather than a wrong one.
    if (blocks_read < min_blocks) return 0;

    std::vector<size_t> next_block(threads, 0);  // each thread continues where its last round stopped
    std::vector<float> sinks(threads, 0.0f);
    const double gbps = best_round_rate(cpus, kReadWindow, kReadRound, [&](size_t t, Clock::time_point end) {
        const float* base = slice(t);
        size_t b = next_block[t];
        double bytes = 0;
        float sink = 0;
        do {
            sink += read(base + b * kReadBlockFloats, kReadBlockFloats);
            bytes += static_cast<double>(block_bytes);
            if (++b == blocks_read) b = 0;
        } while (Clock::now() < end);
        next_block[t] = b;
        sinks[t] += sink;
        return bytes;
    });
    volatile float keep = 0;
    for (float s : sinks) keep = keep + s;
    return gbps;
}

// CPU time of the calling thread in seconds (0 where unavailable).
double thread_cpu_seconds() {
#if defined(__linux__)
    timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
#endif
    return 0;
}

// Two readings of the same rounds, the larger wins:
//  - wall clock: the best round's flops over its duration (as for bandwidth);
//  - CPU time: each thread's flops over the CPU time it actually ran, summed.
// A thread that shares its core with another process for the whole window
// halves the first (every round waits for it) but not the second: the FMA
// rate of a core while it runs our code is what the cost model prices, the
// competition is a passing state of the machine. Threads on SMT siblings
// still share their core's FMA units, so their sum stays the core's rate.
double measure_peak_gflops(const std::vector<int>& cpus, uint64_t isa_flags) {
    FmaLoopFn fma = pick_fma_loop(isa_flags);
    const size_t n = cpus.size();
    std::vector<float> sinks(n, 0.0f);
    std::vector<double> flops_total(n, 0.0), cpu_total(n, 0.0);
    const double wall_gflops = best_round_rate(cpus, kFmaWindow, kFmaRound, [&](size_t t, Clock::time_point end) {
        const double cpu0 = thread_cpu_seconds();
        double flops = 0;
        do {
            flops += fma(kFmaRoundsPerCheck, &sinks[t]);
        } while (Clock::now() < end);
        flops_total[t] += flops;
        cpu_total[t] += thread_cpu_seconds() - cpu0;
        return flops;
    });
    double cpu_gflops = 0;
    bool every_thread_timed = true;
    for (size_t t = 0; t < n; ++t) {
        // Below ~1 ms of CPU time the clock's granularity would dominate.
        if (cpu_total[t] < 1e-3) every_thread_timed = false;
        else cpu_gflops += flops_total[t] / cpu_total[t] * 1e-9;
    }
    volatile float keep = 0;
    for (float s : sinks) keep = keep + s;
    return every_thread_timed ? std::max(wall_gflops, cpu_gflops) : wall_gflops;
}

}  // namespace

size_t min_read_bytes_per_thread(const CpuTopology& topo) {
    const size_t l3 = static_cast<size_t>(std::max(topo.l3_kb, 0)) * 1024;
    const int32_t threads = std::max<int32_t>(1, topo.affinity_cores);
    // Unknown sharing: assume one L3 for the whole machine.
    const int32_t sharers = topo.l3_shared_cpus > 0 ? topo.l3_shared_cpus : threads;
    // 4x, not just past 1x: current L3s insert adaptively to resist exactly
    // this cyclic thrashing and keep hitting on a good part of a 2x sweep.
    return 4 * l3 / static_cast<size_t>(std::max(1, std::min(sharers, threads)));
}

size_t calibration_buffer_bytes(const CpuTopology& topo) {
    const size_t l3 = static_cast<size_t>(std::max(topo.l3_kb, 0)) * 1024;
    const size_t threads = static_cast<size_t>(std::max<int32_t>(1, topo.affinity_cores));
    const size_t by_l3 = std::min<size_t>(256 * kMiB, std::max<size_t>(64 * kMiB, 8 * l3));
    return std::max(by_l3, threads * min_read_bytes_per_thread(topo));
}

CpuCalibration calibrate_cpu(const CpuTopology& topo, uint64_t isa_flags) {
    std::vector<int> cpus = topo.affinity_cpus;
    if (cpus.empty()) cpus.push_back(0);
    const Clock::time_point start = Clock::now();
    CpuCalibration c;
    // Compute first: it leaves the cores' clocks settled for the memory pass.
    c.peak_gflops_f32 = measure_peak_gflops(cpus, isa_flags);
    c.read_gbps = measure_read_gbps(cpus, calibration_buffer_bytes(topo), min_read_bytes_per_thread(topo), isa_flags);
    c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return c;
}

}  // namespace gqla

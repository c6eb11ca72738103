// SPDX-License-Identifier: Apache-2.0
// The two measurements of the CPU calibration, each on one pinned thread per
// CPU of `cpus`, all running at once, each bounded by a deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/probe/cpu_calibration_threads.hpp"
#include "backends/cpu/probe/cpu_estimates.hpp"

namespace gqla {

struct PeakReading {
    double gflops = 0;          // after the cap (0: not measured)
    double raw_gflops = 0;      // the trials' statistic before it
    double clock_ghz = 0;       // all-core clock from dependent additions (0: unknown)
    double ceiling_gflops = 0;  // the cap: FMA pipes x lanes x cores x clock_ghz (0: unknown)
};

// f32 FMA throughput with the widest FMA isa_flags allow: the cores are first
// run until their rate stops rising (clocks ramped up, wide units powered),
// then timed over several trials of fixed work on all threads at once. A
// trial's rate is the larger of its wall-time and CPU-time rates (another
// process on a core slows the first only); the upper quartile of the trials
// counts (a single trial in a turbo burst or with a timer glitch does not),
// capped at what the cores can do at the clock measured right after.
PeakReading measure_peak_gflops(const std::vector<int>& cpus, const CpuIdentity& id, const CpuTopology& topo,
                                uint64_t isa_flags, CalibrationClock::time_point deadline);

// Read bandwidths, 1e9 B/s (0: not measured).
struct ReadReading {
    double stream_gbps = 0;     // whole buffers swept in order
    double scattered_gbps = 0;  // 8 KiB runs at random places, the next ones prefetched
};

// Read bandwidth two ways. Each thread allocates and writes its own
// bytes_per_thread buffer (so its pages are local and real), then all threads
// sweep their whole buffers at once, several times (the statistic: the upper
// quartile of the sweeps), and then read page-sized runs of them in random
// order, as the attention kernels read a paged cache (the upper quartile of
// several trials). On some virtual machines a buffer streams at one of two speeds
// that differ by 1.6x from one allocation to the next while the kernels' own
// speed barely changes; the scattered reading moves much less with it.
// Buffers are filled until fill_deadline, and a buffer still short of
// min_bytes_per_thread then goes on to that size until fill_cap (a first
// touch can cost far more than the write itself: cpu_calibration.cpp).
// When some thread got fewer than min_bytes_per_thread even so (reads could
// then come from the cache) nothing is reported.
ReadReading measure_read_gbps(const std::vector<int>& cpus, size_t bytes_per_thread, size_t min_bytes_per_thread,
                              uint64_t isa_flags, CalibrationClock::time_point fill_deadline,
                              CalibrationClock::time_point fill_cap, CalibrationClock::time_point deadline);

}  // namespace gqla

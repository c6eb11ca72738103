// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_calibration.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backends/cpu/probe/cpu_calibration_measures.hpp"

namespace gqla {

namespace {

using Clock = CalibrationClock;
using Millis = std::chrono::milliseconds;

constexpr size_t kMiB = size_t(1) << 20;

// Deadlines from the start of the calibration. The FMA phase stops starting
// trials at kPeakDeadline (warm-up takes 10-50 ms, nine trials ~20 ms). Each
// thread fills its read buffer until kFillDeadline (~60 ms for 2 x 128 MiB
// on an idle host), and one still short of the minimum size goes on to that
// size until kFillCap; sweeps stop being started at kReadDeadline (at least
// kMinSweeps run after a late fill).
//
// Why the cap is that far out: in a virtual machine whose host takes back
// the memory the guest leaves free (a Firecracker guest on 2 Zen 5 cores,
// after ~45 s idle), first touching 256 MiB of huge pages took 437 ms
// (0.6 GB/s) against 18 ms once backed, and the probe, which then filled
// less than its minimum by kFillDeadline, fell back to the spec estimate in
// about one run of ten. A host too busy to fill even by kFillCap still
// gets the estimate.
constexpr Millis kPeakDeadline{75}, kFillDeadline{185}, kFillCap{650}, kReadDeadline{245};

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

CpuCalibration calibrate_cpu(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags) {
    std::vector<int> cpus = topo.affinity_cpus;
    if (cpus.empty()) cpus.push_back(0);
    const Clock::time_point start = Clock::now();
    CpuCalibration c;
    // Compute first: it leaves the cores' clocks settled for the memory pass.
    const PeakReading peak = measure_peak_gflops(cpus, id, topo, isa_flags, start + kPeakDeadline);
    c.peak_gflops_f32 = peak.gflops;
    c.peak_before_cap_gflops = peak.raw_gflops;
    c.clock_ghz = peak.clock_ghz;
    const size_t per_thread = std::max(calibration_buffer_bytes(topo) / cpus.size(), min_read_bytes_per_thread(topo));
    const ReadReading read = measure_read_gbps(cpus, per_thread, min_read_bytes_per_thread(topo), isa_flags,
                                               start + kFillDeadline, start + kFillCap, start + kReadDeadline);
    c.read_gbps = read.scattered_gbps;
    c.stream_gbps = read.stream_gbps;
    c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return c;
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// Measures what the CPU can actually read from memory and compute, with one
// pinned thread per CPU of the affinity mask, all running at once. Bounded in
// time (~150 ms on an idle 2-core host; every phase stops at a deadline, so
// ~250 ms at worst) so a probe stays cheap enough to run once per process.
// Each number is a robust statistic over several trials, so a briefly busy
// host costs accuracy little, and never exceeds a physical limit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cpu_features.hpp"
#include "core/cpu_topology.hpp"

namespace gqla {

struct CpuCalibration {
    double read_gbps = 0;               // read bandwidth of page-sized runs at random places
                                        // (what the cost model prices cache reads at), 1e9 B/s
                                        // (0: could not fault in a buffer beyond the caches in time)
    double stream_gbps = 0;             // the same buffers swept in order (diagnostic)
    double peak_gflops_f32 = 0;         // f32 FMA throughput, 1e9 FLOP/s, capped at
                                        // the cores' FMA peak at clock_ghz (0: not measured)
    double peak_before_cap_gflops = 0;  // the trials' statistic, before that cap
    double clock_ghz = 0;               // all-core clock measured after the FMA trials (0: unknown)
    double seconds = 0;                 // wall time the measurement took
};

// Buffer size for the bandwidth measurement: 8x the L3 of cpu0 clamped to
// [64, 256] MiB, so it is far out of cache yet cheap to fault in -- but at
// least min_read_bytes_per_thread for every thread of the affinity mask.
size_t calibration_buffer_bytes(const CpuTopology& topo);

// Bytes each thread must sweep so that the threads sharing one L3 together
// cycle through four times its size and (nearly) every read comes from memory.
size_t min_read_bytes_per_thread(const CpuTopology& topo);

// isa_flags (GQLA_ISA_*, after the GQLA_MAX_ISA cap) picks the widest FMA and
// load instructions the kernels may use, so the peak matches what they reach;
// id tells how many FLOPs per cycle those instructions can do on this core.
CpuCalibration calibrate_cpu(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags);

}  // namespace gqla

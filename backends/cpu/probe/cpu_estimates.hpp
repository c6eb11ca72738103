// SPDX-License-Identifier: Apache-2.0
// Spec-sheet estimates of a CPU's roofline numbers, used when the probe is
// asked not to measure (fast) and to derive the bf16 peak from the f32 one.
#pragma once

#include <cstdint>

#include "core/cpu_features.hpp"
#include "core/cpu_topology.hpp"

namespace gqla {

// Clock assumed when sysfs does not expose the base frequency (VMs,
// containers): a typical all-core AVX clock of current server parts.
// Turbo clocks are higher but wide vector code rarely sustains them.
constexpr double kAssumedClockGhz = 2.5;

// Streaming read bandwidth one core sustains (typical 10..20 GB/s on current
// x86 servers: 17-20 GB/s measured on 2-core Zen 3 and Zen 4 VMs) and a cap
// standing for the memory channels' limit.
constexpr double kAssumedReadGbpsPerCore = 16.0;
constexpr double kAssumedReadGbpsCap = 300.0;

// f32 FLOPs per cycle and core with the widest unit isa_flags allow: two FMA
// pipes (a fused multiply-add is 2 FLOPs); without FMA, one multiply and one
// add pipe. Per class of core:
//   AVX2 + FMA (Haswell.., Zen 1-3):            2 x 8 lanes x 2  = 32
//   AVX-512 split in two 256-bit halves (Zen 4,
//   AMD family 0x19, and the mobile Zen 5 parts): 32, as with AVX2
//   AVX-512 full width (Zen 5 desktop and server,
//   Intel cores with two 512-bit FMA ports):    2 x 16 lanes x 2 = 64
double estimated_f32_flops_per_cycle(const CpuIdentity& id, uint64_t isa_flags);

// True for AMD cores that execute a 512-bit operation as two 256-bit halves.
bool amd_splits_512_bit_ops(const CpuIdentity& id);

// All-core f32 peak (GFLOP/s): physical cores of the affinity mask (SMT
// siblings share FMA pipes) x flops per cycle x clock.
double estimated_peak_gflops_f32(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags);

// The most f32 FLOP/s the physical cores of the affinity mask can do at
// clock_ghz (a clock measured while calibrating); 0 when clock_ghz <= 0.
double theoretical_peak_gflops_f32(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags,
                                   double clock_ghz);

// Read bandwidth (GB/s): physical cores of the affinity mask x per-core rate, capped.
double estimated_read_gbps(const CpuTopology& topo);

// bf16 peak relative to the f32 peak: AMX tiles do 1024 bf16 multiply-adds
// per cycle (32x two AVX-512 FMA pipes), AVX512_BF16 dot products pair
// elements (2x); otherwise bf16 is converted and computed as f32 (1x).
double bf16_to_f32_peak_ratio(uint64_t isa_flags);

}  // namespace gqla

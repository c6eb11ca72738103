// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_estimates.hpp"

#include <algorithm>

#include "gqla/gqla.h"

namespace gqla {

bool amd_splits_512_bit_ops(const CpuIdentity& id) {
    if (id.vendor != "AuthenticAMD") return false;
    if (id.family < 0x1A) return true;  // Zen 4 and earlier (no AVX-512 before Zen 4 anyway)
    // Family 0x1A (Zen 5): the desktop and server cores have full 512-bit
    // FMA pipes; the mobile Strix Point (models 0x20-0x2F) and Krackan Point
    // (0x60-0x6F) parts keep 256-bit pipes.
    if (id.family == 0x1A) {
        const uint32_t m = id.model_number;
        return (m >= 0x20 && m <= 0x2F) || (m >= 0x60 && m <= 0x6F);
    }
    return false;  // later families: assume full width until known otherwise
}

double estimated_f32_flops_per_cycle(const CpuIdentity& id, uint64_t isa_flags) {
    const bool fma = (isa_flags & GQLA_ISA_FMA) != 0;
    int lanes = 4;  // SSE (baseline on x86-64)
    if (isa_flags & GQLA_ISA_AVX) lanes = 8;
    if (fma && (isa_flags & GQLA_ISA_AVX512F) && !amd_splits_512_bit_ops(id)) lanes = 16;
    return fma && lanes >= 8 ? lanes * 2.0 * 2.0  // 2 pipes x 2 FLOPs per FMA
                             : lanes * 2.0;       // 1 multiply + 1 add pipe
}

double estimated_peak_gflops_f32(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags) {
    const double clock = topo.base_clock_ghz > 0 ? topo.base_clock_ghz : kAssumedClockGhz;
    const int cores = std::max(1, topo.affinity_physical_cores);
    return cores * estimated_f32_flops_per_cycle(id, isa_flags) * clock;
}

double theoretical_peak_gflops_f32(const CpuIdentity& id, const CpuTopology& topo, uint64_t isa_flags,
                                   double clock_ghz) {
    if (!(clock_ghz > 0)) return 0;
    const int cores = std::max(1, topo.affinity_physical_cores);
    return cores * estimated_f32_flops_per_cycle(id, isa_flags) * clock_ghz;
}

double estimated_read_gbps(const CpuTopology& topo) {
    const int cores = std::max(1, topo.affinity_physical_cores);
    return std::min(kAssumedReadGbpsCap, cores * kAssumedReadGbpsPerCore);
}

double bf16_to_f32_peak_ratio(uint64_t isa_flags) {
    if (isa_flags & GQLA_ISA_AMX) return 32.0;
    if (isa_flags & GQLA_ISA_AVX512BF16) return 2.0;
    return 1.0;
}

}  // namespace gqla

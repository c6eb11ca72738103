// SPDX-License-Identifier: Apache-2.0
// What the host CPU says about itself through cpuid/xgetbv: identity strings
// and the ISA extensions both the CPU and the OS (saved register state) support.
#pragma once

#include <cstdint>
#include <string>

#include "gqla/gqla.h"

namespace gqla {

struct CpuIdentity {
    std::string vendor;   // "GenuineIntel", "AuthenticAMD", ... ("unknown" off x86)
    std::string model;    // brand string, trimmed ("unknown" when not reported)
    uint32_t family = 0;  // display family (base + extended)
    uint32_t model_number = 0;
};

// Identity of the CPU this thread runs on (all cores of a host report the same).
CpuIdentity cpu_identity();

// GQLA_ISA_* bits the hardware and the OS support, before any GQLA_MAX_ISA cap.
// 0 on non-x86 hosts (no kernel of gqla uses other SIMD ISAs).
uint64_t cpu_isa_flags_uncapped();

// Applies a GQLA_MAX_ISA-style cap: "none", "sse42", "avx", "avx2", "avx512",
// "amx"/"all" (case-insensitive). NULL, "" or an unknown value leave the flags
// unchanged, as oneDNN does with ONEDNN_MAX_CPU_ISA.
uint64_t cap_isa_flags(uint64_t flags, const char* max_isa);

// ISA bits of the CPU backend's kernel tables, in one place for the dispatch,
// the cost model (which prices what the kernels use) and the bench: the
// AVX-512 kernels, and the AVX-512 bf16 dot products that bf16 caches run on
// where the AVX-512 kernels run.
constexpr uint64_t kIsaAvx512Kernels =
    GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL | GQLA_ISA_FMA | GQLA_ISA_F16C;
constexpr uint64_t kIsaBf16Dot = GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL | GQLA_ISA_AVX512BF16;
constexpr bool isa_has(uint64_t flags, uint64_t need) { return (flags & need) == need; }

// The name of one GQLA_ISA_* bit as /proc/cpuinfo spells it ("sse4.2",
// "avx512_bf16"), a static string; nullptr for 0, several bits or an
// undefined bit (gqla_isa_name).
const char* isa_flag_name(uint64_t flag);

}  // namespace gqla

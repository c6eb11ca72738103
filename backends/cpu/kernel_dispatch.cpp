// SPDX-License-Identifier: Apache-2.0
// Runtime choice of the kernel table from the probe's ISA bits (which honor
// the GQLA_MAX_ISA cap, so a capped run exercises the narrower kernels); the
// bf16-dot table only where its dot products outrun the FMAs
// (cpu_bf16_dot_check.hpp); else the AMX table where the host has AMX.
#include "backends/cpu/kernel_table.hpp"
#include "core/cpu_features.hpp"
#include "backends/cpu/probe/cpu_bf16_dot_check.hpp"
#include "backends/cpu/probe/cpu_probe.hpp"
#include "core/probe.hpp"

namespace gqla::cpu {

namespace {

bool host_has(Isa isa) {
    const uint64_t f = cpu_isa_flags();
    switch (isa) {
        case Isa::Scalar:
            return true;
        case Isa::Avx2:
            return isa_has(f, GQLA_ISA_AVX2 | GQLA_ISA_FMA | GQLA_ISA_F16C);
        case Isa::Avx512:
            return isa_has(f, kIsaAvx512Kernels);
        case Isa::Avx512Bf16:
            return isa_has(f, kIsaAvx512Kernels | kIsaBf16Dot);
        case Isa::Amx:
            return amx_kernels() != nullptr;
    }
    return false;
}

}  // namespace

const KernelTable* kernels_for(Isa isa) {
    if (!host_has(isa)) return nullptr;
    switch (isa) {
        case Isa::Scalar:
            return &scalar_kernels();
        case Isa::Avx2:
            return &avx2_kernels();
        case Isa::Avx512:
            return &avx512_kernels();
        case Isa::Avx512Bf16:
            return &avx512bf16_kernels();
        case Isa::Amx:
            return amx_kernels();
    }
    return nullptr;
}

const KernelTable& best_kernels() {
    if (bf16_dot_pays(cpu_isa_flags()))
        if (const KernelTable* t = kernels_for(Isa::Avx512Bf16)) return *t;
    // Hosts with AMX (Intel) run AVX512-BF16 dot products at half their FMA
    // rate, so the AMX table builds on the f32 AVX-512 one.
    if (const KernelTable* t = kernels_for(Isa::Amx)) return *t;
    if (const KernelTable* t = kernels_for(Isa::Avx512)) return *t;
    if (const KernelTable* t = kernels_for(Isa::Avx2)) return *t;
    return scalar_kernels();
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Intel AMX tiles (AMX-TILE + AMX-BF16) for the absorb form over bf16 and
// 8-bit latents (attention_absorb_amx.inl): the AVX-512 table with those two
// entries replaced. A tile multiply does 16 x 16 x 32 products, so the
// 16-plus query rows of an MLA head group turn the absorb form, bound by
// arithmetic on AVX-512 FMAs, into one bound by reading the cache. Built
// with the AMX flags; used only after amx_kernels() has found the
// instructions and been granted the tile state.
#include "backends/cpu/avx512_unit_warnings.hpp"
// Of the kernels included below only the absorb ones and their helpers run
// here (the table takes the rest from kernels_avx512.cpp).
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <type_traits>  // std::integral_constant, used by attention_kernels.inl

#include "backends/cpu/kernel_table.hpp"
#include "backends/cpu/probe/cpu_probe.hpp"
#include "core/cpu_features.hpp"
#include "gqla/gqla.h"

namespace gqla::cpu {
namespace amx_isa {

#include "backends/cpu/simd_avx512.inl"
#include "backends/cpu/attention_kernels.inl"
#include "backends/cpu/attention_bf16_dot.inl"
namespace bf16dot {
#include "backends/cpu/attention_fp8_dot.inl"
#include "backends/cpu/attention_fp8_vbmi.inl"
#include "backends/cpu/attention_absorb_amx.inl"
}  // namespace bf16dot

}  // namespace amx_isa

namespace {

// CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE; XCR0 bits 17-18 the
// tile state enabled by the OS.
bool cpu_has_amx_bf16() {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & (3u << 17)) == (3u << 17);
}

// Linux hands out the tile data state per process on request (5.16+).
bool tile_state_granted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kReqXcompPerm = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kXfeatureTileData = 18;  // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) == 0;
#else
    return false;
#endif
}

bool amx_usable() {
    if (const char* off = std::getenv("GQLA_CPU_AMX"); off && *off == '0') return false;
    if (!isa_has(cpu_isa_flags(), kIsaAvx512Kernels | kIsaBf16Dot)) return false;
    static const bool granted = cpu_has_amx_bf16() && tile_state_granted();
    return granted;
}

KernelTable make_amx_table() {
    KernelTable t = avx512_kernels();
    t.isa = Isa::Amx;
    t.name = "avx512-amx";
    t.absorb_attend[GQLA_DTYPE_BF16 - 1] = amx_isa::bf16dot::absorb_attend_amx_bf16;
    t.absorb_attend[GQLA_DTYPE_FP8_E4M3 - 1] = __builtin_cpu_supports("avx512vbmi")
                                                   ? amx_isa::bf16dot::absorb_attend_amx_fp8_vbmi
                                                   : amx_isa::bf16dot::absorb_attend_amx_fp8;
    return t;
}

}  // namespace

const KernelTable* amx_kernels() {
    if (!amx_usable()) return nullptr;
    static const KernelTable table = make_amx_table();
    return &table;
}

}  // namespace gqla::cpu

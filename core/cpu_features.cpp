// SPDX-License-Identifier: Apache-2.0
#include "core/cpu_features.hpp"

#include <cctype>
#include <cstring>

#include "gqla/gqla.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define GQLA_X86 1
#endif

namespace gqla {

namespace {

#ifdef GQLA_X86
struct Regs {
    uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf = 0) {
    Regs r;
    __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
    return r;
}

uint32_t max_leaf(uint32_t base) { return __get_cpuid_max(base, nullptr); }

// XCR0: which register files the OS saves on context switch. Without OS
// support an instruction set is unusable even when cpuid advertises it.
uint64_t xcr0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }
#endif

std::string trim(const char* s) {
    std::string out(s);
    size_t b = out.find_first_not_of(' ');
    if (b == std::string::npos) return std::string();
    size_t e = out.find_last_not_of(' ');
    return out.substr(b, e - b + 1);
}

bool equals_ignore_case(const char* a, const char* b) {
    for (; *a && *b; ++a, ++b)
        if (std::tolower(static_cast<unsigned char>(*a)) != std::tolower(static_cast<unsigned char>(*b))) return false;
    return *a == *b;
}

constexpr uint64_t kSse42Set = GQLA_ISA_SSE42;
constexpr uint64_t kAvxSet = kSse42Set | GQLA_ISA_AVX;
constexpr uint64_t kAvx2Set = kAvxSet | GQLA_ISA_AVX2 | GQLA_ISA_FMA | GQLA_ISA_F16C;
// avx512_core (as oneDNN names it): F/BW/VL without the bf16/fp16 arithmetic.
constexpr uint64_t kAvx512CoreSet = kAvx2Set | GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL;
constexpr uint64_t kAvx512Set = kAvx512CoreSet | GQLA_ISA_AVX512BF16 | GQLA_ISA_AVX512FP16;

}  // namespace

CpuIdentity cpu_identity() {
    CpuIdentity id;
    id.vendor = "unknown";
    id.model = "unknown";
#ifdef GQLA_X86
    Regs v = cpuid(0);
    char vendor[13] = {};
    std::memcpy(vendor + 0, &v.ebx, 4);
    std::memcpy(vendor + 4, &v.edx, 4);
    std::memcpy(vendor + 8, &v.ecx, 4);
    if (vendor[0]) id.vendor = vendor;
    if (v.eax >= 1) {
        uint32_t sig = cpuid(1).eax;
        uint32_t base_family = (sig >> 8) & 0xf, base_model = (sig >> 4) & 0xf;
        id.family = base_family + (base_family == 0xf ? ((sig >> 20) & 0xff) : 0);
        id.model_number = base_model | ((base_family == 0x6 || base_family == 0xf) ? ((sig >> 16) & 0xf) << 4 : 0);
    }
    if (max_leaf(0x80000000u) >= 0x80000004u) {
        char brand[49] = {};
        for (uint32_t i = 0; i < 3; ++i) {
            Regs b = cpuid(0x80000002u + i);
            std::memcpy(brand + 16 * i + 0, &b.eax, 4);
            std::memcpy(brand + 16 * i + 4, &b.ebx, 4);
            std::memcpy(brand + 16 * i + 8, &b.ecx, 4);
            std::memcpy(brand + 16 * i + 12, &b.edx, 4);
        }
        std::string m = trim(brand);
        if (!m.empty()) id.model = m;
    }
#endif
    return id;
}

uint64_t cpu_isa_flags_uncapped() {
    uint64_t flags = 0;
#ifdef GQLA_X86
    uint32_t top = max_leaf(0);
    if (top < 1) return 0;
    Regs l1 = cpuid(1);
    Regs l7 = top >= 7 ? cpuid(7, 0) : Regs{};
    Regs l7s1 = (top >= 7 && l7.eax >= 1) ? cpuid(7, 1) : Regs{};

    if (bit(l1.ecx, 20)) flags |= GQLA_ISA_SSE42;

    bool osxsave = bit(l1.ecx, 27);
    uint64_t xcr = osxsave ? xcr0() : 0;
    bool os_ymm = (xcr & 0x6) == 0x6;           // SSE + AVX state
    bool os_zmm = (xcr & 0xe6) == 0xe6;         // + opmask, ZMM_Hi256, Hi16_ZMM
    bool os_tile = (xcr & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA

    if (os_ymm && bit(l1.ecx, 28)) {
        flags |= GQLA_ISA_AVX;
        if (bit(l7.ebx, 5)) flags |= GQLA_ISA_AVX2;
        if (bit(l1.ecx, 12)) flags |= GQLA_ISA_FMA;
        if (bit(l1.ecx, 29)) flags |= GQLA_ISA_F16C;
    }
    if (os_zmm && bit(l7.ebx, 16)) {
        flags |= GQLA_ISA_AVX512F;
        if (bit(l7.ebx, 30)) flags |= GQLA_ISA_AVX512BW;
        if (bit(l7.ebx, 31)) flags |= GQLA_ISA_AVX512VL;
        if (bit(l7s1.eax, 5)) flags |= GQLA_ISA_AVX512BF16;
        if (bit(l7.edx, 23)) flags |= GQLA_ISA_AVX512FP16;
    }
    // AMX needs the tile unit and its bf16 ops (what a bf16 GEMM would use).
    // Linux additionally requires arch_prctl(ARCH_REQ_XCOMP_PERM) before the
    // first tile instruction; that is the kernel's business, not the probe's.
    if (os_tile && bit(l7.edx, 24) && bit(l7.edx, 22)) flags |= GQLA_ISA_AMX;
#endif
    return flags;
}

uint64_t cap_isa_flags(uint64_t flags, const char* max_isa) {
    if (!max_isa || !*max_isa) return flags;
    if (equals_ignore_case(max_isa, "none")) return 0;
    if (equals_ignore_case(max_isa, "sse42") || equals_ignore_case(max_isa, "sse4.2")) return flags & kSse42Set;
    if (equals_ignore_case(max_isa, "avx")) return flags & kAvxSet;
    if (equals_ignore_case(max_isa, "avx2")) return flags & kAvx2Set;
    if (equals_ignore_case(max_isa, "avx512_core")) return flags & kAvx512CoreSet;
    if (equals_ignore_case(max_isa, "avx512")) return flags & kAvx512Set;
    return flags;  // "amx", "all" or unknown: no cap
}

const char* isa_flag_name(uint64_t flag) {
    switch (flag) {
        case GQLA_ISA_SSE42:
            return "sse4.2";
        case GQLA_ISA_AVX:
            return "avx";
        case GQLA_ISA_AVX2:
            return "avx2";
        case GQLA_ISA_FMA:
            return "fma";
        case GQLA_ISA_F16C:
            return "f16c";
        case GQLA_ISA_AVX512F:
            return "avx512f";
        case GQLA_ISA_AVX512BW:
            return "avx512bw";
        case GQLA_ISA_AVX512VL:
            return "avx512vl";
        case GQLA_ISA_AVX512BF16:
            return "avx512_bf16";
        case GQLA_ISA_AVX512FP16:
            return "avx512_fp16";
        case GQLA_ISA_AMX:
            return "amx";
        default:
            return nullptr;
    }
}

}  // namespace gqla

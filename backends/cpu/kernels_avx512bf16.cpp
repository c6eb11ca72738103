// SPDX-License-Identifier: Apache-2.0
// AVX512-BF16 dot products for both attention forms over a bf16 cache
// (attention_bf16_dot.inl, attention_wide_bf16.inl), for the narrow GQA form
// over an 8-bit cache (attention_fp8_dot.inl, attention_fp8_vbmi.inl) and
// for the transient up-projection (expansion_bf16.inl). Every other entry of
// the table is the plain AVX-512 kernel of kernels_avx512.cpp: this unit
// includes the AVX-512 kernels only for the helpers and fallbacks its own
// kernels call, so it compiles no second copy of the rest.
#include "backends/cpu/avx512_unit_warnings.hpp"
// Of the AVX-512 kernels included below, those no bf16 kernel calls are
// never used here (the table takes them from kernels_avx512.cpp).
#pragma GCC diagnostic ignored "-Wunused-function"
#include <immintrin.h>

#include <cstdint>
#include <type_traits>  // std::integral_constant, used by attention_kernels.inl

#include <cstdlib>

#include "backends/cpu/gqa_kernel_race.hpp"
#include "backends/cpu/kernel_table.hpp"
#include "gqla/gqla.h"

namespace gqla::cpu {
namespace avx512bf16_isa {

#include "backends/cpu/simd_avx512.inl"
#include "backends/cpu/attention_kernels.inl"
#include "backends/cpu/attention_bf16_dot.inl"
namespace bf16dot {
#include "backends/cpu/attention_wide_bf16.inl"
#include "backends/cpu/expansion_bf16.inl"
#include "backends/cpu/attention_fp8_dot.inl"
#include "backends/cpu/attention_fp8_vbmi.inl"
}  // namespace bf16dot

}  // namespace avx512bf16_isa

namespace {

KernelTable make_bf16_table(Bf16GqaScores scores) {
    const bool dot = scores == Bf16GqaScores::Dot;
    KernelTable t = avx512_kernels();
    t.isa = Isa::Avx512Bf16;
    t.name = dot ? "avx512-bf16" : "avx512-bf16 (fma scores)";
    t.gqa_attend[GQLA_DTYPE_BF16 - 1] =
        dot ? avx512bf16_isa::bf16dot::gqa_attend_bf16 : avx512bf16_isa::bf16dot::gqa_attend_bf16_fma_scores;
    t.gqa_attend_wide[GQLA_DTYPE_BF16 - 1] = avx512bf16_isa::bf16dot::gqa_attend_wide_bf16;
    t.expand[GQLA_DTYPE_BF16 - 1] = avx512bf16_isa::bf16dot::expand_latent_bf16;
    t.absorb_attend[GQLA_DTYPE_BF16 - 1] = avx512bf16_isa::bf16dot::absorb_attend_bf16;
    // e4m3 widening by byte lookups where the host has AVX512-VBMI; that
    // kernel also reads the gathered rows of sparse calls in place.
    const bool vbmi = __builtin_cpu_supports("avx512vbmi");
    t.gqa_attend[GQLA_DTYPE_FP8_E4M3 - 1] =
        vbmi ? avx512bf16_isa::bf16dot::gqa_attend_fp8_vbmi : avx512bf16_isa::bf16dot::gqa_attend_fp8_dot;
    t.fp8_gqa_lists = vbmi;
    t.absorb_attend[GQLA_DTYPE_FP8_E4M3 - 1] =
        vbmi ? avx512bf16_isa::bf16dot::absorb_attend_fp8_vbmi : avx512bf16_isa::bf16dot::absorb_attend_fp8_dot;
    return t;
}

// The FMA scores must win by this much to replace the dot products: a near
// tie keeps the kernel measured longest.
constexpr double kFmaScoresMargin = 0.95;

}  // namespace

const KernelTable& avx512bf16_kernels(Bf16GqaScores scores) {
    static const KernelTable dot = make_bf16_table(Bf16GqaScores::Dot);
    static const KernelTable fma = make_bf16_table(Bf16GqaScores::Fma);
    return scores == Bf16GqaScores::Dot ? dot : fma;
}

Bf16GqaScores bf16_gqa_scores() {
    if (const char* force = std::getenv("GQLA_CPU_BF16_DOT_SCORES"); force && *force)
        return *force == '0' ? Bf16GqaScores::Fma : Bf16GqaScores::Dot;
    static const Bf16GqaScores measured =
        second_gqa_kernel_wins(avx512bf16_kernels(Bf16GqaScores::Dot).gqa_attend[GQLA_DTYPE_BF16 - 1],
                               avx512bf16_kernels(Bf16GqaScores::Fma).gqa_attend[GQLA_DTYPE_BF16 - 1], kFmaScoresMargin)
            ? Bf16GqaScores::Fma
            : Bf16GqaScores::Dot;
    return measured;
}

const KernelTable& avx512bf16_kernels() { return avx512bf16_kernels(bf16_gqa_scores()); }

}  // namespace gqla::cpu

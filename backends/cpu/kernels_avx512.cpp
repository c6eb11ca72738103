// SPDX-License-Identifier: Apache-2.0
// AVX-512 (F/BW/VL/DQ) kernels: 16 f32 lanes, 32 vector registers, which
// allow larger register tiles than AVX2.
// GCC 12's AVX-512 headers build conversions on `__m512 __Y = __Y;`
// (_mm512_undefined_*), which -Wuninitialized reports at every inlined use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <type_traits>  // std::integral_constant, used by attention_kernels.inl

#include "backends/cpu/kernel_table.hpp"
#include "gqla/gqla.h"

namespace gqla::cpu {
namespace avx512_isa {

#include "backends/cpu/simd_avx512.inl"
#include "backends/cpu/attention_kernels.inl"
#include "backends/cpu/kernel_table_entries.inl"

}  // namespace avx512_isa

const KernelTable& avx512_kernels() { return avx512_isa::make_table(Isa::Avx512, "avx512"); }

}  // namespace gqla::cpu

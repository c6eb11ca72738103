// SPDX-License-Identifier: Apache-2.0
// AVX-512 (F/BW/VL/DQ) kernels: 16 f32 lanes, 32 vector registers, which
// allow larger register tiles than AVX2.
#include "backends/cpu/avx512_unit_warnings.hpp"
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

// SPDX-License-Identifier: Apache-2.0
// Whether bf16 caches run on the AVX512-BF16 dot-product kernel table. Having
// the instruction is not enough: a 2-vCPU Sapphire Rapids guest ("Intel(R)
// Xeon(R) Processor") ran vdpbf16ps at half its f32 FMA FLOP rate (96 against
// 184 GFLOP/s, 2 threads), and there the dot-product table ran bf16 caches
// slower than the AVX-512 one that widens bf16 to f32 (T=4096, B=1, medians,
// two interleaved rounds: GQA 32/8 decode 1.53-1.62 against 1.29-1.46 ms,
// prefill s_q=512 354-360 against 201-247 ms, LLaMA-3-8B-GQLA absorb decode
// 6.3-8.3 against 2.5-2.8 ms), while a Zen 4 core runs it at twice its FMA
// rate. So the choice is measured.
#pragma once

#include <cstdint>

namespace gqla {

// True where isa_flags allow the AVX512-BF16 kernels and one core's dot
// products deliver at least kBf16DotAdvantage times its widest FMA's FLOPs.
// Measured once per process on the calling thread (~6 ms), then cached.
// GQLA_CPU_BF16_DOT=0 never takes them, =1 always (where the ISA allows).
bool bf16_dot_pays(uint64_t isa_flags);

constexpr double kBf16DotAdvantage = 1.25;

}  // namespace gqla

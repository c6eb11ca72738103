// SPDX-License-Identifier: Apache-2.0
// The inner loops of the CPU calibration, one per instruction set. Each is
// compiled for its ISA through a target attribute (the core itself is built
// for baseline x86-64) and must only be called when the ISA flags allow it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gqla {

// Runs `iters` rounds of independent multiply-add chains kept in registers;
// returns the FLOPs performed (a fused multiply-add counts as 2). The chains'
// sum goes to *sink so the compiler cannot drop the work.
using FmaLoopFn = double (*)(uint64_t iters, float* sink);

// Reads n floats (n a multiple of 64, p 64-byte aligned) and returns their sum
// so the loads cannot be elided.
using ReadLoopFn = float (*)(const float* p, size_t n);

// Runs rounds x 64 integer additions, each depending on the one before, and
// returns how many ran. An addition takes one cycle on every x86 core, so the
// count over the time taken is the core clock, whatever the hypervisor or
// sysfs say. 0 off x86, where no such guarantee holds: the clock is unknown.
uint64_t dependent_adds(uint64_t rounds);

// Widest loops the GQLA_ISA_* flags permit (portable fallbacks on other hosts).
FmaLoopFn pick_fma_loop(uint64_t isa_flags);
// Chains of AVX512-BF16 dot products (a product and its sum count 2 FLOPs),
// or null where the flags lack them.
FmaLoopFn pick_bf16_dot_loop(uint64_t isa_flags);
ReadLoopFn pick_read_loop(uint64_t isa_flags);

}  // namespace gqla

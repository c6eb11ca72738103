// SPDX-License-Identifier: Apache-2.0
// Which of two GQA-form kernels for bf16 caches runs faster on this host,
// timed on the same hot work items. Some choices between kernels depend on
// how a core issues its instructions (e.g. whether 512-bit FMAs issue as
// fast as vdpbf16ps), which no cpuid bit tells; a race of the kernels
// themselves does.
#pragma once

#include "backends/cpu/kernel_table.hpp"

namespace gqla::cpu {

// True when `b` takes at most `margin` times `a`'s time on decode-shaped
// items of a bf16 cache held in L1/L2 (4 query rows, 128-dim keys and
// values, 256 tokens; one item with f32 queries and one with queries exact
// in bf16, their times summed). Best of several alternating trials each,
// about 1 ms in all on the calling thread. Both must be bf16 entries of a
// table the host can run.
bool second_gqa_kernel_wins(GqaAttendFn a, GqaAttendFn b, double margin);

}  // namespace gqla::cpu

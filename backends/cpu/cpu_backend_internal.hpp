// SPDX-License-Identifier: Apache-2.0
// Internal controls of the CPU backend for tests and benchmarks (not part of
// the vtable): pin a context to one ISA's kernels to exercise each of them.
#pragma once

#include "backends/cpu/kernel_table.hpp"

namespace gqla::cpu {

// Use the kernels of `isa` in context `ctx` (a CPU backend context). False
// when the host lacks that ISA; the context then keeps its kernels.
bool use_isa(void* ctx, Isa isa);
// Name of the kernel table a context uses ("scalar", "avx2", "avx512").
const char* isa_name(void* ctx);

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Internal controls of the CPU backend for tests and benchmarks (not part of
// the vtable): pin a context to one ISA's kernels to exercise each of them,
// and shrink its chunks to exercise how calls are cut.
#pragma once

#include <cstdint>

#include "backends/cpu/kernel_table.hpp"

namespace gqla::cpu {

// Use the kernels of `isa` in context `ctx` (a CPU backend context). False
// when the host lacks that ISA; the context then keeps its kernels.
bool use_isa(void* ctx, Isa isa);
// Use `table` in context `ctx`; the caller makes sure the host can run it.
void use_table(void* ctx, const KernelTable& table);
// Lowers the query rows of one chunk (GQA forms, absorb path) to at least
// `rows` (never below the heads of one query, never above what the
// workspace holds), so that small tests cut sequences into query ranges.
void limit_chunk_rows(void* ctx, int64_t rows);

}  // namespace gqla::cpu

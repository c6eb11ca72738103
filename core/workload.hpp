// SPDX-License-Identifier: Apache-2.0
// Checked copy of a caller's gqla_workload (cost prediction input).
#pragma once

#include "gqla/gqla.h"

namespace gqla {

// Throws INVALID_ARGUMENT for NULL, a short struct_size, topk outside
// 0..2^20 (when present), batch/context/q_len
// < 1 or q_len > context (the queries are the last q_len cached tokens).
gqla_workload read_workload(const gqla_workload* w, const char* name = "w");

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// Merging partial attention states: the outputs and log-sum-exps of the same
// queries over disjoint sets of positions (split sequences, tensor-parallel
// shards of the context, a shared prefix attended separately from each
// sequence's own suffix) combine into the attention over their union.
#pragma once

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla {

// Checks every argument (throws INVALID_ARGUMENT / UNSUPPORTED naming it)
// and writes out (and out_lse when not NULL). See gqla.h for the contract.
void merge_attention_states(int32_t num_states, const gqla_tensor* outputs, const gqla_tensor* lses, gqla_tensor* out,
                            gqla_tensor* out_lse);

}  // namespace gqla

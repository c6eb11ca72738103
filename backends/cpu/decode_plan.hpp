// SPDX-License-Identifier: Apache-2.0
// Work planning of one decode chunk: every unit (a sequence's KV group, or a
// block of query rows for the absorb path) covers the cache positions
// [0, length). Long units are split so that all threads get work even at
// batch 1 (split-KV); pieces are merged afterwards through their
// log-sum-exp. Items are ordered largest first for dynamic scheduling.
#pragma once

#include <cstdint>

#include "backends/cpu/workspace_layout.hpp"

namespace gqla::cpu {

struct DecodePlan {
    WorkItem* items;
    UnitSplit* units;
    int32_t* order;     // item indices, largest first
    int32_t num_items = 0;
    int32_t num_units = 0;
};

// unit_length(u) gives the tokens of unit u. The arrays live in the
// workspace (capacities from the layout); nothing is allocated.
template <class LengthOf>
void plan_decode(DecodePlan& plan, int32_t num_units, LengthOf unit_length, const WorkspaceLayout& L);

// Non-template part: fills items from per-unit lengths already stored in
// items[u].t1 (t0 = 0) by the caller.
void plan_splits(DecodePlan& plan, int32_t num_units, const WorkspaceLayout& L);

template <class LengthOf>
void plan_decode(DecodePlan& plan, int32_t num_units, LengthOf unit_length, const WorkspaceLayout& L) {
    for (int32_t u = 0; u < num_units; ++u) {
        plan.units[u].count = 1;
        plan.units[u].first_partial = -1;
        plan.items[u] = WorkItem{u, -1, 0, unit_length(u)};
    }
    plan_splits(plan, num_units, L);
}

}  // namespace gqla::cpu

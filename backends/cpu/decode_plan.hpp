// SPDX-License-Identifier: Apache-2.0
// Work planning of one chunk: every unit (a tile of a KV group's rows, or a
// block of query rows for the absorb path) covers the cache positions
// [0, extent). Long units are split so that all threads get work even at
// batch 1 (split-KV); pieces are merged afterwards through their
// log-sum-exp. Items are ordered largest first for dynamic scheduling.
#pragma once

#include <cstdint>

#include "backends/cpu/workspace_layout.hpp"

namespace gqla::cpu {

struct DecodePlan {
    WorkItem* items;
    UnitSplit* units;
    int32_t* order;  // item indices, largest first
    int32_t num_items = 0;
    int32_t num_units = 0;
};

// The plan's arrays in the workspace of path W (nothing is allocated).
DecodePlan plan_arrays(float* workspace, const PathWorkspace& W);

// unit_extent(u) gives the positions [0, extent) unit u reads, unit_rows(u)
// its query rows (items are ordered by rows x tokens).
template <class ExtentOf, class RowsOf>
void plan_decode(DecodePlan& plan, int32_t num_units, ExtentOf unit_extent, RowsOf unit_rows, const PathWorkspace& W,
                 int32_t threads);

// Non-template part: fills items from per-unit extents and rows already
// stored in items[u].t1 (t0 = 0) and items[u].rows by the caller.
void plan_splits(DecodePlan& plan, int32_t num_units, const PathWorkspace& W, int32_t threads);

template <class ExtentOf, class RowsOf>
void plan_decode(DecodePlan& plan, int32_t num_units, ExtentOf unit_extent, RowsOf unit_rows, const PathWorkspace& W,
                 int32_t threads) {
    for (int32_t u = 0; u < num_units; ++u) {
        plan.units[u].count = 1;
        plan.units[u].first_partial = -1;
        plan.items[u] = WorkItem{u, -1, 0, unit_extent(u), unit_rows(u)};
    }
    plan_splits(plan, num_units, W, threads);
}

}  // namespace gqla::cpu

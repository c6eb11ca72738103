// SPDX-License-Identifier: Apache-2.0
// Sizes and offsets of the decode workspace, fixed at create from the
// session's limits so decode never allocates. Large batches are processed in
// chunks of at most `rows_cap` query rows (batch x s_q x heads), which keeps
// the workspace independent of max_batch beyond that cap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend_api.h"

namespace gqla::cpu {

// A work item: one (sequence, KV group or row block) unit of a decode chunk
// over the cache positions [t0, t1).
struct WorkItem {
    int32_t unit;
    int32_t partial;   // index of its partial-result slot, -1: writes the output directly
    int64_t t0, t1;
};

// A unit's split: pieces [first, first + count) of the item list.
struct UnitSplit {
    int32_t first_partial;  // -1 when not split
    int32_t count;
};

struct PathWorkspace {
    int64_t rows_per_unit = 0;   // query rows one unit holds (GQA: n_rep * s_q; absorb: row block)
    size_t thread_floats = 0;    // per-thread scratch
    size_t partial_floats = 0;   // one partial-result slot
    // offsets in floats from the workspace start
    size_t q_off = 0, q2_off = 0, qt_off = 0, out_off = 0;
    size_t thread_off = 0, partial_off = 0, items_off = 0, units_off = 0, order_off = 0;
    size_t total_floats = 0;
};

struct WorkspaceLayout {
    int64_t rows_cap = 0;        // query rows per chunk
    int32_t max_units = 0;
    int32_t max_items = 0;
    int32_t max_partials = 0;
    int32_t threads = 1;
    int32_t absorb_row_block = 0;
    PathWorkspace gqa;           // GQA kind and GQLA GQA path
    PathWorkspace absorb;        // GQLA absorb path
    size_t total_bytes = 0;      // max of both paths (they never run at once)
};

WorkspaceLayout plan_workspace(const gqla_backend_desc& d);

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Sizes and offsets of the attention workspace, fixed at create from the
// session's limits so that no call allocates. A call is processed in chunks
// of at most `rows_cap` query rows (query tokens x heads); a sequence with
// more queries than a chunk holds is cut into query ranges. Work items never
// hold more than a bounded tile of rows, so per-thread scratch does not grow
// with max_q_len or max_q_tokens.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernel_table.hpp"
#include "core/backend_api.h"

namespace gqla::cpu {

// Sequences with at most this many queries (decode steps) keep all the rows
// of a KV group in one item of the register-tiled kernel, which streams the
// group's K/V once for them; longer query runs go to the wide kernel in
// tiles of kWideRows rows (kernel_table.hpp).
constexpr int32_t kNarrowQueries = 16;
// Tokens of one latent piece the GQA_TRANSIENT form up-projects at a time
// (kExpandTokens, kernel_table.hpp, per expansion work item).
constexpr int32_t kPieceTokens = 256;

// A work item: one tile (or unit) of a chunk over the cache positions [t0, t1).
struct WorkItem {
    int32_t unit;
    int32_t partial;  // index of its partial-result slot, -1: writes the output directly
    int64_t t0, t1;
    int32_t rows;  // query rows it holds: its work is rows x (t1 - t0)
};

// A unit's split: pieces [first, first + count) of the item list.
struct UnitSplit {
    int32_t first_partial;  // -1 when not split
    int32_t count;
};

// GQA form: the queries [k0, k1) of sequence b for the heads of KV group g.
// Its rows are (k, hh) in that order, row (k - k0) * n_rep + hh, and start at
// row0 among the chunk's rows; its tiles are tile0 .. tile0 + tiles - 1.
struct GqaUnit {
    int32_t b, g, k0, k1;
    int64_t row0;
    int32_t tile0, tiles;
};

// Rows [row0, row0 + rows) of a unit as one kernel call; its rows see at
// most the positions [0, extent).
struct GqaTile {
    int32_t unit, row0, rows;
    int32_t wide;  // rows in SIMD lanes (gqa_attend_wide)
    int64_t extent;
};

// Absorb form: the queries [k0, k1) of sequence b, all heads; rows
// (k, h) in lanes, row (k - k0) * H + h, padded to rows_pad. Its queries are
// q0 .. q0 + k1 - k0 - 1 among the chunk's; its transposed queries start at
// qt_off floats; its row blocks are block0 .. block0 + blocks - 1.
struct AbsorbSegment {
    int32_t b, k0, k1, rows_pad;
    int64_t q0, qt_off;
    int32_t block0, blocks;
};

// Lanes [col0, col0 + width) of a segment; rows see at most [0, extent).
struct AbsorbBlock {
    int32_t seg, col0, width;
    int64_t extent;
};

struct PathWorkspace {
    int64_t rows_cap = 0;   // query rows of one chunk
    int32_t max_units = 0;  // GQA: units; absorb: segments
    int32_t max_tiles = 0;  // GQA: tiles; absorb: row blocks
    int32_t max_items = 0;
    int32_t max_partials = 0;
    size_t thread_floats = 0;   // per-thread scratch
    size_t partial_floats = 0;  // one partial-result slot
    // offsets in floats from the workspace start
    size_t q_off = 0, q2_off = 0, qt_off = 0, out_off = 0;
    size_t state_off = 0, slots_off = 0;
    size_t thread_off = 0, partial_off = 0, items_off = 0, splits_off = 0, order_off = 0;
    size_t units_off = 0, tiles_off = 0;
    size_t total_floats = 0;
};

struct WorkspaceLayout {
    int32_t threads = 1;
    int64_t narrow_rows = 0;   // most rows of a narrow GQA tile
    int64_t tile_rows = 0;     // most rows of any GQA tile
    size_t attend_floats = 0;  // kernel scratch of one GQA item (either kernel)
    int32_t absorb_row_block = 0;
    // GQLA GQA_TRANSIENT: latent pieces up-projected at once, and the floats
    // of one (kPieceTokens x (d_c + d_v + d_r) elements of the cache dtype).
    int32_t slots = 0;
    size_t slot_floats = 0;
    PathWorkspace gqa;       // GQA kind and both GQA forms of GQLA
    PathWorkspace absorb;    // GQLA absorb path
    size_t total_bytes = 0;  // max of both paths (they never run at once)
};

WorkspaceLayout plan_workspace(const gqla_backend_desc& d);

}  // namespace gqla::cpu

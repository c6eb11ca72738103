// SPDX-License-Identifier: Apache-2.0
// Workspace sizing: see workspace_layout.hpp.
#include "backends/cpu/workspace_layout.hpp"

#include <algorithm>

#include "backends/cpu/kernel_table.hpp"

namespace gqla::cpu {

namespace {

// Query rows one decode chunk may hold when max_batch * max_q_len * H is
// larger: enough rows to keep every thread busy with full tiles.
constexpr int64_t kChunkRows = 4096;

struct Bump {
    size_t at = 0;
    size_t take(size_t floats) {
        size_t off = at;
        at += static_cast<size_t>(round16(static_cast<int64_t>(floats)));
        return off;
    }
};

void place_common(PathWorkspace& p, Bump& b, const WorkspaceLayout& L) {
    p.thread_off = b.take(p.thread_floats * L.threads);
    p.partial_off = b.take(p.partial_floats * L.max_partials);
    p.items_off = b.take(sizeof(WorkItem) * L.max_items / sizeof(float) + 1);
    p.units_off = b.take(sizeof(UnitSplit) * L.max_units / sizeof(float) + 1);
    p.order_off = b.take(static_cast<size_t>(L.max_items));
    p.total_floats = b.at;
}

}  // namespace

WorkspaceLayout plan_workspace(const gqla_backend_desc& d) {
    WorkspaceLayout L;
    const int64_t H = d.num_heads, G = d.num_kv_heads, n_rep = H / G;
    const int64_t mq = std::max<int32_t>(1, d.max_q_len), mb = std::max<int32_t>(1, d.max_batch);
    L.threads = std::max<int32_t>(1, d.num_threads);
    L.rows_cap = std::max(H * mq, std::min(mb * mq * H, kChunkRows));
    const int64_t bc_max = std::max<int64_t>(1, std::min(mb, L.rows_cap / H));
    // Split pieces of a chunk never exceed 2 * (threads * 4) (see decode_plan).
    L.max_partials = 8 * L.threads + 8;

    const int64_t dv = d.value_dim;
    const int64_t dk = d.kind == GQLA_KIND_GQA ? d.head_dim : d.nope_dim + d.rope_dim;
    int64_t units = bc_max * G;

    // GQA form.
    PathWorkspace& g = L.gqa;
    g.rows_per_unit = n_rep * mq;
    g.thread_floats = gqa_scratch_floats(g.rows_per_unit, dk) + round16(g.rows_per_unit * dv) +
                      round16(4 * g.rows_per_unit);  // m, l, row limits (int64)
    g.partial_floats = round16(g.rows_per_unit * (dv + 2));

    // Absorb form.
    PathWorkspace& a = L.absorb;
    if (d.kind == GQLA_KIND_GQLA) {
        const int64_t r = d.latent_dim, K = d.latent_dim + d.rope_dim;
        const int64_t rows_pad_max = (H * mq + kAbsorbRowAlign - 1) / kAbsorbRowAlign * kAbsorbRowAlign;
        L.absorb_row_block = static_cast<int32_t>(std::min<int64_t>(kAbsorbMaxRowBlock, rows_pad_max));
        const int64_t RB = L.absorb_row_block;
        units = std::max(units, (L.rows_cap + kAbsorbRowAlign * bc_max) / RB + 2 * bc_max + 1);
        a.rows_per_unit = RB;
        a.thread_floats = round16(kAbsorbTokenBlock * K) + round16(kAbsorbTokenBlock * RB + RB) + round16(r * RB) +
                          round16(4 * RB) + absorb_pair_scratch_floats(K, r, RB);
        a.partial_floats = round16(r * RB + 2 * RB);
    }
    L.max_units = static_cast<int32_t>(units);
    L.max_items = L.max_units + L.max_partials;

    Bump bg;
    g.q_off = bg.take(static_cast<size_t>(L.rows_cap * dk));
    place_common(g, bg, L);
    size_t total = g.total_floats;

    if (d.kind == GQLA_KIND_GQLA) {
        const int64_t r = d.latent_dim, K = d.latent_dim + d.rope_dim;
        Bump ba;
        a.q_off = ba.take(static_cast<size_t>(L.rows_cap * d.nope_dim));   // packed qc, group-major
        a.q2_off = ba.take(static_cast<size_t>(L.rows_cap * r));           // q~, later o~
        a.qt_off = ba.take(static_cast<size_t>(K * (L.rows_cap + kAbsorbRowAlign * bc_max)));
        a.out_off = ba.take(static_cast<size_t>(L.rows_cap * dv));         // projected output
        place_common(a, ba, L);
        total = std::max(total, a.total_floats);
    }
    L.total_bytes = total * sizeof(float);
    return L;
}

}  // namespace gqla::cpu

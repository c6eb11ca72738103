// SPDX-License-Identifier: Apache-2.0
// Workspace sizing: see workspace_layout.hpp.
#include "backends/cpu/workspace_layout.hpp"

#include <algorithm>

#include "backends/cpu/kernel_table.hpp"
#include "core/dtype.hpp"

namespace gqla::cpu {

namespace {

// Query rows (tokens x heads) of one chunk when the limits allow more. The
// GQA form's chunks are larger: the GQA_TRANSIENT form up-projects each
// latent piece once per chunk, so every chunk a sequence's queries are cut
// into costs another expansion of the context they see; the absorb path
// holds ~1.4 K floats of projections per row (DeepSeek-V3 shapes) and gains
// nothing from larger chunks.
constexpr int64_t kGqaChunkRows = 16384;
constexpr int64_t kAbsorbChunkRows = 4096;

struct Bump {
    size_t at = 0;
    size_t take(size_t floats) {
        size_t off = at;
        at += static_cast<size_t>(round16(static_cast<int64_t>(floats)));
        return off;
    }
};

template <class T>
size_t floats_for(int64_t n) {
    return (sizeof(T) * static_cast<size_t>(n) + sizeof(float) - 1) / sizeof(float);
}

void place_common(PathWorkspace& p, Bump& b, int32_t threads) {
    p.thread_off = b.take(p.thread_floats * static_cast<size_t>(threads));
    p.partial_off = b.take(p.partial_floats * static_cast<size_t>(p.max_partials));
    p.items_off = b.take(floats_for<WorkItem>(p.max_items));
    p.splits_off = b.take(floats_for<UnitSplit>(p.max_tiles));
    p.order_off = b.take(floats_for<int32_t>(p.max_items));
}

// Chunk rows: a decode step of max_q_len <= kNarrowQueries queries always
// fits a whole sequence; larger calls are cut at `cap` rows.
int64_t chunk_rows(const gqla_backend_desc& d, int64_t q_tokens, int64_t cap) {
    const int64_t H = d.num_heads;
    const int64_t mq = std::max<int32_t>(1, d.max_q_len);
    return std::max(H * std::min<int64_t>(mq, kNarrowQueries), std::min(q_tokens * H, cap));
}

}  // namespace

WorkspaceLayout plan_workspace(const gqla_backend_desc& d) {
    WorkspaceLayout L;
    const int64_t H = d.num_heads, G = d.num_kv_heads, n_rep = H / G;
    const int64_t mq = std::max<int32_t>(1, d.max_q_len), mb = std::max<int32_t>(1, d.max_batch);
    const int64_t q_tokens = d.max_q_tokens > 0 ? d.max_q_tokens : mb * mq;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    L.threads = std::max<int32_t>(1, d.num_threads);
    const int32_t max_partials = 8 * L.threads + 8;  // split pieces of a chunk stay under 2 * threads * 4 (decode_plan)

    const int64_t dv = d.value_dim;
    const int64_t d1 = gqla ? d.nope_dim : d.head_dim, d2 = gqla ? d.rope_dim : 0, dk = d1 + d2;

    // GQA form.
    PathWorkspace& g = L.gqa;
    g.rows_cap = chunk_rows(d, q_tokens, kGqaChunkRows);
    L.narrow_rows = n_rep * std::min<int64_t>(mq, kNarrowQueries);
    L.tile_rows = std::max<int64_t>(L.narrow_rows, kWideRows);
    g.max_units = static_cast<int32_t>(std::min(g.rows_cap / n_rep, mb * G) + 1);
    g.max_tiles = static_cast<int32_t>(g.max_units + g.rows_cap / kWideRows + 1);
    g.max_partials = max_partials;
    g.max_items = g.max_tiles + g.max_partials;
    L.attend_floats =
        static_cast<size_t>(std::max(gqa_scratch_floats(L.narrow_rows, dk), gqa_wide_scratch_floats(d1, d2, dv)));
    // Then a tile's own acc, m, l and row limits (int64).
    int64_t thread_floats =
        static_cast<int64_t>(L.attend_floats) + round16(L.tile_rows * dv) + round16(4 * L.tile_rows);
    if (gqla) {
        // One expansion block: the kernel's scratch (or the latent rows for
        // the table GEMM) and the up-projected rows in f32.
        // An 8-bit latent is widened to f32 rows first, after them.
        const bool fp8 = d.cache_dtype == GQLA_DTYPE_FP8_E4M3;
        const int64_t expand_floats = expand_scratch_floats(d.latent_dim, d.nope_dim + dv) +
                                      round16((d.nope_dim + dv) * int64_t(kExpandTokens)) +
                                      (fp8 ? round16(d.latent_dim * int64_t(kExpandTokens)) : 0);
        thread_floats = std::max(thread_floats, expand_floats);
        L.slots = std::max(8, 2 * L.threads);
        L.slot_floats =
            static_cast<size_t>(round16((int64_t(kPieceTokens) * (d.nope_dim + dv + d.rope_dim) *
                                             static_cast<int64_t>(dtype_size(fp8 ? GQLA_DTYPE_BF16 : d.cache_dtype)) +
                                         3) /
                                        4));
    }
    g.thread_floats = static_cast<size_t>(thread_floats);
    g.partial_floats = static_cast<size_t>(round16(L.tile_rows * (dv + 2)));

    Bump bg;
    g.q_off = bg.take(static_cast<size_t>(g.rows_cap * dk));
    if (gqla) {
        g.state_off = bg.take(static_cast<size_t>(g.rows_cap * (dv + 2)));
        g.slots_off = bg.take(L.slot_floats * static_cast<size_t>(L.slots));
    }
    place_common(g, bg, L.threads);
    g.units_off = bg.take(floats_for<GqaUnit>(g.max_units));
    g.tiles_off = bg.take(floats_for<GqaTile>(g.max_tiles));
    g.total_floats = bg.at;
    size_t total = g.total_floats;

    // Absorb form.
    if (gqla) {
        PathWorkspace& a = L.absorb;
        const int64_t r = d.latent_dim, K = d.latent_dim + d.rope_dim;
        a.rows_cap = chunk_rows(d, q_tokens, kAbsorbChunkRows);
        const int64_t segs = std::max<int64_t>(1, std::min(mb, a.rows_cap / H));
        const int64_t rows_pad_max = round16(std::min(H * mq, a.rows_cap));
        L.absorb_row_block = static_cast<int32_t>(std::min<int64_t>(kAbsorbMaxRowBlock, rows_pad_max));
        const int64_t RB = L.absorb_row_block;
        a.max_units = static_cast<int32_t>(segs);
        a.max_tiles = static_cast<int32_t>((a.rows_cap + kAbsorbRowAlign * segs) / RB + 2 * segs + 1);
        a.max_partials = max_partials;
        a.max_items = a.max_tiles + a.max_partials;
        a.thread_floats = static_cast<size_t>(round16(kAbsorbTokenBlock * K) + round16(kAbsorbTokenBlock * RB + RB) +
                                              round16(r * RB) + round16(4 * RB) + absorb_pair_scratch_floats(K, r, RB) +
                                              (d.cache_dtype == GQLA_DTYPE_FP8_E4M3 ? absorb_fp8_stage_floats(r) : 0));
        a.partial_floats = static_cast<size_t>(round16(r * RB + 2 * RB));
        Bump ba;
        a.q_off = ba.take(static_cast<size_t>(a.rows_cap * d.nope_dim));  // packed qc, group-major
        a.q2_off = ba.take(static_cast<size_t>(a.rows_cap * r));          // q~, later o~
        a.qt_off = ba.take(static_cast<size_t>(K * (a.rows_cap + kAbsorbRowAlign * segs)));
        a.out_off = ba.take(static_cast<size_t>(a.rows_cap * dv));  // projected output
        place_common(a, ba, L.threads);
        a.units_off = ba.take(floats_for<AbsorbSegment>(a.max_units));
        a.tiles_off = ba.take(floats_for<AbsorbBlock>(a.max_tiles));
        a.total_floats = ba.at;
        total = std::max(total, a.total_floats);
    }
    L.total_bytes = total * sizeof(float);
    return L;
}

}  // namespace gqla::cpu

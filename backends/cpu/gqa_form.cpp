// SPDX-License-Identifier: Apache-2.0
// Chunks, tiles, queries and outputs of the GQA-form calls: see gqa_form.hpp.
#include "backends/cpu/gqa_form.hpp"

#include <algorithm>

#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

GqaChunker::GqaChunker(const CpuContext* ctx, const CallRows& rows, float* workspace)
    : rows_(rows),
      W_(ctx->ws_layout.gqa),
      batch_(rows.a->batch),
      groups_(ctx->desc.num_kv_heads),
      n_rep_(ctx->n_rep()),
      units_(reinterpret_cast<GqaUnit*>(workspace + ctx->ws_layout.gqa.units_off)),
      tiles_(reinterpret_cast<GqaTile*>(workspace + ctx->ws_layout.gqa.tiles_off)) {}

bool GqaChunker::next(GqaChunk& c) {
    c = GqaChunk{};
    c.units = units_;
    c.tiles = tiles_;
    while (b_ < batch_) {
        const int32_t n = rows_.q_len(b_);
        if (k0_ == 0) {
            const int64_t most = W_.rows_cap / n_rep_;  // >= 1: rows_cap >= H
            const int64_t parts = (n + most - 1) / most;
            part_queries_ = static_cast<int32_t>((n + parts - 1) / parts);
        }
        const int32_t take = std::min(part_queries_, n - k0_);
        const int64_t unit_rows = int64_t(take) * n_rep_;
        const bool wide = n > kNarrowQueries;
        const int32_t tiles = wide ? static_cast<int32_t>((unit_rows + kWideRows - 1) / kWideRows) : 1;
        if (c.rows + unit_rows > W_.rows_cap || c.num_units + 1 > W_.max_units || c.num_tiles + tiles > W_.max_tiles)
            break;  // an empty chunk holds any range (rows_cap, max_tiles >= its tiles)
        GqaUnit& u = units_[c.num_units];
        u = GqaUnit{b_, g_, k0_, k0_ + take, c.rows, c.num_tiles, tiles};
        const int64_t first_limit = rows_.limit(b_, k0_);
        for (int32_t t = 0; t < tiles; ++t) {
            const int32_t r0 = wide ? t * kWideRows : 0;
            const int32_t nr = wide ? static_cast<int32_t>(std::min<int64_t>(kWideRows, unit_rows - r0))
                                    : static_cast<int32_t>(unit_rows);
            tiles_[c.num_tiles + t] =
                GqaTile{c.num_units, r0, nr, wide ? 1 : 0, first_limit + (r0 + nr - 1) / n_rep_ + 1};
        }
        c.num_tiles += tiles;
        ++c.num_units;
        c.rows += unit_rows;
        k0_ += take;
        if (k0_ == n) {
            k0_ = 0;
            if (++g_ == groups_) {
                g_ = 0;
                ++b_;
            }
        }
    }
    return c.num_units > 0;
}

GqaThreadArea gqa_thread_area(const CpuContext* ctx, int tid) {
    const WorkspaceLayout& L = ctx->ws_layout;
    GqaThreadArea t;
    t.scratch = ctx->workspace.as<float>() + L.gqa.thread_off + L.gqa.thread_floats * static_cast<size_t>(tid);
    t.acc = t.scratch + L.attend_floats;
    t.m = t.acc + round16(L.tile_rows * ctx->desc.value_dim);
    t.l = t.m + L.tile_rows;
    t.limit = reinterpret_cast<int64_t*>(t.l + L.tile_rows);  // 2 * tile_rows floats past an aligned start
    return t;
}

void load_chunk_queries(CpuContext* ctx, const CallRows& rows, const GqaChunk& c, int dk, float* q32) {
    const int n_rep = ctx->n_rep();
    const float q_scale = ctx->query_scale();
    const gqla_dtype qt = rows.a->q.dtype;
    ctx->threads().parallel_for_spread(c.num_tiles, [&](int64_t first, int64_t end, int) {
        for (int64_t ti = first; ti < end; ++ti) {
            const GqaTile& t = c.tiles[ti];
            const GqaUnit& u = c.units[t.unit];
            for (int row = t.row0; row < t.row0 + t.rows; ++row) {
                const int64_t k = u.k0 + row / n_rep, h = int64_t(u.g) * n_rep + row % n_rep;
                load_row_f32(rows.q(u.b, k, h), qt, dk, q_scale, q32 + (u.row0 + row) * dk);
            }
        }
    });
}

void tile_limits(const CallRows& rows, int n_rep, const GqaUnit& u, const GqaTile& t, int64_t shift, int64_t* limit) {
    const int64_t first = rows.limit(u.b, u.k0) - shift;
    for (int i = 0; i < t.rows; ++i) limit[i] = first + (t.row0 + i) / n_rep;
}

void write_tile_output(const CallRows& rows, int n_rep, const GqaUnit& u, const GqaTile& t, int dv, const float* acc,
                       const float* m, const float* l, gqla_dtype io) {
    for (int i = 0; i < t.rows; ++i) {
        const int row = t.row0 + i;
        const int64_t k = u.k0 + row / n_rep, h = int64_t(u.g) * n_rep + row % n_rep;
        store_row_f32(acc + int64_t(i) * dv, 1.0f / l[i], rows.o(u.b, k, h), io, dv);
        if (rows.wants_lse()) *rows.lse(u.b, k, h) = (m[i] + __builtin_log2f(l[i])) * kLn2;
    }
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Attention of the GQA kind and of the GQLA GQA path over the cache: one
// work item per (unit tile, split piece). A narrow tile (a decode step)
// holds all n_rep x q_len rows of its (sequence, KV group) and streams the
// group's K/V pages once for them; wide tiles (prefill chunks) hold
// kWideRows rows each and read only the positions their last row may see,
// so a chunk of n queries costs about half the full rectangle.
#include <algorithm>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_plan.hpp"
#include "backends/cpu/gqa_form.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

// Where the key/value segments of group g live in the pools.
struct GroupCache {
    const char* k1;
    int64_t k1_page;
    int64_t k1_group;
    int d1;
    const char* k2;
    int64_t k2_page;
    int d2;
    const char* v;
    int64_t v_page;
    int64_t v_group;
    int dv;
    const Pool* k1_pool;
    const Pool* v_pool;  // 8-bit caches: where the scales are
};

GroupCache group_cache(const CpuContext* ctx, int32_t layer) {
    const gqla_backend_desc& d = ctx->desc;
    const int64_t P = d.page_size;
    GroupCache c{};
    if (d.kind == GQLA_KIND_GQA) {
        c.k1 = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], layer));
        c.k1_page = ctx->kept[0].page_elems;
        c.k1_group = P * d.head_dim;
        c.d1 = d.head_dim;
        c.k2 = nullptr;
        c.k2_page = 0;
        c.d2 = 0;
        c.v = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], layer));
        c.v_page = ctx->kept[1].page_elems;
        c.v_group = P * d.value_dim;
        c.dv = d.value_dim;
        c.k1_pool = &ctx->kept[0];
        c.v_pool = &ctx->kept[1];
    } else {
        c.k1 = static_cast<const char*>(ctx->pool_layer(ctx->expanded[0], layer));
        c.k1_page = ctx->expanded[0].page_elems;
        c.k1_group = P * d.nope_dim;
        c.d1 = d.nope_dim;
        c.k2 = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], layer));
        c.k2_page = ctx->kept[1].page_elems;
        c.d2 = d.rope_dim;
        c.v = static_cast<const char*>(ctx->pool_layer(ctx->expanded[1], layer));
        c.v_page = ctx->expanded[1].page_elems;
        c.v_group = P * d.value_dim;
        c.dv = d.value_dim;
        c.k1_pool = &ctx->expanded[0];
        c.v_pool = &ctx->expanded[1];
    }
    return c;
}

}  // namespace

gqla_status decode_gqa_form(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const WorkspaceLayout& L = ctx->ws_layout;
    const PathWorkspace& W = L.gqa;
    const int n_rep = ctx->n_rep();
    const GroupCache gc = group_cache(ctx, a->layer);
    const int dk = gc.d1 + gc.d2, dv = gc.dv;
    const size_t es = ctx->elem_size;
    float* ws = ctx->workspace.as<float>();
    float* q32 = ws + W.q_off;
    DecodePlan plan = plan_arrays(ws, W);
    const CallRows rows{a};
    GqaChunker chunker(ctx, rows, ws);
    ThreadPool& pool = ctx->threads();
    GqaChunk c;
    while (chunker.next(c)) {
        plan_decode(
            plan, c.num_tiles, [&](int32_t t) { return c.tiles[t].extent; }, [&](int32_t t) { return c.tiles[t].rows; },
            W, L.threads);
        // Each phase below is one pool call: the next starts once every item
        // of the previous one has run.
        load_chunk_queries(ctx, rows, c, dk, q32);

        pool.parallel_for(plan.num_items, 1, [&](int64_t first, int64_t end, int tid) {
            const GqaThreadArea area = gqa_thread_area(ctx, tid);
            for (int idx = static_cast<int>(first); idx < end; ++idx) {
                const WorkItem& w = plan.items[plan.order[idx]];
                const GqaTile& t = c.tiles[w.unit];
                const GqaUnit& u = c.units[t.unit];
                const gqla_decode_seq& seq = a->seqs[u.b];
                tile_limits(rows, n_rep, u, t, 0, area.limit);
                GqaItem it;
                it.rows = t.rows;
                it.q = q32 + (u.row0 + t.row0) * dk;
                it.q_ld = dk;
                it.q_scale = ctx->query_scale();
                it.row_limit = area.limit;
                it.page_table = seq.page_table;
                it.page_size = d.page_size;
                it.t0 = w.t0;
                it.t1 = w.t1;
                it.k1 = gc.k1 + u.g * gc.k1_group * es;
                it.k1_page_stride = gc.k1_page;
                it.d1 = gc.d1;
                it.k2 = gc.k2;
                it.k2_page_stride = gc.k2_page;
                it.d2 = gc.d2;
                it.v = gc.v + u.g * gc.v_group * es;
                it.v_page_stride = gc.v_page;
                it.dv = dv;
                if (ctx->fp8()) {  // per (token, group) scales; page strides in floats
                    it.k1_scale = gc.k1_pool->scales(gc.k1, 0, int64_t(u.g) * d.page_size);
                    it.k1_scale_page_stride = gc.k1_page / 4;
                    it.v_scale = gc.v_pool->scales(gc.v, 0, int64_t(u.g) * d.page_size);
                    it.v_scale_page_stride = gc.v_page / 4;
                }
                if (w.partial < 0) {
                    it.acc = area.acc;
                    it.m = area.m;
                    it.l = area.l;
                } else {
                    float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(w.partial);
                    it.acc = p;
                    it.m = p + int64_t(t.rows) * dv;
                    it.l = it.m + t.rows;
                }
                it.scratch = area.scratch;
                gqa_kernel(ctx, t)(it);
                if (w.partial < 0) write_tile_output(rows, n_rep, u, t, dv, area.acc, area.m, area.l, d.io_dtype);
            }
        });

        // Merge split tiles through their log-sum-exp.
        pool.parallel_for(c.num_tiles, 1, [&](int64_t first, int64_t end, int tid) {
            float* const acc = gqa_thread_area(ctx, tid).acc;
            for (int ti = static_cast<int>(first); ti < end; ++ti) {
                const UnitSplit& us = plan.units[ti];
                if (us.count < 2) continue;
                const GqaTile& t = c.tiles[ti];
                const GqaUnit& u = c.units[t.unit];
                const int nr = t.rows;
                auto part = [&](int k) {
                    return ws + W.partial_off + W.partial_floats * static_cast<size_t>(us.first_partial + k);
                };
                for (int i = 0; i < nr; ++i) {
                    float mx = -3.0e38f;
                    for (int k = 0; k < us.count; ++k) mx = std::max(mx, part(k)[int64_t(nr) * dv + i]);
                    std::fill(acc, acc + dv, 0.0f);
                    float l = 0.0f;
                    for (int k = 0; k < us.count; ++k) {
                        const float* p = part(k);
                        const float wgt = __builtin_exp2f(p[int64_t(nr) * dv + i] - mx);
                        l += p[int64_t(nr) * dv + nr + i] * wgt;
                        const float* pa = p + int64_t(i) * dv;
                        for (int e = 0; e < dv; ++e) acc[e] += pa[e] * wgt;
                    }
                    GqaTile row{t.unit, t.row0 + i, 1, t.wide, t.extent};
                    write_tile_output(rows, n_rep, u, row, dv, acc, &mx, &l, d.io_dtype);
                }
            }
        });
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

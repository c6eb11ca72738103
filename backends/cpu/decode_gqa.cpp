// SPDX-License-Identifier: Apache-2.0
// Decode of the GQA kind and of the GQLA GQA path: one work item per
// (sequence, KV group, split piece) streams that group's K/V pages once for
// all n_rep x s_q query rows of the group.
#include <algorithm>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_plan.hpp"
#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Where the key/value segments of group g live in the pools.
struct GroupCache {
    const char* k1; int64_t k1_page; int64_t k1_group; int d1;
    const char* k2; int64_t k2_page; int d2;
    const char* v;  int64_t v_page;  int64_t v_group; int dv;
};

GroupCache group_cache(const CpuContext* ctx, int32_t layer) {
    const gqla_backend_desc& d = ctx->desc;
    const int64_t P = d.page_size;
    GroupCache c{};
    if (d.kind == GQLA_KIND_GQA) {
        c.k1 = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], layer));
        c.k1_page = ctx->kept[0].page_elems; c.k1_group = P * d.head_dim; c.d1 = d.head_dim;
        c.k2 = nullptr; c.k2_page = 0; c.d2 = 0;
        c.v = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], layer));
        c.v_page = ctx->kept[1].page_elems; c.v_group = P * d.value_dim; c.dv = d.value_dim;
    } else {
        c.k1 = static_cast<const char*>(ctx->pool_layer(ctx->expanded[0], layer));
        c.k1_page = ctx->expanded[0].page_elems; c.k1_group = P * d.nope_dim; c.d1 = d.nope_dim;
        c.k2 = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], layer));
        c.k2_page = ctx->kept[1].page_elems; c.d2 = d.rope_dim;
        c.v = static_cast<const char*>(ctx->pool_layer(ctx->expanded[1], layer));
        c.v_page = ctx->expanded[1].page_elems; c.v_group = P * d.value_dim; c.dv = d.value_dim;
    }
    return c;
}

// Normalises `rows` accumulated rows of unit (b, g) into o (and lse).
void write_group_output(const gqla_decode_args* a, int n_rep, int64_t b, int64_t g, int rows, int dv,
                        const float* acc, const float* m, const float* l, gqla_dtype io) {
    for (int row = 0; row < rows; ++row) {
        const int64_t i = row / n_rep, h = g * n_rep + row % n_rep;
        store_row_f32(acc + static_cast<int64_t>(row) * dv, 1.0f / l[row], view_at_mut(a->o, b, i, h), io, dv);
        if (a->lse.data)
            *static_cast<float*>(view_at_mut(a->lse, b, i, h)) = (m[row] + __builtin_log2f(l[row])) * kLn2;
    }
}

}  // namespace

gqla_status decode_gqa_form(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const WorkspaceLayout& L = ctx->ws_layout;
    const PathWorkspace& W = L.gqa;
    const int H = d.num_heads, G = d.num_kv_heads, n_rep = H / G, s_q = a->q_len;
    const int rows = n_rep * s_q;
    const GroupCache gc = group_cache(ctx, a->layer);
    const int dk = gc.d1 + gc.d2, dv = gc.dv;
    const float q_scale = d.softmax_scale * kLog2e;
    const GqaAttendFn attend = ctx->kernels->gqa_attend[d.cache_dtype - 1];
    const size_t es = ctx->elem_size;
    float* ws = ctx->workspace.as<float>();
    float* q32 = ws + W.q_off;
    DecodePlan plan;
    plan.items = reinterpret_cast<WorkItem*>(ws + W.items_off);
    plan.units = reinterpret_cast<UnitSplit*>(ws + W.units_off);
    plan.order = reinterpret_cast<int32_t*>(ws + W.order_off);
    const int chunk_batch = static_cast<int>(std::max<int64_t>(1, L.rows_cap / (static_cast<int64_t>(H) * s_q)));

    for (int b0 = 0; b0 < a->batch; b0 += chunk_batch) {
        const int nb = std::min(chunk_batch, a->batch - b0);
        const int units = nb * G;
        plan_decode(plan, units, [&](int32_t u) { return a->seqs[b0 + u / G].length; }, L);
        ThreadPool& pool = ctx->threads();
        // The workspace area of the thread in pool slot `tid`.
        struct ThreadArea { float* t_scratch; float* t_acc; float* t_m; float* t_l; int64_t* t_limit; };
        auto thread_area = [&](int tid) {
            ThreadArea t;
            float* tws = ws + W.thread_off + W.thread_floats * static_cast<size_t>(tid);
            t.t_scratch = tws;
            t.t_acc = t.t_scratch + gqa_scratch_floats(rows, dk);
            t.t_m = t.t_acc + round16(static_cast<int64_t>(rows) * dv);
            t.t_l = t.t_m + rows;
            t.t_limit = reinterpret_cast<int64_t*>(t.t_l + rows);  // 2 * rows floats past an aligned start
            return t;
        };
        // Each phase below is one pool call: the next starts once every item
        // of the previous one has run.
        {

            // Queries of each unit as f32 rows (i, hh), pre-scaled.
            pool.parallel_for_spread(units, [&](int64_t first, int64_t end, int) {
            for (int u = static_cast<int>(first); u < end; ++u) {
                const int64_t b = b0 + u / G, g = u % G;
                for (int row = 0; row < rows; ++row) {
                    const int64_t i = row / n_rep, h = g * n_rep + row % n_rep;
                    load_row_f32(view_at(a->q, b, i, h), a->q.dtype, dk, q_scale,
                                 q32 + (static_cast<int64_t>(u) * rows + row) * dk);
                }
            }
            });

            pool.parallel_for(plan.num_items, 1, [&](int64_t first, int64_t end, int tid) {
            const auto [t_scratch, t_acc, t_m, t_l, t_limit] = thread_area(tid);
            for (int idx = static_cast<int>(first); idx < end; ++idx) {
                const WorkItem& w = plan.items[plan.order[idx]];
                const int64_t b = b0 + w.unit / G, g = w.unit % G;
                const gqla_decode_seq& seq = a->seqs[b];
                for (int row = 0; row < rows; ++row) t_limit[row] = seq.length - s_q + row / n_rep;
                GqaItem it;
                it.rows = rows;
                it.q = q32 + static_cast<int64_t>(w.unit) * rows * dk;
                it.q_ld = dk;
                it.row_limit = t_limit;
                it.page_table = seq.page_table;
                it.page_size = d.page_size;
                it.t0 = w.t0;
                it.t1 = w.t1;
                it.k1 = gc.k1 + g * gc.k1_group * es; it.k1_page_stride = gc.k1_page; it.d1 = gc.d1;
                it.k2 = gc.k2; it.k2_page_stride = gc.k2_page; it.d2 = gc.d2;
                it.v = gc.v + g * gc.v_group * es; it.v_page_stride = gc.v_page; it.dv = dv;
                if (w.partial < 0) {
                    it.acc = t_acc; it.m = t_m; it.l = t_l;
                } else {
                    float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(w.partial);
                    it.acc = p; it.m = p + static_cast<int64_t>(rows) * dv; it.l = it.m + rows;
                }
                it.scratch = t_scratch;
                attend(it);
                if (w.partial < 0) write_group_output(a, n_rep, b, g, rows, dv, t_acc, t_m, t_l, d.io_dtype);
            }
            });

            // Merge split units through their log-sum-exp.
            pool.parallel_for(units, 1, [&](int64_t first, int64_t end, int tid) {
            float* const t_acc = thread_area(tid).t_acc;
            for (int u = static_cast<int>(first); u < end; ++u) {
                const UnitSplit& us = plan.units[u];
                if (us.count < 2) continue;
                const int64_t b = b0 + u / G, g = u % G;
                for (int row = 0; row < rows; ++row) {
                    float mx = -3.0e38f;
                    for (int k = 0; k < us.count; ++k) {
                        const float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(us.first_partial + k);
                        mx = std::max(mx, p[static_cast<int64_t>(rows) * dv + row]);
                    }
                    float* acc = t_acc;
                    std::fill(acc, acc + dv, 0.0f);
                    float l = 0.0f;
                    for (int k = 0; k < us.count; ++k) {
                        const float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(us.first_partial + k);
                        const float pm = p[static_cast<int64_t>(rows) * dv + row];
                        const float pl = p[static_cast<int64_t>(rows) * dv + rows + row];
                        const float wgt = __builtin_exp2f(pm - mx);
                        l += pl * wgt;
                        const float* pa = p + static_cast<int64_t>(row) * dv;
                        for (int e = 0; e < dv; ++e) acc[e] += pa[e] * wgt;
                    }
                    const int64_t i = row / n_rep, h = g * n_rep + row % n_rep;
                    store_row_f32(acc, 1.0f / l, view_at_mut(a->o, b, i, h), d.io_dtype, dv);
                    if (a->lse.data)
                        *static_cast<float*>(view_at_mut(a->lse, b, i, h)) = (mx + __builtin_log2f(l)) * kLn2;
                }
            }
            });
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Decode of the GQLA absorb path:
//   q~ = qc * W_UK[g]       (GEMM per group over all rows of the chunk)
//   MQA over the latent     (work items: sequence x row block x split piece)
//   o  = o~ * W_UV[g]^T     (GEMM per group)
// The query rows of a sequence (i, h) sit in SIMD lanes of a transposed
// query block QT[k][row], k over [q~ | qr].
#include <algorithm>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_plan.hpp"
#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Columns of one GEMM task (a multiple of every vector width); wider when
// there are only a few rows per group, so each task streams long runs of its
// weight rows (see gemm_rows).
constexpr int kGemmCols = 64;
constexpr int kGemvCols = 256;

}  // namespace

gqla_status decode_absorb(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const LayerWeights& lw = ctx->weights[static_cast<size_t>(a->layer)];
    if (!lw.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: weights of layer %d are not set", a->layer);
    const WorkspaceLayout& L = ctx->ws_layout;
    const PathWorkspace& W = L.absorb;
    const int H = d.num_heads, G = d.num_kv_heads, n_rep = H / G, s_q = a->q_len;
    const int r = d.latent_dim, dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim, K = r + dr;
    const int64_t NW = ctx->expanded_width();
    const int R = H * s_q;
    const int Rpad = (R + kAbsorbRowAlign - 1) / kAbsorbRowAlign * kAbsorbRowAlign;
    const int RB = std::min(L.absorb_row_block, Rpad);
    const int blocks = (Rpad + RB - 1) / RB;
    const float q_scale = d.softmax_scale * kLog2e;
    const AbsorbAttendFn attend = ctx->kernels->absorb_attend[d.cache_dtype - 1];
    const float* w = lw.w.as<float>();
    const float* wt = lw.wt.as<float>();
    const uint16_t* w16 = lw.w16.as<uint16_t>();
    const uint16_t* wuv16 = lw.wuv16.as<uint16_t>();
    const GemmFn gemm = ctx->kernels->gemm;
    const GemmBf16Fn gemm_bf16 = ctx->kernels->gemm_bf16;
    const char* cpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    const char* krpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], a->layer));

    float* ws = ctx->workspace.as<float>();
    float* qc = ws + W.q_off;   // [G][M][dc]
    float* qt = ws + W.q2_off;  // [G][M][r]: q~, then o~
    float* QT = ws + W.qt_off;  // [seq][K][Rpad]
    float* out = ws + W.out_off; // [G][M][dv]
    DecodePlan plan;
    plan.items = reinterpret_cast<WorkItem*>(ws + W.items_off);
    plan.units = reinterpret_cast<UnitSplit*>(ws + W.units_off);
    plan.order = reinterpret_cast<int32_t*>(ws + W.order_off);
    const int chunk_batch = static_cast<int>(std::max<int64_t>(1, L.rows_cap / static_cast<int64_t>(R)));

    for (int b0 = 0; b0 < a->batch; b0 += chunk_batch) {
        const int nb = std::min(chunk_batch, a->batch - b0);
        const int64_t M = static_cast<int64_t>(nb) * s_q * n_rep;  // rows per group
        const int units = nb * blocks;
        plan_decode(plan, units, [&](int32_t u) { return a->seqs[b0 + u / blocks].length; }, L);
        const int cols = M <= 3 ? kGemvCols : kGemmCols;
        const int col_tasks_q = (r + cols - 1) / cols;
        const int col_tasks_o = (dv + cols - 1) / cols;
        ThreadPool& pool = ctx->threads();
        // The workspace area of the thread in pool slot `tid`.
        struct ThreadArea {
            float* t_ctile; float* t_stile; float* t_acc; float* t_m; float* t_l; int64_t* t_limit; uint32_t* t_pairs;
        };
        auto thread_area = [&](int tid) {
            ThreadArea t;
            float* tws = ws + W.thread_off + W.thread_floats * static_cast<size_t>(tid);
            t.t_ctile = tws;
            t.t_stile = t.t_ctile + round16(kAbsorbTokenBlock * K);
            t.t_acc = t.t_stile + round16(kAbsorbTokenBlock * RB + RB);
            t.t_m = t.t_acc + round16(static_cast<int64_t>(r) * RB);
            t.t_l = t.t_m + RB;
            t.t_limit = reinterpret_cast<int64_t*>(t.t_l + RB);
            t.t_pairs = reinterpret_cast<uint32_t*>(t.t_m + round16(4 * RB));
            return t;
        };
        // Each numbered phase is one pool call: the next starts once every
        // item of the previous one has run.
        {

            // 1. Nope parts of the queries, group-major rows m = (b, i, hh).
            pool.parallel_for_spread(static_cast<int64_t>(nb) * s_q, [&](int64_t first, int64_t end, int) {
            for (int64_t bi = first; bi < end; ++bi) {
                const int64_t b = b0 + bi / s_q, i = bi % s_q;
                for (int h = 0; h < H; ++h) {
                    const int64_t g = h / n_rep, m = bi * n_rep + h % n_rep;
                    load_row_f32(view_at(a->q, b, i, h), a->q.dtype, dc, q_scale, qc + (g * M + m) * dc);
                }
            }
            });
            // 2. q~[g] = qc[g] * W_UK[g].
            pool.parallel_for_spread(G * col_tasks_q, [&](int64_t first, int64_t end, int) {
            for (int task = static_cast<int>(first); task < end; ++task) {
                const int64_t g = task / col_tasks_q;
                const int n0 = task % col_tasks_q * cols;
                const int64_t off = g * (dc + dv) * static_cast<int64_t>(r) + n0;  // W_UK[g], columns n0..
                if (lw.bf16()) gemm_bf16(static_cast<int>(M), std::min(cols, r - n0), dc, qc + g * M * dc, dc,
                                         w16 + off, r, qt + g * M * r + n0, r);
                else gemm(static_cast<int>(M), std::min(cols, r - n0), dc, qc + g * M * dc, dc, w + off, r,
                          qt + g * M * r + n0, r);
            }
            });
            // 3. Transposed query blocks [q~ | qr] per sequence; padding rows are 0.
            pool.parallel_for_spread(static_cast<int64_t>(nb) * s_q, [&](int64_t first, int64_t end, int) {
            for (int64_t bi = first; bi < end; ++bi) {
                const int64_t bl = bi / s_q, i = bi % s_q;
                float* qtb = QT + bl * K * Rpad;
                for (int h = 0; h < H; ++h) {
                    const int64_t g = h / n_rep, m = bi * n_rep + h % n_rep, row = i * H + h;
                    const float* src = qt + (g * M + m) * r;
                    for (int k = 0; k < r; ++k) qtb[k * Rpad + row] = src[k];
                    const void* qr = static_cast<const char*>(view_at(a->q, b0 + bl, i, h)) + dc * dtype_size(a->q.dtype);
                    for (int k = 0; k < dr; ++k) qtb[(r + k) * Rpad + row] = load_as_f32(qr, a->q.dtype, k) * q_scale;
                }
                if (i == s_q - 1)
                    for (int k = 0; k < K; ++k) std::fill(qtb + k * Rpad + R, qtb + (k + 1) * Rpad, 0.0f);
            }
            });
            // 4. Attention over the latent.
            pool.parallel_for(plan.num_items, 1, [&](int64_t first, int64_t end, int tid) {
            const auto [t_ctile, t_stile, t_acc, t_m, t_l, t_limit, t_pairs] = thread_area(tid);
            for (int idx = static_cast<int>(first); idx < end; ++idx) {
                const WorkItem& wi = plan.items[plan.order[idx]];
                const int64_t bl = wi.unit / blocks, blk = wi.unit % blocks;
                const gqla_decode_seq& seq = a->seqs[b0 + bl];
                const int col0 = static_cast<int>(blk) * RB;
                const int width = std::min(RB, Rpad - col0);
                for (int lane = 0; lane < width; ++lane) {
                    const int row = col0 + lane;
                    t_limit[lane] = row < R ? seq.length - s_q + row / H : seq.length - 1;
                }
                AbsorbItem it;
                it.rows_pad = width;
                it.qt = QT + bl * K * Rpad + col0;
                it.qt_ld = Rpad;
                it.row_limit = t_limit;
                it.page_table = seq.page_table;
                it.page_size = d.page_size;
                it.t0 = wi.t0;
                it.t1 = wi.t1;
                it.c = cpool; it.c_page_stride = ctx->kept[0].page_elems; it.r = r;
                it.kr = krpool; it.kr_page_stride = ctx->kept[1].page_elems; it.d_r = dr;
                if (wi.partial < 0) {
                    it.acc = t_acc; it.m = t_m; it.l = t_l;
                } else {
                    float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(wi.partial);
                    it.acc = p; it.m = p + static_cast<int64_t>(r) * RB; it.l = it.m + RB;
                }
                it.ctile = t_ctile;
                it.stile = t_stile;
                it.pairs = t_pairs;
                attend(it);
                if (wi.partial >= 0) continue;
                for (int lane = 0; lane < width; ++lane) {
                    const int row = col0 + lane;
                    if (row >= R) break;
                    const int64_t i = row / H, h = row % H, g = h / n_rep;
                    const int64_t m = (bl * s_q + i) * n_rep + h % n_rep;
                    float* dst = qt + (g * M + m) * r;
                    const float inv = 1.0f / t_l[lane];
                    for (int k = 0; k < r; ++k) dst[k] = t_acc[static_cast<int64_t>(k) * width + lane] * inv;
                    if (a->lse.data)
                        *static_cast<float*>(view_at_mut(a->lse, b0 + bl, i, h)) =
                            (t_m[lane] + __builtin_log2f(t_l[lane])) * kLn2;
                }
            }
            });
            // 5. Merge split units into o~.
            pool.parallel_for(units, 1, [&](int64_t first, int64_t end, int) {
            for (int u = static_cast<int>(first); u < end; ++u) {
                const UnitSplit& us = plan.units[u];
                if (us.count < 2) continue;
                const int64_t bl = u / blocks, col0 = u % blocks * RB;
                const int width = std::min<int>(RB, Rpad - static_cast<int>(col0));
                auto part = [&](int k) { return ws + W.partial_off + W.partial_floats * static_cast<size_t>(us.first_partial + k); };
                for (int lane = 0; lane < width; ++lane) {
                    const int64_t row = col0 + lane;
                    if (row >= R) break;
                    float mx = -3.0e38f;
                    for (int k = 0; k < us.count; ++k) mx = std::max(mx, part(k)[static_cast<int64_t>(r) * RB + lane]);
                    float l = 0.0f;
                    const int64_t i = row / H, h = row % H, g = h / n_rep;
                    const int64_t m = (bl * s_q + i) * n_rep + h % n_rep;
                    float* dst = qt + (g * M + m) * r;
                    std::fill(dst, dst + r, 0.0f);
                    for (int k = 0; k < us.count; ++k) {
                        const float* p = part(k);
                        const float wgt = __builtin_exp2f(p[static_cast<int64_t>(r) * RB + lane] - mx);
                        l += p[static_cast<int64_t>(r) * RB + RB + lane] * wgt;
                        for (int e = 0; e < r; ++e) dst[e] += p[static_cast<int64_t>(e) * width + lane] * wgt;
                    }
                    const float inv = 1.0f / l;
                    for (int e = 0; e < r; ++e) dst[e] *= inv;
                    if (a->lse.data)
                        *static_cast<float*>(view_at_mut(a->lse, b0 + bl, i, h)) = (mx + __builtin_log2f(l)) * kLn2;
                }
            }
            });
            // 6. o[g] = o~[g] * W_UV[g]^T.
            pool.parallel_for_spread(G * col_tasks_o, [&](int64_t first, int64_t end, int) {
            for (int task = static_cast<int>(first); task < end; ++task) {
                const int64_t g = task / col_tasks_o;
                const int n0 = task % col_tasks_o * cols;
                // W_UV[g]^T, columns n0..: a contiguous [r][dv] block in bf16,
                // G*(d_c+d_v) apart inside W^T in f32.
                if (lw.bf16()) gemm_bf16(static_cast<int>(M), std::min(cols, dv - n0), r, qt + g * M * r, r,
                                         wuv16 + g * r * static_cast<int64_t>(dv) + n0, dv, out + g * M * dv + n0, dv);
                else gemm(static_cast<int>(M), std::min(cols, dv - n0), r, qt + g * M * r, r,
                          wt + g * (dc + dv) + dc + n0, NW, out + g * M * dv + n0, dv);
            }
            });
            // 7. Output rows in the io dtype.
            pool.parallel_for_spread(static_cast<int64_t>(nb) * s_q, [&](int64_t first, int64_t end, int) {
            for (int64_t bi = first; bi < end; ++bi) {
                const int64_t b = b0 + bi / s_q, i = bi % s_q;
                for (int h = 0; h < H; ++h) {
                    const int64_t g = h / n_rep, m = bi * n_rep + h % n_rep;
                    store_row_f32(out + (g * M + m) * dv, 1.0f, view_at_mut(a->o, b, i, h), d.io_dtype, dv);
                }
            }
            });
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Attention of the GQLA absorb path:
//   q~ = qc * W_UK[g]       (GEMM per group over all rows of the chunk)
//   MQA over the latent     (work items: segment x row block x split piece)
//   o  = o~ * W_UV[g]^T     (GEMM per group)
// A chunk holds segments, the queries [k0, k1) of one sequence; a sequence
// with more queries than a chunk holds is cut into several. The query rows
// of a segment (k, h) sit in SIMD lanes of a transposed query block
// QT[k][row], k over [q~ | qr]; each row block reads only the positions its
// last row may see.
#include <algorithm>

#include "backends/cpu/softmax_constants.hpp"
#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/call_rows.hpp"
#include "backends/cpu/decode_plan.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

// Columns of one GEMM task (a multiple of every vector width); wider when
// there are only a few rows per group, so each task streams long runs of its
// weight rows (see gemm_rows).
constexpr int kGemmCols = 64;
constexpr int kGemvCols = 256;

struct AbsorbChunk {
    AbsorbSegment* segs = nullptr;
    AbsorbBlock* blocks = nullptr;
    int32_t num_segs = 0;
    int32_t num_blocks = 0;
    int64_t queries = 0;  // query tokens of the chunk
};

// Walks a call chunk by chunk: whole sequences while they fit, a sequence
// with more rows than a chunk holds cut into the fewest equal query ranges
// that fit.
class AbsorbChunker {
public:
    AbsorbChunker(const CpuContext* ctx, const CallRows& rows, float* ws)
        : rows_(rows),
          W_(ctx->ws_layout.absorb),
          H_(ctx->desc.num_heads),
          K_(ctx->desc.latent_dim + ctx->desc.rope_dim),
          RB_(ctx->ws_layout.absorb_row_block),
          segs_(reinterpret_cast<AbsorbSegment*>(ws + W_.units_off)),
          blocks_(reinterpret_cast<AbsorbBlock*>(ws + W_.tiles_off)) {}

    bool next(AbsorbChunk& c) {
        c = AbsorbChunk{};
        c.segs = segs_;
        c.blocks = blocks_;
        int64_t qt_floats = 0;
        while (b_ < rows_.a->batch) {
            const int32_t n = rows_.q_len(b_);
            if (k0_ == 0) {
                const int64_t most = W_.rows_cap / H_;  // >= 1
                const int64_t parts = (n + most - 1) / most;
                part_queries_ = static_cast<int32_t>((n + parts - 1) / parts);
            }
            const int32_t take = std::min(part_queries_, n - k0_);
            const int32_t R = take * H_;
            const int32_t Rpad = (R + kAbsorbRowAlign - 1) / kAbsorbRowAlign * kAbsorbRowAlign;
            const int32_t RB = std::min(RB_, Rpad);
            const int32_t blocks = (Rpad + RB - 1) / RB;
            if ((c.queries + take) * H_ > W_.rows_cap || c.num_segs + 1 > W_.max_units ||
                c.num_blocks + blocks > W_.max_tiles)
                break;  // an empty chunk holds any range
            AbsorbSegment& s = segs_[c.num_segs];
            s = AbsorbSegment{b_, k0_, k0_ + take, Rpad, c.queries, qt_floats, c.num_blocks, blocks};
            const int64_t first_limit = rows_.limit(b_, k0_);
            for (int32_t k = 0; k < blocks; ++k) {
                const int32_t col0 = k * RB, width = std::min(RB, Rpad - col0);
                const int32_t last_row = std::min(col0 + width, R) - 1;
                blocks_[c.num_blocks + k] = AbsorbBlock{c.num_segs, col0, width, first_limit + last_row / H_ + 1};
            }
            c.num_blocks += blocks;
            ++c.num_segs;
            c.queries += take;
            qt_floats += int64_t(K_) * Rpad;
            k0_ += take;
            if (k0_ == n) {
                k0_ = 0;
                ++b_;
            }
        }
        return c.num_segs > 0;
    }

private:
    const CallRows& rows_;
    const PathWorkspace& W_;
    int32_t H_, K_, RB_;
    AbsorbSegment* segs_;
    AbsorbBlock* blocks_;
    int32_t b_ = 0, k0_ = 0;
    int32_t part_queries_ = 0;
};

// The segment holding chunk query qi.
inline const AbsorbSegment& segment_of(const AbsorbChunk& c, int64_t qi) {
    const AbsorbSegment* s =
        std::upper_bound(c.segs, c.segs + c.num_segs, qi, [](int64_t q, const AbsorbSegment& x) { return q < x.q0; });
    return s[-1];
}

}  // namespace

gqla_status decode_absorb(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const LayerWeights& lw = ctx->weights[static_cast<size_t>(a->layer)];
    if (!lw.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: weights of layer %d are not set", a->layer);
    const WorkspaceLayout& L = ctx->ws_layout;
    const PathWorkspace& W = L.absorb;
    const int H = d.num_heads, G = d.num_kv_heads, n_rep = H / G;
    const int r = d.latent_dim, dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim, K = r + dr;
    const int64_t NW = ctx->expanded_width();
    const int RBmax = L.absorb_row_block;
    const float q_scale = ctx->query_scale();
    const AbsorbAttendFn attend = ctx->kernels->absorb_attend[d.cache_dtype - 1];
    const float* w = lw.w.as<float>();
    const float* wt = lw.wt.as<float>();
    const uint16_t* w16 = lw.w16.as<uint16_t>();
    const uint16_t* wuv16 = lw.wuv16.as<uint16_t>();
    const GemmFn gemm = ctx->kernels->gemm;
    const GemmBf16Fn gemm_bf16 = ctx->kernels->gemm_bf16;
    const char* cpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
    const char* krpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], a->layer));
    const gqla_dtype q_dtype = a->q.dtype;

    float* ws = ctx->workspace.as<float>();
    float* qc = ws + W.q_off;     // [G][M][dc]
    float* qt = ws + W.q2_off;    // [G][M][r]: q~, then o~
    float* QT = ws + W.qt_off;    // per segment [K][rows_pad]
    float* out = ws + W.out_off;  // [G][M][dv]
    DecodePlan plan = plan_arrays(ws, W);
    const CallRows rows{a};
    AbsorbChunker chunker(ctx, rows, ws);
    ThreadPool& pool = ctx->threads();
    AbsorbChunk c;
    while (chunker.next(c)) {
        const int64_t Q = c.queries;
        const int64_t M = Q * n_rep;  // rows per group
        plan_decode(
            plan, c.num_blocks, [&](int32_t u) { return c.blocks[u].extent; },
            [&](int32_t u) { return c.blocks[u].width; }, W, L.threads);
        const int cols = M <= 3 ? kGemvCols : kGemmCols;
        const int col_tasks_q = (r + cols - 1) / cols;
        const int col_tasks_o = (dv + cols - 1) / cols;
        // The workspace area of the thread in pool slot `tid`.
        struct ThreadArea {
            float* t_ctile;
            float* t_stile;
            float* t_acc;
            float* t_m;
            float* t_l;
            int64_t* t_limit;
            uint32_t* t_pairs;
        };
        auto thread_area = [&](int tid) {
            ThreadArea t;
            float* tws = ws + W.thread_off + W.thread_floats * static_cast<size_t>(tid);
            t.t_ctile = tws;
            t.t_stile = t.t_ctile + round16(kAbsorbTokenBlock * K);
            t.t_acc = t.t_stile + round16(kAbsorbTokenBlock * RBmax + RBmax);
            t.t_m = t.t_acc + round16(static_cast<int64_t>(r) * RBmax);
            t.t_l = t.t_m + RBmax;
            t.t_limit = reinterpret_cast<int64_t*>(t.t_l + RBmax);
            t.t_pairs = reinterpret_cast<uint32_t*>(t.t_m + round16(4 * RBmax));
            return t;
        };
        // Each numbered phase is one pool call: the next starts once every
        // item of the previous one has run.
        {
            // 1. Nope parts of the queries, group-major rows m = (chunk query, hh).
            pool.parallel_for_spread(Q, [&](int64_t first, int64_t end, int) {
                for (int64_t qi = first; qi < end; ++qi) {
                    const AbsorbSegment& s = segment_of(c, qi);
                    const int64_t k = s.k0 + (qi - s.q0);
                    for (int h = 0; h < H; ++h) {
                        const int64_t g = h / n_rep, m = qi * n_rep + h % n_rep;
                        load_row_f32(rows.q(s.b, k, h), q_dtype, dc, q_scale, qc + (g * M + m) * dc);
                    }
                }
            });
            // 2. q~[g] = qc[g] * W_UK[g].
            pool.parallel_for_spread(G * col_tasks_q, [&](int64_t first, int64_t end, int) {
                for (int task = static_cast<int>(first); task < end; ++task) {
                    const int64_t g = task / col_tasks_q;
                    const int n0 = task % col_tasks_q * cols;
                    const int64_t off = g * (dc + dv) * static_cast<int64_t>(r) + n0;  // W_UK[g], columns n0..
                    if (lw.bf16())
                        gemm_bf16(static_cast<int>(M), std::min(cols, r - n0), dc, qc + g * M * dc, dc, w16 + off, r,
                                  qt + g * M * r + n0, r);
                    else
                        gemm(static_cast<int>(M), std::min(cols, r - n0), dc, qc + g * M * dc, dc, w + off, r,
                             qt + g * M * r + n0, r);
                }
            });
            // 3. Transposed query blocks [q~ | qr] per segment; padding rows are 0.
            pool.parallel_for_spread(Q, [&](int64_t first, int64_t end, int) {
                for (int64_t qi = first; qi < end; ++qi) {
                    const AbsorbSegment& s = segment_of(c, qi);
                    const int64_t i = qi - s.q0, k = s.k0 + i;
                    const int Rpad = s.rows_pad;
                    float* qtb = QT + s.qt_off;
                    for (int h = 0; h < H; ++h) {
                        const int64_t g = h / n_rep, m = qi * n_rep + h % n_rep, row = i * H + h;
                        const float* src = qt + (g * M + m) * r;
                        for (int e = 0; e < r; ++e) qtb[e * Rpad + row] = src[e];
                        const void* qr = static_cast<const char*>(rows.q(s.b, k, h)) + dc * dtype_size(q_dtype);
                        for (int e = 0; e < dr; ++e) qtb[(r + e) * Rpad + row] = load_as_f32(qr, q_dtype, e) * q_scale;
                    }
                    if (k == s.k1 - 1) {
                        const int R = (s.k1 - s.k0) * H;
                        for (int e = 0; e < K; ++e) std::fill(qtb + e * Rpad + R, qtb + (e + 1) * Rpad, 0.0f);
                    }
                }
            });
            // 4. Attention over the latent.
            pool.parallel_for(plan.num_items, 1, [&](int64_t first, int64_t end, int tid) {
                const auto [t_ctile, t_stile, t_acc, t_m, t_l, t_limit, t_pairs] = thread_area(tid);
                for (int idx = static_cast<int>(first); idx < end; ++idx) {
                    const WorkItem& wi = plan.items[plan.order[idx]];
                    const AbsorbBlock& blk = c.blocks[wi.unit];
                    const AbsorbSegment& s = c.segs[blk.seg];
                    const gqla_decode_seq& seq = a->seqs[s.b];
                    const int R = (s.k1 - s.k0) * H;
                    const int64_t first_limit = rows.limit(s.b, s.k0);
                    const int width = blk.width;
                    for (int lane = 0; lane < width; ++lane) {
                        const int row = blk.col0 + lane;
                        t_limit[lane] = row < R ? first_limit + row / H : blk.extent - 1;
                    }
                    AbsorbItem it;
                    it.rows_pad = width;
                    it.qt = QT + s.qt_off + blk.col0;
                    it.qt_ld = s.rows_pad;
                    it.row_limit = t_limit;
                    it.page_table = seq.page_table;
                    it.page_size = d.page_size;
                    it.t0 = wi.t0;
                    it.t1 = wi.t1;
                    it.c = cpool;
                    it.c_page_stride = ctx->kept[0].page_elems;
                    it.r = r;
                    it.kr = krpool;
                    it.kr_page_stride = ctx->kept[1].page_elems;
                    it.d_r = dr;
                    if (ctx->fp8()) {  // per (token, latent block) scales; page stride in floats
                        it.c_scale = ctx->kept[0].scales(cpool, 0, 0);
                        it.c_scale_page_stride = ctx->kept[0].page_elems / 4;
                        it.c_scale_blocks = ctx->kept[0].scale_cols;
                    }
                    if (wi.partial < 0) {
                        it.acc = t_acc;
                        it.m = t_m;
                        it.l = t_l;
                    } else {
                        float* p = ws + W.partial_off + W.partial_floats * static_cast<size_t>(wi.partial);
                        it.acc = p;
                        it.m = p + static_cast<int64_t>(r) * RBmax;
                        it.l = it.m + RBmax;
                    }
                    it.ctile = t_ctile;
                    it.stile = t_stile;
                    it.pairs = t_pairs;
                    if (ctx->fp8())
                        it.stage = reinterpret_cast<uint16_t*>(t_pairs + absorb_pair_scratch_floats(K, r, RBmax));
                    attend(it);
                    if (wi.partial >= 0) continue;
                    for (int lane = 0; lane < width; ++lane) {
                        const int row = blk.col0 + lane;
                        if (row >= R) break;
                        const int64_t i = row / H, h = row % H, g = h / n_rep;
                        const int64_t m = (s.q0 + i) * n_rep + h % n_rep;
                        float* dst = qt + (g * M + m) * r;
                        const float inv = 1.0f / t_l[lane];
                        for (int e = 0; e < r; ++e) dst[e] = t_acc[static_cast<int64_t>(e) * width + lane] * inv;
                        if (rows.wants_lse())
                            *rows.lse(s.b, s.k0 + i, h) = (t_m[lane] + __builtin_log2f(t_l[lane])) * kLn2;
                    }
                }
            });
            // 5. Merge split units into o~.
            pool.parallel_for(c.num_blocks, 1, [&](int64_t first, int64_t end, int) {
                for (int u = static_cast<int>(first); u < end; ++u) {
                    const UnitSplit& us = plan.units[u];
                    if (us.count < 2) continue;
                    const AbsorbBlock& blk = c.blocks[u];
                    const AbsorbSegment& s = c.segs[blk.seg];
                    const int R = (s.k1 - s.k0) * H;
                    const int width = blk.width;
                    auto part = [&](int k) {
                        return ws + W.partial_off + W.partial_floats * static_cast<size_t>(us.first_partial + k);
                    };
                    for (int lane = 0; lane < width; ++lane) {
                        const int64_t row = blk.col0 + lane;
                        if (row >= R) break;
                        float mx = -3.0e38f;
                        for (int k = 0; k < us.count; ++k)
                            mx = std::max(mx, part(k)[static_cast<int64_t>(r) * RBmax + lane]);
                        float l = 0.0f;
                        const int64_t i = row / H, h = row % H, g = h / n_rep;
                        const int64_t m = (s.q0 + i) * n_rep + h % n_rep;
                        float* dst = qt + (g * M + m) * r;
                        std::fill(dst, dst + r, 0.0f);
                        for (int k = 0; k < us.count; ++k) {
                            const float* p = part(k);
                            const float wgt = __builtin_exp2f(p[static_cast<int64_t>(r) * RBmax + lane] - mx);
                            l += p[static_cast<int64_t>(r) * RBmax + RBmax + lane] * wgt;
                            for (int e = 0; e < r; ++e) dst[e] += p[static_cast<int64_t>(e) * width + lane] * wgt;
                        }
                        const float inv = 1.0f / l;
                        for (int e = 0; e < r; ++e) dst[e] *= inv;
                        if (rows.wants_lse()) *rows.lse(s.b, s.k0 + i, h) = (mx + __builtin_log2f(l)) * kLn2;
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
                    if (lw.bf16())
                        gemm_bf16(static_cast<int>(M), std::min(cols, dv - n0), r, qt + g * M * r, r,
                                  wuv16 + g * r * static_cast<int64_t>(dv) + n0, dv, out + g * M * dv + n0, dv);
                    else
                        gemm(static_cast<int>(M), std::min(cols, dv - n0), r, qt + g * M * r, r,
                             wt + g * (dc + dv) + dc + n0, NW, out + g * M * dv + n0, dv);
                }
            });
            // 7. Output rows in the io dtype.
            pool.parallel_for_spread(Q, [&](int64_t first, int64_t end, int) {
                for (int64_t qi = first; qi < end; ++qi) {
                    const AbsorbSegment& s = segment_of(c, qi);
                    const int64_t k = s.k0 + (qi - s.q0);
                    for (int h = 0; h < H; ++h) {
                        const int64_t g = h / n_rep, m = qi * n_rep + h % n_rep;
                        store_row_f32(out + (g * M + m) * dv, 1.0f, rows.o(s.b, k, h), d.io_dtype, dv);
                    }
                }
            });
        }
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

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
#include "backends/cpu/latent_dims.hpp"
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

// One absorb call: the call's dimensions, weights, cache pools and
// workspace arrays, and the phases each chunk runs through.
class AbsorbDecode : LatentDims {
public:
    AbsorbDecode(CpuContext* ctx, const gqla_decode_args* a)
        : LatentDims(ctx->desc),
          ctx_(ctx),
          a_(a),
          d_(ctx->desc),
          lw_(ctx->weights[static_cast<size_t>(a->layer)]),
          W_(ctx->ws_layout.absorb),
          rows_{a} {
        NW_ = ctx->expanded_width();
        RBmax_ = ctx->ws_layout.absorb_row_block;
        q_scale_ = ctx->query_scale();
        q_dtype_ = a->q.dtype;
        attend_ = ctx->kernels->absorb_attend[d_.cache_dtype - 1];
        gemm_ = ctx->kernels->gemm;
        gemm_bf16_ = ctx->kernels->gemm_bf16;
        w_ = lw_.w.as<float>();
        wt_ = lw_.wt.as<float>();
        w16_ = lw_.w16.as<uint16_t>();
        wuv16_ = lw_.wuv16.as<uint16_t>();
        cpool_ = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
        krpool_ = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], a->layer));
        ws_ = ctx->workspace.as<float>();
        qc_ = ws_ + W_.q_off;
        qt_ = ws_ + W_.q2_off;
        QT_ = ws_ + W_.qt_off;
        out_ = ws_ + W_.out_off;
    }

    void run();

private:
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
    ThreadArea thread_area(int tid) const;
    // Partial-result slot `slot` of split items: [r][RBmax] accumulators, m, l.
    float* partial_slot(int slot) const { return ws_ + W_.partial_off + W_.partial_floats * static_cast<size_t>(slot); }
    // Workspace row of head h of chunk query qi in the group-major arrays.
    int64_t group_row(int64_t qi, int h) const { return (h / n_rep_) * M_ + qi * n_rep_ + h % n_rep_; }

    void load_query_nope(const AbsorbChunk& c, int64_t first, int64_t end) const;
    void project_queries(int64_t first, int64_t end) const;
    void transpose_queries(const AbsorbChunk& c, int64_t first, int64_t end) const;
    void attend_latent(const AbsorbChunk& c, const DecodePlan& plan, int64_t first, int64_t end, int tid) const;
    AbsorbItem block_item(const AbsorbSegment& s, const AbsorbBlock& blk, const WorkItem& wi,
                          const ThreadArea& t) const;
    void store_block_rows(const AbsorbSegment& s, const AbsorbBlock& blk, const ThreadArea& t) const;
    void merge_split_units(const AbsorbChunk& c, const DecodePlan& plan, int64_t first, int64_t end) const;
    void project_outputs(int64_t first, int64_t end) const;
    void store_outputs(const AbsorbChunk& c, int64_t first, int64_t end) const;

    CpuContext* ctx_;
    const gqla_decode_args* a_;
    const gqla_backend_desc& d_;
    const LayerWeights& lw_;
    const PathWorkspace& W_;
    const CallRows rows_;
    int64_t NW_;
    int RBmax_;
    float q_scale_;
    gqla_dtype q_dtype_;
    AbsorbAttendFn attend_;
    GemmFn gemm_;
    GemmBf16Fn gemm_bf16_;
    const float* w_;
    const float* wt_;
    const uint16_t* w16_;
    const uint16_t* wuv16_;
    const char* cpool_;
    const char* krpool_;
    float* ws_;
    float* qc_;   // [G][M][dc]
    float* qt_;   // [G][M][r]: q~, then o~
    float* QT_;   // per segment [K][rows_pad]
    float* out_;  // [G][M][dv]
    // The current chunk: rows per group and the projections' column tasks.
    int64_t M_ = 0;
    int cols_ = 0, col_tasks_q_ = 0, col_tasks_o_ = 0;
};

void AbsorbDecode::run() {
    DecodePlan plan = plan_arrays(ws_, W_);
    AbsorbChunker chunker(ctx_, rows_, ws_);
    ThreadPool& pool = ctx_->threads();
    AbsorbChunk c;
    while (chunker.next(c)) {
        const int64_t Q = c.queries;
        M_ = Q * n_rep_;  // rows per group
        plan_decode(
            plan, c.num_blocks, [&](int32_t u) { return c.blocks[u].extent; },
            [&](int32_t u) { return c.blocks[u].width; }, W_, ctx_->ws_layout.threads);
        cols_ = M_ <= 3 ? kGemvCols : kGemmCols;
        col_tasks_q_ = (r_ + cols_ - 1) / cols_;
        col_tasks_o_ = (dv_ + cols_ - 1) / cols_;
        // Each numbered phase is one pool call: the next starts once every
        // item of the previous one has run.
        // 1. Nope parts of the queries, group-major rows m = (chunk query, hh).
        pool.parallel_for_spread(Q, [this, &c](int64_t first, int64_t end, int) { load_query_nope(c, first, end); });
        // 2. q~[g] = qc[g] * W_UK[g].
        pool.parallel_for_spread(G_ * col_tasks_q_,
                                 [this](int64_t first, int64_t end, int) { project_queries(first, end); });
        // 3. Transposed query blocks [q~ | qr] per segment; padding rows are 0.
        pool.parallel_for_spread(Q, [this, &c](int64_t first, int64_t end, int) { transpose_queries(c, first, end); });
        // 4. Attention over the latent.
        pool.parallel_for(plan.num_items, 1, [this, &c, &plan](int64_t first, int64_t end, int tid) {
            attend_latent(c, plan, first, end, tid);
        });
        // 5. Merge split units into o~.
        pool.parallel_for(c.num_blocks, 1, [this, &c, &plan](int64_t first, int64_t end, int) {
            merge_split_units(c, plan, first, end);
        });
        // 6. o[g] = o~[g] * W_UV[g]^T.
        pool.parallel_for_spread(G_ * col_tasks_o_,
                                 [this](int64_t first, int64_t end, int) { project_outputs(first, end); });
        // 7. Output rows in the io dtype.
        pool.parallel_for_spread(Q, [this, &c](int64_t first, int64_t end, int) { store_outputs(c, first, end); });
    }
}

AbsorbDecode::ThreadArea AbsorbDecode::thread_area(int tid) const {
    ThreadArea t;
    float* tws = ws_ + W_.thread_off + W_.thread_floats * static_cast<size_t>(tid);
    t.t_ctile = tws;
    t.t_stile = t.t_ctile + round16(kAbsorbTokenBlock * K_);
    t.t_acc = t.t_stile + round16(kAbsorbTokenBlock * RBmax_ + RBmax_);
    t.t_m = t.t_acc + round16(static_cast<int64_t>(r_) * RBmax_);
    t.t_l = t.t_m + RBmax_;
    t.t_limit = reinterpret_cast<int64_t*>(t.t_l + RBmax_);
    t.t_pairs = reinterpret_cast<uint32_t*>(t.t_m + round16(4 * RBmax_));
    return t;
}

// Phase 1: the nope parts of chunk queries [first, end), scaled, in f32.
void AbsorbDecode::load_query_nope(const AbsorbChunk& c, int64_t first, int64_t end) const {
    for (int64_t qi = first; qi < end; ++qi) {
        const AbsorbSegment& s = segment_of(c, qi);
        const int64_t k = s.k0 + (qi - s.q0);
        for (int h = 0; h < H_; ++h)
            load_row_f32(rows_.q(s.b, k, h), q_dtype_, dc_, q_scale_, qc_ + group_row(qi, h) * dc_);
    }
}

// Phase 2: column tasks [first, end) of q~[g] = qc[g] * W_UK[g].
void AbsorbDecode::project_queries(int64_t first, int64_t end) const {
    const int M = static_cast<int>(M_);
    for (int task = static_cast<int>(first); task < end; ++task) {
        const int64_t g = task / col_tasks_q_;
        const int n0 = task % col_tasks_q_ * cols_;
        const int64_t off = g * (dc_ + dv_) * static_cast<int64_t>(r_) + n0;  // W_UK[g], columns n0..
        if (lw_.bf16())
            gemm_bf16_(M, std::min(cols_, r_ - n0), dc_, qc_ + g * M_ * dc_, dc_, w16_ + off, r_,
                       qt_ + g * M_ * r_ + n0, r_);
        else
            gemm_(M, std::min(cols_, r_ - n0), dc_, qc_ + g * M_ * dc_, dc_, w_ + off, r_, qt_ + g * M_ * r_ + n0, r_);
    }
}

// Phase 3: chunk queries [first, end) into their segments' transposed
// blocks [q~ | qr]; a segment's last query zeroes its padding rows.
void AbsorbDecode::transpose_queries(const AbsorbChunk& c, int64_t first, int64_t end) const {
    for (int64_t qi = first; qi < end; ++qi) {
        const AbsorbSegment& s = segment_of(c, qi);
        const int64_t i = qi - s.q0, k = s.k0 + i;
        const int Rpad = s.rows_pad;
        float* qtb = QT_ + s.qt_off;
        for (int h = 0; h < H_; ++h) {
            const int64_t row = i * H_ + h;
            const float* src = qt_ + group_row(qi, h) * r_;
            for (int e = 0; e < r_; ++e) qtb[e * Rpad + row] = src[e];
            const void* qr = static_cast<const char*>(rows_.q(s.b, k, h)) + dc_ * dtype_size(q_dtype_);
            for (int e = 0; e < dr_; ++e) qtb[(r_ + e) * Rpad + row] = load_as_f32(qr, q_dtype_, e) * q_scale_;
        }
        if (k == s.k1 - 1) {
            const int R = (s.k1 - s.k0) * H_;
            for (int e = 0; e < K_; ++e) std::fill(qtb + e * Rpad + R, qtb + (e + 1) * Rpad, 0.0f);
        }
    }
}

// Phase 4: work items [first, end) (in plan order) of the attention over
// the latent; an unsplit item writes its rows of o~ (and lse) itself.
void AbsorbDecode::attend_latent(const AbsorbChunk& c, const DecodePlan& plan, int64_t first, int64_t end,
                                 int tid) const {
    const ThreadArea t = thread_area(tid);
    for (int idx = static_cast<int>(first); idx < end; ++idx) {
        const WorkItem& wi = plan.items[plan.order[idx]];
        const AbsorbBlock& blk = c.blocks[wi.unit];
        const AbsorbSegment& s = c.segs[blk.seg];
        const int R = (s.k1 - s.k0) * H_;
        const int64_t first_limit = rows_.limit(s.b, s.k0);
        for (int lane = 0; lane < blk.width; ++lane) {
            const int row = blk.col0 + lane;
            t.t_limit[lane] = row < R ? first_limit + row / H_ : blk.extent - 1;
        }
        attend_(block_item(s, blk, wi, t));
        if (wi.partial < 0) store_block_rows(s, blk, t);
    }
}

// Phase 4, one item: the kernel's arguments for row block blk over the
// item's positions, its results in the thread's area or its partial slot.
AbsorbItem AbsorbDecode::block_item(const AbsorbSegment& s, const AbsorbBlock& blk, const WorkItem& wi,
                                    const ThreadArea& t) const {
    const gqla_decode_seq& seq = a_->seqs[s.b];
    AbsorbItem it;
    it.rows_pad = blk.width;
    it.qt = QT_ + s.qt_off + blk.col0;
    it.qt_ld = s.rows_pad;
    it.row_limit = t.t_limit;
    it.page_table = seq.page_table;
    it.page_size = d_.page_size;
    it.t0 = wi.t0;
    it.t1 = wi.t1;
    it.c = cpool_;
    it.c_page_stride = ctx_->kept[0].page_elems;
    it.r = r_;
    it.kr = krpool_;
    it.kr_page_stride = ctx_->kept[1].page_elems;
    it.d_r = dr_;
    if (ctx_->fp8()) {  // per (token, latent block) scales; page stride in floats
        it.c_scale = ctx_->kept[0].scales(cpool_, 0, 0);
        it.c_scale_page_stride = ctx_->kept[0].page_elems / 4;
        it.c_scale_blocks = ctx_->kept[0].scale_cols;
    }
    if (wi.partial < 0) {
        it.acc = t.t_acc;
        it.m = t.t_m;
        it.l = t.t_l;
    } else {
        float* p = partial_slot(wi.partial);
        it.acc = p;
        it.m = p + static_cast<int64_t>(r_) * RBmax_;
        it.l = it.m + RBmax_;
    }
    it.ctile = t.t_ctile;
    it.stile = t.t_stile;
    it.pairs = t.t_pairs;
    if (ctx_->fp8()) it.stage = reinterpret_cast<uint16_t*>(t.t_pairs + absorb_pair_scratch_floats(K_, r_, RBmax_));
    return it;
}

// Phase 4, unsplit item: its normalized rows into o~, and their lse.
void AbsorbDecode::store_block_rows(const AbsorbSegment& s, const AbsorbBlock& blk, const ThreadArea& t) const {
    const int R = (s.k1 - s.k0) * H_;
    const int width = blk.width;
    for (int lane = 0; lane < width; ++lane) {
        const int row = blk.col0 + lane;
        if (row >= R) break;
        const int64_t i = row / H_, h = row % H_, g = h / n_rep_;
        const int64_t m = (s.q0 + i) * n_rep_ + h % n_rep_;
        float* dst = qt_ + (g * M_ + m) * r_;
        const float inv = 1.0f / t.t_l[lane];
        for (int e = 0; e < r_; ++e) dst[e] = t.t_acc[static_cast<int64_t>(e) * width + lane] * inv;
        if (rows_.wants_lse()) *rows_.lse(s.b, s.k0 + i, h) = (t.t_m[lane] + __builtin_log2f(t.t_l[lane])) * kLn2;
    }
}

// Phase 5: row blocks [first, end) that were split, their partial results
// merged into o~ (and lse).
void AbsorbDecode::merge_split_units(const AbsorbChunk& c, const DecodePlan& plan, int64_t first, int64_t end) const {
    for (int u = static_cast<int>(first); u < end; ++u) {
        const UnitSplit& us = plan.units[u];
        if (us.count < 2) continue;
        const AbsorbBlock& blk = c.blocks[u];
        const AbsorbSegment& s = c.segs[blk.seg];
        const int R = (s.k1 - s.k0) * H_;
        const int width = blk.width;
        for (int lane = 0; lane < width; ++lane) {
            const int64_t row = blk.col0 + lane;
            if (row >= R) break;
            float mx = -3.0e38f;
            for (int k = 0; k < us.count; ++k)
                mx = std::max(mx, partial_slot(us.first_partial + k)[static_cast<int64_t>(r_) * RBmax_ + lane]);
            float l = 0.0f;
            const int64_t i = row / H_, h = row % H_, g = h / n_rep_;
            const int64_t m = (s.q0 + i) * n_rep_ + h % n_rep_;
            float* dst = qt_ + (g * M_ + m) * r_;
            std::fill(dst, dst + r_, 0.0f);
            for (int k = 0; k < us.count; ++k) {
                const float* p = partial_slot(us.first_partial + k);
                const float wgt = __builtin_exp2f(p[static_cast<int64_t>(r_) * RBmax_ + lane] - mx);
                l += p[static_cast<int64_t>(r_) * RBmax_ + RBmax_ + lane] * wgt;
                for (int e = 0; e < r_; ++e) dst[e] += p[static_cast<int64_t>(e) * width + lane] * wgt;
            }
            const float inv = 1.0f / l;
            for (int e = 0; e < r_; ++e) dst[e] *= inv;
            if (rows_.wants_lse()) *rows_.lse(s.b, s.k0 + i, h) = (mx + __builtin_log2f(l)) * kLn2;
        }
    }
}

// Phase 6: column tasks [first, end) of o[g] = o~[g] * W_UV[g]^T.
void AbsorbDecode::project_outputs(int64_t first, int64_t end) const {
    const int M = static_cast<int>(M_);
    for (int task = static_cast<int>(first); task < end; ++task) {
        const int64_t g = task / col_tasks_o_;
        const int n0 = task % col_tasks_o_ * cols_;
        // W_UV[g]^T, columns n0..: a contiguous [r][dv] block in bf16,
        // G*(d_c+d_v) apart inside W^T in f32.
        if (lw_.bf16())
            gemm_bf16_(M, std::min(cols_, dv_ - n0), r_, qt_ + g * M_ * r_, r_,
                       wuv16_ + g * r_ * static_cast<int64_t>(dv_) + n0, dv_, out_ + g * M_ * dv_ + n0, dv_);
        else
            gemm_(M, std::min(cols_, dv_ - n0), r_, qt_ + g * M_ * r_, r_, wt_ + g * (dc_ + dv_) + dc_ + n0, NW_,
                  out_ + g * M_ * dv_ + n0, dv_);
    }
}

// Phase 7: the output rows of chunk queries [first, end) in the io dtype.
void AbsorbDecode::store_outputs(const AbsorbChunk& c, int64_t first, int64_t end) const {
    for (int64_t qi = first; qi < end; ++qi) {
        const AbsorbSegment& s = segment_of(c, qi);
        const int64_t k = s.k0 + (qi - s.q0);
        for (int h = 0; h < H_; ++h)
            store_row_f32(out_ + group_row(qi, h) * dv_, 1.0f, rows_.o(s.b, k, h), d_.io_dtype, dv_);
    }
}

}  // namespace

gqla_status decode_absorb(CpuContext* ctx, const gqla_decode_args* a) {
    const LayerWeights& lw = ctx->weights[static_cast<size_t>(a->layer)];
    if (!lw.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: weights of layer %d are not set", a->layer);
    AbsorbDecode(ctx, a).run();
    return GQLA_OK;
}

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// Sparse attention on the GQLA absorb path. Per chunk of queries, as the
// dense absorb path does:
//   q~ = qc * W_UK[g]      (GEMM per group over the chunk's rows)
//   attention              (items: a piece of one query's list; all H heads
//                           of the query in SIMD lanes, in row blocks of up
//                           to kAbsorbMaxRowBlock, over its gathered latent
//                           rows c and kr, block by block)
//   o  = o~ * W_UV[g]^T    (GEMM per group)
#include <algorithm>
#include <cstring>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_sparse.hpp"
#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/latent_dims.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

using namespace sparse;

const int32_t kStagePage[1] = {0};
// Columns of one projection GEMM task; wider for a few rows per group, so
// each task streams long runs of its weight rows.
constexpr int kGemmCols = 64;
constexpr int kGemvCols = 256;
// Staged tokens per absorb kernel call.
constexpr int kAbsorbCallTokens = 128;

struct Area {
    char* c;          // staged latent rows [kBlock][r], as the cache stores them (8-bit caches: e4m3 bytes)
    char* kr;         // [kBlock][d_r] (bf16 for 8-bit caches)
    float* sc;        // 8-bit caches: the staged rows' block scales [kBlock][blocks]
    uint16_t* stage;  // 8-bit caches: the bf16-dot kernel's latent staging (absorb_fp8_stage_floats)
    float* ctile;
    float* stile;
    float* kacc;  // one kernel call: [r][width], m, l
    float* km;
    float* kl;
    int64_t* limit;
    uint32_t* pairs;
    float* acc;  // running state: per row block [r][width], then m [Hpad], l [Hpad]
    float* m;
    float* l;
    int32_t* pos;   // [kBlock] positions read from a list
    Located* rows;  // [2]: this block's rows and the next one's
};

// state (+)= a kernel call's result, lane by lane ([r][width] accumulators).
void fold_lanes(int width, int r, const float* acc, const float* m, const float* l, float* s_acc, float* s_m,
                float* s_l) {
    float ws[kAbsorbMaxRowBlock], wt[kAbsorbMaxRowBlock];
    for (int i = 0; i < width; ++i) {
        const float mx = std::max(s_m[i], m[i]);
        ws[i] = __builtin_exp2f(s_m[i] - mx);
        wt[i] = __builtin_exp2f(m[i] - mx);
        s_l[i] = s_l[i] * ws[i] + l[i] * wt[i];
        s_m[i] = mx;
    }
    for (int e = 0; e < r; ++e) {
        float* sa = s_acc + int64_t(e) * width;
        const float* ta = acc + int64_t(e) * width;
        for (int i = 0; i < width; ++i) sa[i] = sa[i] * ws[i] + ta[i] * wt[i];
    }
}

class AbsorbSparse : LatentDims {
public:
    AbsorbSparse(CpuContext* ctx, const gqla_decode_args* a)
        : LatentDims(ctx->desc),
          ctx_(ctx),
          a_(a),
          d_(ctx->desc),
          rows_{a},
          lw_(ctx->weights[static_cast<size_t>(a->layer)]) {
        Hpad_ = static_cast<int>(round16(H_));
        RB_ = std::min(kAbsorbMaxRowBlock, Hpad_);
        // 8-bit caches: the listed latent rows are staged as stored (e4m3
        // bytes and their block scales) and read by the 8-bit kernel, which
        // multiplies them as exactly as a page's rows (kr is bf16). Staging
        // them widened to bf16, as before 2026-12-06, rounded every element
        // (API-sequence fuzzer seeds 108, 112: lse 0.04 off).
        c_es_ = ctx->kept[0].elem;
        kr_es_ = ctx->kept[1].elem;
        scale_blocks_ = ctx->fp8() ? ctx->kept[0].scale_cols : 0;
        staged_bytes_ = int64_t(kBlock) * (int64_t(r_) * c_es_ + int64_t(dr_) * kr_es_ + 4 * scale_blocks_);
        stage_floats_ = ctx->fp8() ? absorb_fp8_stage_floats(r_) : 0;
        cpool_ = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], a->layer));
        krpool_ = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], a->layer));
        state_floats_ = int64_t(r_) * Hpad_ + 2 * int64_t(Hpad_);
        partial_floats_ = round16(state_floats_ + 1);
        area_floats_ = round16((staged_bytes_ + 3) / 4) + round16(kAbsorbTokenBlock * int64_t(K_)) +
                       round16(kAbsorbTokenBlock * int64_t(RB_) + RB_) + round16(int64_t(r_) * RB_) +
                       round16(4 * int64_t(RB_)) + absorb_pair_scratch_floats(K_, r_, RB_) + stage_floats_ +
                       round16(state_floats_) + round16(kBlock + 2 * int64_t(sizeof(Located)) / 4);
    }

    gqla_status run();

private:
    Area area(float* base) const;
    void run_item(int64_t qi, const Query& q, int64_t i0, int64_t i1, const Area& ar, float* partial) const;
    void stage(const Located& l, const Area& ar) const;
    void prefetch_part(const Located& l, int part, int parts) const;
    void finish(int64_t qi, const Query& q, const float* state, int64_t count) const;
    void project_queries(int64_t q0, int64_t nq, const Query* queries) const;
    void project_outputs(int64_t q0, int64_t nq, const Query* queries) const;

    CpuContext* ctx_;
    const gqla_decode_args* a_;
    const gqla_backend_desc& d_;
    const CallRows rows_;
    const LayerWeights& lw_;
    int Hpad_, RB_;
    size_t c_es_, kr_es_;   // the pools' element sizes (those of the staged rows)
    int32_t scale_blocks_;  // 8-bit caches: scales per latent row
    int64_t staged_bytes_;  // one block's staged rows (and scales)
    int64_t stage_floats_;  // 8-bit caches: the bf16-dot kernel's staging
    const char* cpool_;
    const char* krpool_;
    int64_t state_floats_, partial_floats_, area_floats_;
    // The chunk's arrays (shared buffer): group-major rows m = (query, hh).
    float* qc_ = nullptr;   // [G][M][d_c]
    float* qt_ = nullptr;   // [G][M][r]: q~, then o~
    float* QT_ = nullptr;   // per query [r + d_r][Hpad], transposed, pre-scaled
    float* out_ = nullptr;  // [G][M][d_v]
    int64_t M_ = 0;         // rows per group of the current chunk
};

Area AbsorbSparse::area(float* base) const {
    Area ar;
    ar.c = reinterpret_cast<char*>(base);
    ar.kr = ar.c + size_t(kBlock) * r_ * c_es_;
    ar.sc = reinterpret_cast<float*>(ar.kr + size_t(kBlock) * dr_ * kr_es_);  // 4-byte aligned (kBlock % 4 == 0)
    float* p = base + round16((staged_bytes_ + 3) / 4);
    ar.ctile = p;
    p += round16(kAbsorbTokenBlock * int64_t(K_));
    ar.stile = p;
    p += round16(kAbsorbTokenBlock * int64_t(RB_) + RB_);
    ar.kacc = p;
    p += round16(int64_t(r_) * RB_);
    ar.km = p;
    ar.kl = p + RB_;
    ar.limit = reinterpret_cast<int64_t*>(p + 2 * RB_);
    p += round16(4 * int64_t(RB_));
    ar.pairs = reinterpret_cast<uint32_t*>(p);
    p += absorb_pair_scratch_floats(K_, r_, RB_);
    ar.stage = stage_floats_ ? reinterpret_cast<uint16_t*>(p) : nullptr;
    p += stage_floats_;
    ar.acc = p;
    ar.m = p + int64_t(r_) * Hpad_;
    ar.l = ar.m + Hpad_;
    p += round16(state_floats_);
    ar.rows = reinterpret_cast<Located*>(p);
    ar.pos = reinterpret_cast<int32_t*>(ar.rows + 2);
    return ar;
}

// Copies the latent rows c and kr of a block (8-bit caches: with their
// block scales).
void AbsorbSparse::stage(const Located& l, const Area& ar) const {
    const Pool& cp = ctx_->kept[0];
    const size_t c_bytes = size_t(r_) * c_es_, kr_bytes = size_t(dr_) * kr_es_;
    for (int t = 0; t < l.n; ++t) {
        if (t + kPrefetchAhead < l.n) {
            prefetch_bytes(row_at(cpool_, l, t + kPrefetchAhead, cp.page_elems, 0, r_, c_es_), r_ * int64_t(c_es_));
            prefetch_bytes(row_at(krpool_, l, t + kPrefetchAhead, ctx_->kept[1].page_elems, 0, dr_, kr_es_),
                           int64_t(kr_bytes));
        }
        copy_row(ar.c + t * c_bytes, row_at(cpool_, l, t, cp.page_elems, 0, r_, c_es_), c_bytes);
        if (scale_blocks_ > 0)
            std::copy_n(cp.scales(cpool_, l.page[t], l.slot[t]), scale_blocks_, ar.sc + int64_t(t) * scale_blocks_);
        copy_row(ar.kr + t * kr_bytes, row_at(krpool_, l, t, ctx_->kept[1].page_elems, 0, dr_, kr_es_), kr_bytes);
    }
}

// Prefetches part `part` of `parts` of the rows of block l: the next block
// arrives piece by piece while this one is attended.
void AbsorbSparse::prefetch_part(const Located& l, int part, int parts) const {
    for (int t = l.n * part / parts; t < l.n * (part + 1) / parts; ++t) {
        prefetch_bytes(row_at(cpool_, l, t, ctx_->kept[0].page_elems, 0, r_, c_es_), r_ * int64_t(c_es_));
        prefetch_bytes(row_at(krpool_, l, t, ctx_->kept[1].page_elems, 0, dr_, kr_es_), dr_ * int64_t(kr_es_));
    }
}

void AbsorbSparse::run_item(int64_t qi, const Query& q, int64_t i0, int64_t i1, const Area& ar, float* partial) const {
    std::fill(ar.acc, ar.acc + int64_t(r_) * Hpad_, 0.0f);
    std::fill(ar.m, ar.m + Hpad_, kMaxFloor);
    std::fill(ar.l, ar.l + Hpad_, 0.0f);
    const AbsorbAttendFn attend = ctx_->kernels->absorb_attend[d_.cache_dtype - 1];
    const float* qt = QT_ + qi * int64_t(K_) * Hpad_;
    int64_t count = 0;
    int64_t i = i0;
    const int32_t* pt = a_->seqs[q.b].page_table;
    Located* cur = ar.rows;
    Located* next = ar.rows + 1;
    locate(pt, d_.page_size, ar.pos, next_visible(q.list, &i, i1, q.limit, ar.pos), cur);
    if (cur->n > 0) prefetch_part(*cur, 0, 1);
    // Kernel calls of kAbsorbCallTokens tokens per row block, each after
    // the prefetch of its share of the next block. Each call converts the
    // row block's queries again (bf16 pairs on bf16-dot tables), so calls
    // are not made shorter than that.
    const int row_blocks = (Hpad_ + RB_ - 1) / RB_;
    while (cur->n > 0) {
        const int n = cur->n;
        count += n;
        stage(*cur, ar);
        locate(pt, d_.page_size, ar.pos, next_visible(q.list, &i, i1, q.limit, ar.pos), next);
        for (int lane = 0; lane < RB_; ++lane) ar.limit[lane] = n - 1;  // every staged row is visible
        const int steps = (n + kAbsorbCallTokens - 1) / kAbsorbCallTokens;
        int part = 0;
        for (int s = 0; s < steps; ++s)
            for (int col0 = 0; col0 < Hpad_; col0 += RB_, ++part) {
                prefetch_part(*next, part, steps * row_blocks);
                const int width = std::min(RB_, Hpad_ - col0);
                AbsorbItem it;
                it.rows_pad = width;
                it.qt = qt + col0;
                it.qt_ld = Hpad_;
                it.row_limit = ar.limit;
                it.page_table = kStagePage;
                it.page_size = kBlock;
                it.t0 = int64_t(s) * kAbsorbCallTokens;
                it.t1 = std::min<int64_t>(n, it.t0 + kAbsorbCallTokens);
                it.c = ar.c;
                it.c_page_stride = 0;
                it.r = r_;
                it.kr = ar.kr;
                it.kr_page_stride = 0;
                it.d_r = dr_;
                it.c_scale = ar.sc;
                it.c_scale_page_stride = 0;
                it.c_scale_blocks = scale_blocks_;
                it.stage = ar.stage;
                it.acc = ar.kacc;
                it.m = ar.km;
                it.l = ar.kl;
                it.ctile = ar.ctile;
                it.stile = ar.stile;
                it.pairs = ar.pairs;
                attend(it);
                fold_lanes(width, r_, ar.kacc, ar.km, ar.kl, ar.acc + int64_t(col0) * r_, ar.m + col0, ar.l + col0);
            }
        std::swap(cur, next);
    }
    if (partial == nullptr) {
        finish(qi, q, ar.acc, count);
        return;
    }
    std::copy(ar.acc, ar.acc + state_floats_, partial);  // acc, m, l are contiguous
    partial[state_floats_] = static_cast<float>(count);
}

// o~ rows (normalised) and lse of query qi from its state.
void AbsorbSparse::finish(int64_t qi, const Query& q, const float* state, int64_t count) const {
    const float* m = state + int64_t(r_) * Hpad_;
    const float* l = m + Hpad_;
    for (int h = 0; h < H_; ++h) {
        const int col0 = h / RB_ * RB_, width = std::min(RB_, Hpad_ - col0), lane = h - col0;
        const float* acc = state + int64_t(col0) * r_ + lane;
        const int64_t g = h / n_rep_, row = qi * n_rep_ + h % n_rep_;
        float* dst = qt_ + (g * M_ + row) * r_;
        // No visible entry: o~ = 0 (so o = 0), lse = -inf.
        const float inv = count > 0 ? 1.0f / l[h] : 0.0f;
        for (int e = 0; e < r_; ++e) dst[e] = acc[int64_t(e) * width] * inv;
        if (rows_.wants_lse())
            *rows_.lse(q.b, q.k, h) = count > 0 ? (m[h] + __builtin_log2f(l[h])) * kLn2 : -__builtin_huge_valf();
    }
}

// Phases 1-3: qc (scaled), q~ = qc W_UK[g], and the transposed query blocks.
void AbsorbSparse::project_queries(int64_t q0, int64_t nq, const Query* queries) const {
    ThreadPool& pool = ctx_->threads();
    const float scale = ctx_->query_scale();
    const gqla_dtype qd = a_->q.dtype;
    const int64_t M = M_;
    pool.parallel_for_spread(nq, [&](int64_t first, int64_t end, int) {
        for (int64_t qi = first; qi < end; ++qi) {
            const Query& q = queries[q0 + qi];
            for (int h = 0; h < H_; ++h) {
                const int64_t g = h / n_rep_, row = qi * n_rep_ + h % n_rep_;
                load_row_f32(rows_.q(q.b, q.k, h), qd, dc_, scale, qc_ + (g * M + row) * dc_);
            }
        }
    });
    const int cols = M <= 3 ? kGemvCols : kGemmCols;
    const int tasks = (r_ + cols - 1) / cols;
    pool.parallel_for_spread(int64_t(G_) * tasks, [&](int64_t first, int64_t end, int) {
        for (int64_t task = first; task < end; ++task) {
            const int64_t g = task / tasks;
            const int n0 = static_cast<int>(task % tasks) * cols, nc = std::min(cols, r_ - n0);
            const int64_t off = g * (dc_ + dv_) * int64_t(r_) + n0;  // W_UK[g], columns n0..
            if (lw_.bf16())
                ctx_->kernels->gemm_bf16(static_cast<int>(M), nc, dc_, qc_ + g * M * dc_, dc_,
                                         lw_.w16.as<uint16_t>() + off, r_, qt_ + g * M * r_ + n0, r_);
            else
                ctx_->kernels->gemm(static_cast<int>(M), nc, dc_, qc_ + g * M * dc_, dc_, lw_.w.as<float>() + off, r_,
                                    qt_ + g * M * r_ + n0, r_);
        }
    });
    pool.parallel_for_spread(nq, [&](int64_t first, int64_t end, int) {
        for (int64_t qi = first; qi < end; ++qi) {
            const Query& q = queries[q0 + qi];
            float* blk = QT_ + qi * int64_t(K_) * Hpad_;
            for (int h = 0; h < H_; ++h) {
                const int64_t g = h / n_rep_, row = qi * n_rep_ + h % n_rep_;
                const float* src = qt_ + (g * M + row) * r_;
                for (int e = 0; e < r_; ++e) blk[int64_t(e) * Hpad_ + h] = src[e];
                const void* qr = static_cast<const char*>(rows_.q(q.b, q.k, h)) + dc_ * dtype_size(qd);
                for (int e = 0; e < dr_; ++e) blk[int64_t(r_ + e) * Hpad_ + h] = load_as_f32(qr, qd, e) * scale;
            }
            for (int e = 0; e < K_; ++e) std::fill(blk + int64_t(e) * Hpad_ + H_, blk + int64_t(e + 1) * Hpad_, 0.0f);
        }
    });
}

// Phases 6-7: o = o~ W_UV[g]^T, then the output rows in the io dtype.
void AbsorbSparse::project_outputs(int64_t q0, int64_t nq, const Query* queries) const {
    ThreadPool& pool = ctx_->threads();
    const int64_t M = M_, NW = ctx_->expanded_width();
    const int cols = M <= 3 ? kGemvCols : kGemmCols;
    const int tasks = (dv_ + cols - 1) / cols;
    pool.parallel_for_spread(int64_t(G_) * tasks, [&](int64_t first, int64_t end, int) {
        for (int64_t task = first; task < end; ++task) {
            const int64_t g = task / tasks;
            const int n0 = static_cast<int>(task % tasks) * cols, nc = std::min(cols, dv_ - n0);
            if (lw_.bf16())
                ctx_->kernels->gemm_bf16(static_cast<int>(M), nc, r_, qt_ + g * M * r_, r_,
                                         lw_.wuv16.as<uint16_t>() + g * r_ * int64_t(dv_) + n0, dv_,
                                         out_ + g * M * dv_ + n0, dv_);
            else
                ctx_->kernels->gemm(static_cast<int>(M), nc, r_, qt_ + g * M * r_, r_,
                                    lw_.wt.as<float>() + g * (dc_ + dv_) + dc_ + n0, NW, out_ + g * M * dv_ + n0, dv_);
        }
    });
    pool.parallel_for_spread(nq, [&](int64_t first, int64_t end, int) {
        for (int64_t qi = first; qi < end; ++qi) {
            const Query& q = queries[q0 + qi];
            for (int h = 0; h < H_; ++h) {
                const int64_t g = h / n_rep_, row = qi * n_rep_ + h % n_rep_;
                store_row_f32(out_ + (g * M + row) * dv_, 1.0f, rows_.o(q.b, q.k, h), d_.io_dtype, dv_);
            }
        }
    });
}

gqla_status AbsorbSparse::run() {
    ThreadPool& pool = ctx_->threads();
    const int threads = pool.participants();
    const int64_t total_q = a_->total_q;
    const int64_t chunk_q = std::max<int64_t>(1, kChunkRows / H_);
    const int32_t K = a_->topk;
    const int64_t slots = partial_slots(threads);
    const int64_t rows = chunk_q * n_rep_;
    const size_t query_bytes = round16(int64_t(total_q) * int64_t(sizeof(Query)) / 4 + 1) * sizeof(float);
    const size_t floats =
        static_cast<size_t>(round16(G_ * rows * dc_) + round16(G_ * rows * r_) + round16(chunk_q * K_ * Hpad_) +
                            round16(G_ * rows * dv_) + slots * partial_floats_);
    Buffers& buf = buffers();
    const size_t area_bytes = size_t(area_floats_) * sizeof(float);
    if (!reserve(buf.shared, query_bytes + floats * sizeof(float)) || !reserve(buf.per_thread, area_bytes * threads))
        return fail(ctx_, GQLA_ERR_OUT_OF_MEMORY, "decode: cannot allocate %zu bytes of sparse-attention scratch",
                    query_bytes + floats * sizeof(float) + area_bytes * threads);
    Query* queries = buf.shared.as<Query>();
    float* base = reinterpret_cast<float*>(buf.shared.as<char>() + query_bytes);
    qc_ = base;
    qt_ = qc_ + round16(G_ * rows * dc_);
    QT_ = qt_ + round16(G_ * rows * r_);
    out_ = QT_ + round16(chunk_q * K_ * Hpad_);
    float* partials = out_ + round16(G_ * rows * dv_);
    float* areas = buf.per_thread.as<float>();
    fill_queries(a_, queries);
    for (int64_t q0 = 0; q0 < total_q; q0 += chunk_q) {
        const int64_t nq = std::min(chunk_q, total_q - q0);
        const int pieces = plan_pieces(nq, K, threads);
        M_ = nq * n_rep_;
        project_queries(q0, nq, queries);
        pool.parallel_for(nq * pieces, 1, [&](int64_t first, int64_t end, int tid) {
            const Area ar = area(areas + size_t(area_floats_) * size_t(tid));
            for (int64_t item = first; item < end; ++item) {
                const int64_t qi = item / pieces, p = item % pieces;
                float* part = pieces > 1 ? partials + item * partial_floats_ : nullptr;
                run_item(qi, queries[q0 + qi], K * p / pieces, K * (p + 1) / pieces, ar, part);
            }
        });
        if (pieces > 1) {
            pool.parallel_for(nq, 1, [&](int64_t first, int64_t end, int) {
                for (int64_t qi = first; qi < end; ++qi) {
                    float* sum = partials + qi * pieces * partial_floats_;
                    int64_t count = static_cast<int64_t>(sum[state_floats_]);
                    for (int p = 1; p < pieces; ++p) {
                        const float* x = sum + p * partial_floats_;
                        const float* xm = x + int64_t(r_) * Hpad_;
                        float* sm = sum + int64_t(r_) * Hpad_;
                        for (int col0 = 0; col0 < Hpad_; col0 += RB_)
                            fold_lanes(std::min(RB_, Hpad_ - col0), r_, x + int64_t(col0) * r_, xm + col0,
                                       xm + Hpad_ + col0, sum + int64_t(col0) * r_, sm + col0, sm + Hpad_ + col0);
                        count += static_cast<int64_t>(x[state_floats_]);
                    }
                    finish(qi, queries[q0 + qi], sum, count);
                }
            });
        }
        project_outputs(q0, nq, queries);
    }
    return GQLA_OK;
}

}  // namespace

gqla_status sparse_absorb(CpuContext* ctx, const gqla_decode_args* a) { return AbsorbSparse(ctx, a).run(); }

}  // namespace gqla::cpu

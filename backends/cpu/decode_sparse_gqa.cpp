// SPDX-License-Identifier: Apache-2.0
// Sparse attention in the GQA form: the GQA kind, the GQLA GQA path over the
// kept expanded cache, and GQA_TRANSIENT (only the listed rows are
// up-projected, block by block). One item is a piece of one query's list;
// for every block of its visible positions and every KV group the item
// runs the narrow GQA kernel on the group's n_rep heads over the block's
// rows, which the kernel reads where they lie in the cache (gathered
// tokens: one row address per position) - except in GQA_TRANSIENT, where
// each group's key and value rows are first up-projected from the latent
// into a staging block, and over an 8-bit cache where the fp8 kernel does
// not read gathered rows, where they are widened into f32 staging (exactly
// the stored values, e4m3 x scale) for the f32 kernel.
#include <algorithm>
#include <cstring>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_sparse.hpp"
#include "backends/cpu/gqa_form.hpp"
#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

using namespace sparse;

// Where the rows of one group live: key segment 1 (K, or the expanded KC),
// the shared segment 2 (kr; absent for the GQA kind) and the value (V, VE);
// each pool's element size (an 8-bit cache keeps kr in bf16) and, for 8-bit
// pools, where their scales are.
struct Source {
    const char* k1;
    int64_t k1_page, k1_group;
    int d1;
    size_t k1_es;
    const Pool* k1_pool;
    const char* k2;
    int64_t k2_page;
    int d2;
    size_t k2_es;
    const char* v;
    int64_t v_page, v_group;
    int dv;
    size_t v_es;
    const Pool* v_pool;
    const char* c;
    int64_t c_page;
    int r;  // transient: the latent
    size_t c_es;
    const Pool* c_pool;
};

Source source_of(const CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const int64_t P = d.page_size;
    const auto base = [&](const Pool& p) { return static_cast<const char*>(ctx->pool_layer(p, a->layer)); };
    Source s{};
    const auto key_and_value = [&](const Pool& k, const Pool& v) {
        s.k1 = base(k);
        s.k1_page = k.page_elems;
        s.k1_es = k.elem;
        s.k1_pool = &k;
        s.v = base(v);
        s.v_page = v.page_elems;
        s.v_es = v.elem;
        s.v_pool = &v;
    };
    if (d.kind == GQLA_KIND_GQA) {
        key_and_value(ctx->kept[0], ctx->kept[1]);
        s.k1_group = P * d.head_dim;
        s.d1 = d.head_dim;
        s.v_group = P * d.value_dim;
        s.dv = d.value_dim;
        return s;
    }
    s.d1 = d.nope_dim;
    s.k1_group = P * d.nope_dim;
    s.k2 = base(ctx->kept[1]);
    s.k2_page = ctx->kept[1].page_elems;
    s.k2_es = ctx->kept[1].elem;
    s.d2 = d.rope_dim;
    s.dv = d.value_dim;
    s.v_group = P * d.value_dim;
    if (a->transient) {
        s.c = base(ctx->kept[0]);
        s.c_page = ctx->kept[0].page_elems;
        s.c_es = ctx->kept[0].elem;
        s.c_pool = &ctx->kept[0];
        s.r = d.latent_dim;
    } else {
        key_and_value(ctx->expanded[0], ctx->expanded[1]);
    }
    return s;
}

// Floats of each part of a thread's area.
struct AreaSizes {
    int64_t q, state, kout, limits, kscratch, pos, row_lists, stage, expand, widen, scales;
    int64_t total() const {
        return q + state + kout + limits + kscratch + pos + row_lists + stage + expand + widen + scales;
    }
};

struct Area {
    float* q;    // [H][dk], scaled by scale * log2(e)
    float* acc;  // running state [H][dv], m [H], l [H]
    float* m;
    float* l;
    float* kacc;  // one kernel call: [n_rep][dv], m, l
    float* km;
    float* kl;
    int64_t* limit;  // [n_rep]
    float* kscratch;
    int32_t* pos;   // [kBlock] positions read from a list
    Located* rows;  // [2]: this block's rows and the next one's
    // The kernel's row of each token of the block: [kBlock] each.
    const void** k1_rows;
    const void** k2_rows;
    const void** v_rows;
    char* k1;  // staged rows in the kernel's dtype (transient, 8-bit caches): [kBlock][d1], [kBlock][dv]
    char* v;
    float* k2;      // 8-bit caches staged in f32: their rope keys, [kBlock][d2]
    float* expand;  // transient: the expansion's scratch, then its f32 rows [kExpandTokens][d1 + dv]
    float* widen;   // transient over an 8-bit cache: f32 latent rows [kExpandTokens][r], e4m3 times scales
    float* ks;      // 8-bit rows read in place: the block's key and value scales of one group, [kBlock] each
    float* vs;
};

class GqaSparse {
public:
    GqaSparse(CpuContext* ctx, const gqla_decode_args* a)
        : ctx_(ctx), a_(a), d_(ctx->desc), rows_{a}, src_(source_of(ctx, a)) {
        H_ = d_.num_heads;
        G_ = d_.num_kv_heads;
        n_rep_ = H_ / G_;
        dk_ = src_.d1 + src_.d2;
        // 8-bit caches: the fp8 kernel reads the listed rows in place with
        // their scales gathered per block (fp8_gqa_lists), or they are
        // widened (times their scales) into f32 staging for the f32 kernel,
        // the bf16 rope keys with them (bf16 staging would round each
        // stored value once more, which a sharp softmax over narrow rows
        // magnifies past the bf16 bound). GQA_TRANSIENT keeps its expanded
        // rows in bf16, as the dense transient form does.
        fp8_lists_ = ctx->fp8() && !a->transient && fp8_gqa_reads_lists(*ctx->kernels, src_.d1, src_.d2);
        fp8_staged_ = ctx->fp8() && !a->transient && !fp8_lists_;
        wdt_ = fp8_staged_ ? GQLA_DTYPE_F32 : ctx->fp8() && a->transient ? GQLA_DTYPE_BF16 : d_.cache_dtype;
        wes_ = dtype_size(wdt_);
        staged_ = a->transient || fp8_staged_;
        if (a->transient) lw_ = &ctx->weights[static_cast<size_t>(a->layer)];
        const int64_t N = src_.d1 + src_.dv;
        sz_.q = round16(int64_t(H_) * dk_);
        sz_.state = round16(int64_t(H_) * (src_.dv + 2));
        sz_.kout = round16(int64_t(n_rep_) * (src_.dv + 2));
        sz_.limits = round16(2 * int64_t(n_rep_));
        sz_.kscratch = gqa_scratch_floats(n_rep_, dk_);
        sz_.pos = round16(kBlock + 2 * int64_t(sizeof(Located)) / 4);
        sz_.row_lists = round16(3 * int64_t(kBlock) * int64_t(sizeof(void*)) / 4);
        const int64_t staged_cols = src_.d1 + src_.dv + (fp8_staged_ ? src_.d2 : 0);
        sz_.stage = staged_ ? round16((int64_t(kBlock) * staged_cols * static_cast<int64_t>(wes_) + 3) / 4) : 0;
        sz_.expand = a->transient ? expand_scratch_floats(src_.r, N) + round16(N * int64_t(kExpandTokens)) : 0;
        sz_.widen = ctx->fp8() && a->transient ? round16(int64_t(kExpandTokens) * src_.r) : 0;
        sz_.scales = fp8_lists_ ? round16(2 * int64_t(kBlock)) : 0;
        partial_floats_ = round16(int64_t(H_) * (src_.dv + 2) + 1);
    }

    gqla_status run();

private:
    Area area(float* base) const;
    void load_queries(const Query& q, float* q32) const;
    void run_item(const Query& q, int64_t i0, int64_t i1, int g0, int g1, const Area& ar, float* partial) const;
    void list_group_rows(int g, const Located& l, const Area& ar) const;
    void stage_group_fp8(int g, const Located& l, const Area& ar) const;
    void gather_group_scales(int g, const Located& l, const Area& ar) const;
    // 8-bit pools keep one scale per (group, slot) of a page: group g's key
    // and value scales of block position t.
    int64_t scale_row(int g, const Located& l, int t) const { return int64_t(g) * d_.page_size + l.slot[t]; }
    const float* key_scale(int g, const Located& l, int t) const {
        return src_.k1_pool->scales(src_.k1, l.page[t], scale_row(g, l, t));
    }
    const float* value_scale(int g, const Located& l, int t) const {
        return src_.v_pool->scales(src_.v, l.page[t], scale_row(g, l, t));
    }
    void prefetch_group(int g, const Located& l) const;
    void list_rope_rows(const Located& l, const Area& ar) const;
    void expand_group(int g, const Located& l, const Area& ar) const;
    void write_rows(const Query& q, const float* acc, const float* m, const float* l, int64_t count, int h0,
                    int h1) const;
    void merge(const Query& q, const float* parts, int pieces) const;

    CpuContext* ctx_;
    const gqla_decode_args* a_;
    const gqla_backend_desc& d_;
    const CallRows rows_;
    const Source src_;
    const LayerWeights* lw_ = nullptr;
    int H_, G_, n_rep_, dk_;
    gqla_dtype wdt_;  // the kernel's element type (and the staged rows')
    size_t wes_;
    bool staged_;      // the kernel reads staged key and value rows
    bool fp8_lists_;   // 8-bit rows read in place, scales gathered per block
    bool fp8_staged_;  // 8-bit rows widened into f32 staging
    AreaSizes sz_;
    int64_t partial_floats_;
};

Area GqaSparse::area(float* base) const {
    Area ar;
    ar.q = base;
    ar.acc = ar.q + sz_.q;
    ar.m = ar.acc + int64_t(H_) * src_.dv;
    ar.l = ar.m + H_;
    ar.kacc = ar.acc + sz_.state;
    ar.km = ar.kacc + int64_t(n_rep_) * src_.dv;
    ar.kl = ar.km + n_rep_;
    ar.limit = reinterpret_cast<int64_t*>(ar.kacc + sz_.kout);
    ar.kscratch = ar.kacc + sz_.kout + sz_.limits;
    ar.rows = reinterpret_cast<Located*>(ar.kscratch + sz_.kscratch);
    ar.pos = reinterpret_cast<int32_t*>(ar.rows + 2);
    ar.k1_rows = reinterpret_cast<const void**>(ar.kscratch + sz_.kscratch + sz_.pos);
    ar.k2_rows = ar.k1_rows + kBlock;
    ar.v_rows = ar.k2_rows + kBlock;
    ar.k1 = reinterpret_cast<char*>(ar.kscratch + sz_.kscratch + sz_.pos + sz_.row_lists);
    ar.v = ar.k1 + size_t(kBlock) * src_.d1 * wes_;
    ar.k2 = reinterpret_cast<float*>(ar.v + size_t(kBlock) * src_.dv * wes_);
    ar.expand = reinterpret_cast<float*>(ar.k1) + sz_.stage;
    ar.widen = ar.expand + sz_.expand;
    ar.ks = ar.widen + sz_.widen;
    ar.vs = ar.ks + kBlock;
    return ar;
}

void GqaSparse::load_queries(const Query& q, float* q32) const {
    const float scale = ctx_->query_scale();
    for (int h = 0; h < H_; ++h) load_row_f32(rows_.q(q.b, q.k, h), a_->q.dtype, dk_, scale, q32 + int64_t(h) * dk_);
}

// Points the kernel's key and value rows at group g's rows of the block
// (the rope keys, shared by all groups, are listed once by list_rope_rows).
void GqaSparse::list_group_rows(int g, const Located& l, const Area& ar) const {
    const int64_t kg = g * src_.k1_group, vg = g * src_.v_group;
    for (int t = 0; t < l.n; ++t) {
        ar.k1_rows[t] = row_at(src_.k1, l, t, src_.k1_page, kg, src_.d1, src_.k1_es);
        ar.v_rows[t] = row_at(src_.v, l, t, src_.v_page, vg, src_.dv, src_.v_es);
    }
}

// 8-bit caches: group g's key and value rows of the block, widened with
// their (token, group) scales into the staged f32 rows.
void GqaSparse::stage_group_fp8(int g, const Located& l, const Area& ar) const {
    const int64_t kg = g * src_.k1_group, vg = g * src_.v_group;
    for (int t = 0; t < l.n; ++t) {
        if (t + kPrefetchAhead < l.n) {  // what prefetch_group did not bring yet
            const int u = t + kPrefetchAhead;
            prefetch_bytes(row_at(src_.k1, l, u, src_.k1_page, kg, src_.d1, 1), src_.d1);
            prefetch_bytes(row_at(src_.v, l, u, src_.v_page, vg, src_.dv, 1), src_.dv);
            prefetch_bytes(key_scale(g, l, u), 4);
            prefetch_bytes(value_scale(g, l, u), 4);
        }
        ctx_->kernels->fp8_rows(reinterpret_cast<const uint8_t*>(row_at(src_.k1, l, t, src_.k1_page, kg, src_.d1, 1)),
                                src_.d1, key_scale(g, l, t), src_.d1,
                                reinterpret_cast<float*>(ar.k1 + size_t(t) * src_.d1 * wes_));
        ctx_->kernels->fp8_rows(reinterpret_cast<const uint8_t*>(row_at(src_.v, l, t, src_.v_page, vg, src_.dv, 1)),
                                src_.dv, value_scale(g, l, t), src_.dv,
                                reinterpret_cast<float*>(ar.v + size_t(t) * src_.dv * wes_));
    }
}

// 8-bit rows read in place: group g's key and value scales of the block's
// positions, in list order (prefetch_group asked for them).
void GqaSparse::gather_group_scales(int g, const Located& l, const Area& ar) const {
    for (int t = 0; t < l.n; ++t) {
        ar.ks[t] = *key_scale(g, l, t);
        ar.vs[t] = *value_scale(g, l, t);
    }
}

// The rope keys of the block (bf16 in an 8-bit cache): listed in place, or
// widened into f32 staging when the kernel reads f32 rows.
void GqaSparse::list_rope_rows(const Located& l, const Area& ar) const {
    for (int t = 0; t < l.n; ++t) {
        const void* row = row_at(src_.k2, l, t, src_.k2_page, 0, src_.d2, src_.k2_es);
        if (!fp8_staged_) {
            ar.k2_rows[t] = row;
            continue;
        }
        float* staged = ar.k2 + int64_t(t) * src_.d2;
        load_row_f32(row, GQLA_DTYPE_BF16, src_.d2, 1.0f, staged);
        ar.k2_rows[t] = staged;
    }
}

// Prefetches the rows the unit (block l, group g) will read first, so that
// they arrive while the current unit is attended. GQA kind and kept cache:
// the group's key and value rows (and with group 0 the rope keys) of the
// kernel's first token block only - the kernel prefetches each later block
// itself while it computes on the one before, and a whole unit at once (2k
// lines and more) measured slower, the prefetches beyond the core's miss
// slots dropped or evicting each other. Transient: the block's latent rows,
// which the expansion reads all at the unit's start, and the rope keys.
void GqaSparse::prefetch_group(int g, const Located& l) const {
    if (a_->transient) {
        if (g != 0) return;
        for (int t = 0; t < l.n; ++t) {
            prefetch_bytes(row_at(src_.c, l, t, src_.c_page, 0, src_.r, src_.c_es), src_.r * int64_t(src_.c_es));
            if (src_.d2 > 0)
                prefetch_bytes(row_at(src_.k2, l, t, src_.k2_page, 0, src_.d2, src_.k2_es),
                               src_.d2 * int64_t(src_.k2_es));
        }
        return;
    }
    // Staged 8-bit rows are read by stage_group_fp8, not by the kernel (whose
    // prefetches cover the staging): all of them. Rows read in place: the
    // scales of all of them (gather_group_scales reads them at once).
    const int first = fp8_staged_ ? l.n : std::min(l.n, kGqaTokenBlock);
    if (fp8_lists_)
        for (int t = 0; t < l.n; ++t) {
            prefetch_bytes(key_scale(g, l, t), 4);
            prefetch_bytes(value_scale(g, l, t), 4);
        }
    for (int t = 0; t < first; ++t) {
        prefetch_bytes(row_at(src_.k1, l, t, src_.k1_page, g * src_.k1_group, src_.d1, src_.k1_es),
                       src_.d1 * int64_t(src_.k1_es));
        prefetch_bytes(row_at(src_.v, l, t, src_.v_page, g * src_.v_group, src_.dv, src_.v_es),
                       src_.dv * int64_t(src_.v_es));
        if (g == 0 && src_.d2 > 0)
            prefetch_bytes(row_at(src_.k2, l, t, src_.k2_page, 0, src_.d2, src_.k2_es), src_.d2 * int64_t(src_.k2_es));
    }
}

// f32 rows to the cache dtype, as the kept expanded cache rounds them.
void round_rows(const float* src, int64_t src_ld, char* dst, gqla_dtype t, int rows, int n) {
    const size_t es = dtype_size(t);
    for (int j = 0; j < rows; ++j) round_row(src + j * src_ld, dst + size_t(j) * n * es, t, n);
}

// Up-projects the latent rows of the block's positions for group g into the
// staged key and value rows (GQA_TRANSIENT), as the kept expanded cache
// would hold them - in bf16 for an 8-bit cache, as the dense transient form
// keeps them (docs/fp8-cache.md).
void GqaSparse::expand_group(int g, const Located& l, const Area& ar) const {
    const int r = src_.r, dc = src_.d1, dv = src_.dv, N = dc + dv;
    const gqla_dtype cdt = d_.cache_dtype;
    float* out = ar.expand + expand_scratch_floats(r, N);  // [kExpandTokens][N]
    const LayerWeights& lw = *lw_;
    // The expansion kernel takes kExpandTokens rows at a time.
    for (int t0 = 0; t0 < l.n; t0 += kExpandTokens) {
        const int n = std::min(kExpandTokens, l.n - t0);
        const void* latent[kExpandTokens];
        gqla_dtype ldt = cdt;
        for (int j = 0; j < n; ++j) latent[j] = row_at(src_.c, l, t0 + j, src_.c_page, 0, r, src_.c_es);
        if (ctx_->fp8()) {  // e4m3 rows widened with their block scales, up-projected as f32
            for (int j = 0; j < n; ++j) {
                float* row = ar.widen + int64_t(j) * r;
                ctx_->kernels->fp8_rows(static_cast<const uint8_t*>(latent[j]), r,
                                        src_.c_pool->scales(src_.c, l.page[t0 + j], l.slot[t0 + j]),
                                        kFp8LatentBlockElems, row);
                latent[j] = row;
            }
            ldt = GQLA_DTYPE_F32;
        }
        expand_latent_rows(ctx_, lw, g, n, latent, ldt, out, ar.expand);
        round_rows(out, N, ar.k1 + size_t(t0) * dc * wes_, wdt_, n, dc);
        round_rows(out + dc, N, ar.v + size_t(t0) * dv * wes_, wdt_, n, dv);
    }
}

// List entries [i0, i1) of query q for the KV groups [g0, g1): the heads
// [g0 * n_rep, g1 * n_rep) of its output, or of its partial state.
void GqaSparse::run_item(const Query& q, int64_t i0, int64_t i1, int g0, int g1, const Area& ar, float* partial) const {
    const int dv = src_.dv;
    load_queries(q, ar.q);
    std::fill(ar.acc, ar.acc + int64_t(H_) * dv, 0.0f);
    std::fill(ar.m, ar.m + H_, kMaxFloor);
    std::fill(ar.l, ar.l + H_, 0.0f);
    const GqaAttendFn attend = ctx_->kernels->gqa_attend[wdt_ - 1];
    if (staged_)  // the kernel reads the rows where expand_group or stage_group_fp8 writes them
        for (int t = 0; t < kBlock; ++t) {
            ar.k1_rows[t] = ar.k1 + size_t(t) * src_.d1 * wes_;
            ar.v_rows[t] = ar.v + size_t(t) * dv * wes_;
        }
    int64_t count = 0;
    int64_t i = i0;
    // Units (block, group) run in order; while one is attended, the rows of
    // the next are prefetched (the next block's positions are read ahead).
    const int32_t* pt = a_->seqs[q.b].page_table;
    Located* cur = ar.rows;
    Located* next = ar.rows + 1;
    locate(pt, d_.page_size, ar.pos, next_visible(q.list, &i, i1, q.limit, ar.pos), cur);
    if (cur->n > 0) prefetch_group(g0, *cur);
    while (cur->n > 0) {
        const int n = cur->n;
        count += n;
        if (src_.d2 > 0) list_rope_rows(*cur, ar);
        locate(pt, d_.page_size, ar.pos, next_visible(q.list, &i, i1, q.limit, ar.pos), next);
        for (int t = 0; t < n_rep_; ++t) ar.limit[t] = n - 1;  // every listed row is visible
        for (int g = g0; g < g1; ++g) {
            if (a_->transient)
                expand_group(g, *cur, ar);
            else if (fp8_staged_)
                stage_group_fp8(g, *cur, ar);
            else
                list_group_rows(g, *cur, ar);
            if (fp8_lists_) gather_group_scales(g, *cur, ar);
            if (g + 1 < g1)
                prefetch_group(g + 1, *cur);
            else if (next->n > 0)
                prefetch_group(g0, *next);
            GqaItem it;
            it.rows = n_rep_;
            it.q = ar.q + int64_t(g) * n_rep_ * dk_;
            it.q_ld = dk_;
            it.q_scale = ctx_->query_scale();
            it.row_limit = ar.limit;
            it.page_table = nullptr;  // gathered tokens: no pages
            it.page_size = 0;
            it.t0 = 0;
            it.t1 = n;
            it.k1 = nullptr;  // the row lists instead
            it.k1_page_stride = 0;
            it.d1 = src_.d1;
            it.k2 = nullptr;
            it.k2_page_stride = 0;
            it.d2 = src_.d2;
            it.v = nullptr;
            it.v_page_stride = 0;
            it.dv = dv;
            it.k1_rows = ar.k1_rows;
            it.k2_rows = ar.k2_rows;
            it.v_rows = ar.v_rows;
            if (fp8_lists_) {
                it.k1_scale = ar.ks;
                it.v_scale = ar.vs;
            }
            it.acc = ar.kacc;
            it.m = ar.km;
            it.l = ar.kl;
            it.scratch = ar.kscratch;
            attend(it);
            const int64_t r0 = int64_t(g) * n_rep_;
            fold_into_state(n_rep_, dv, ar.kacc, ar.km, ar.kl, ar.acc + r0 * dv, ar.m + r0, ar.l + r0);
        }
        std::swap(cur, next);
    }
    const int h0 = g0 * n_rep_, h1 = g1 * n_rep_;
    if (partial == nullptr) {
        write_rows(q, ar.acc, ar.m, ar.l, count, h0, h1);
        return;
    }
    // acc [H][dv], m [H], l [H] and the count, as ar lays them out.
    std::copy(ar.acc + int64_t(h0) * dv, ar.acc + int64_t(h1) * dv, partial + int64_t(h0) * dv);
    std::copy(ar.m + h0, ar.m + h1, partial + int64_t(H_) * dv + h0);
    std::copy(ar.l + h0, ar.l + h1, partial + int64_t(H_) * (dv + 1) + h0);
    if (g0 == 0) partial[int64_t(H_) * (dv + 2)] = static_cast<float>(count);  // the same for every group
}

void GqaSparse::write_rows(const Query& q, const float* acc, const float* m, const float* l, int64_t count, int h0,
                           int h1) const {
    const int dv = src_.dv;
    for (int h = h0; h < h1; ++h) {
        // No visible entry: o = 0 (acc holds zeros), lse = -inf.
        const float mul = count > 0 ? 1.0f / l[h] : 0.0f;
        store_row_f32(acc + int64_t(h) * dv, mul, rows_.o(q.b, q.k, h), d_.io_dtype, dv);
        if (rows_.wants_lse())
            *rows_.lse(q.b, q.k, h) = count > 0 ? (m[h] + __builtin_log2f(l[h])) * kLn2 : -__builtin_huge_valf();
    }
}

// Merges the pieces of one query (acc, m, l, count each) into its output;
// the first piece's area is reused as the sum.
void GqaSparse::merge(const Query& q, const float* parts, int pieces) const {
    const int dv = src_.dv;
    const int64_t acc_n = int64_t(H_) * dv;
    float* sum = const_cast<float*>(parts);
    int64_t count = static_cast<int64_t>(parts[acc_n + 2 * H_]);
    for (int p = 1; p < pieces; ++p) {
        const float* x = parts + p * partial_floats_;
        fold_into_state(H_, dv, x, x + acc_n, x + acc_n + H_, sum, sum + acc_n, sum + acc_n + H_);
        count += static_cast<int64_t>(x[acc_n + 2 * H_]);
    }
    write_rows(q, sum, sum + acc_n, sum + acc_n + H_, count, 0, H_);
}

gqla_status GqaSparse::run() {
    ThreadPool& pool = ctx_->threads();
    const int threads = pool.participants();
    const int64_t total_q = a_->total_q;
    const int64_t chunk_q = std::max<int64_t>(1, kChunkRows / H_);
    const int64_t slots = partial_slots(threads);
    Buffers& buf = buffers();
    const size_t query_bytes = size_t(total_q) * sizeof(Query);
    const size_t shared_bytes = (query_bytes + 63) / 64 * 64 + size_t(slots * partial_floats_) * sizeof(float);
    const size_t area_floats = static_cast<size_t>(round16(sz_.total()));
    if (!reserve(buf.shared, shared_bytes) || !reserve(buf.per_thread, area_floats * sizeof(float) * threads))
        return fail(ctx_, GQLA_ERR_OUT_OF_MEMORY, "decode: cannot allocate %zu bytes of sparse-attention scratch",
                    shared_bytes + area_floats * sizeof(float) * threads);
    Query* queries = buf.shared.as<Query>();
    float* partials = reinterpret_cast<float*>(buf.shared.as<char>() + (query_bytes + 63) / 64 * 64);
    float* areas = buf.per_thread.as<float>();
    fill_queries(a_, queries);
    const int32_t K = a_->topk;
    for (int64_t q0 = 0; q0 < total_q; q0 += chunk_q) {
        const int64_t nq = std::min(chunk_q, total_q - q0);
        const int pieces = plan_pieces(nq, K, threads);
        // Lists too short to cut (a single decode step with a small K) leave
        // threads idle: their KV groups are then split between threads.
        const int64_t units = nq * pieces;
        const int parts = units >= threads ? 1 : static_cast<int>(std::min<int64_t>(G_, (threads + units - 1) / units));
        pool.parallel_for(units * parts, 1, [&](int64_t first, int64_t end, int tid) {
            const Area ar = area(areas + area_floats * size_t(tid));
            for (int64_t item = first; item < end; ++item) {
                const int64_t unit = item / parts, gp = item % parts;
                const int64_t qi = unit / pieces, p = unit % pieces;
                float* part = pieces > 1 ? partials + unit * partial_floats_ : nullptr;
                run_item(queries[q0 + qi], K * p / pieces, K * (p + 1) / pieces, static_cast<int>(G_ * gp / parts),
                         static_cast<int>(G_ * (gp + 1) / parts), ar, part);
            }
        });
        if (pieces < 2) continue;
        pool.parallel_for(nq, 1, [&](int64_t first, int64_t end, int) {
            for (int64_t qi = first; qi < end; ++qi)
                merge(queries[q0 + qi], partials + qi * pieces * partial_floats_, pieces);
        });
    }
    return GQLA_OK;
}

}  // namespace

gqla_status sparse_gqa_form(CpuContext* ctx, const gqla_decode_args* a) { return GqaSparse(ctx, a).run(); }

}  // namespace gqla::cpu

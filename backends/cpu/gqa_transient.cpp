// SPDX-License-Identifier: Apache-2.0
// The GQLA GQA_TRANSIENT form: the GQA form over latent rows up-projected
// for this call, without reading (or needing) the kept expanded cache.
//
// Per chunk of (sequence, KV group, query range) units, the positions each
// unit's rows may see are walked in pieces of kPieceTokens tokens, piece p
// of every unit in the same wave:
//   expand   each unit's piece is up-projected once into a shared slot:
//            K_c = c W_UK[g]^T, V = c W_UV[g]^T rounded to the cache dtype
//            as the kept expanded cache rounds them, next to a copy of kr
//            (items: slot x kExpandTokens tokens);
//   attend   every tile of the unit that sees the piece runs the GQA kernel
//            over the slot and folds the result into its rows' running
//            (acc, m, l) in the workspace through the log-sum-exp
//            (items: slot x tile; a unit is in a wave at most once, so no
//            two items touch the same rows);
// then the rows are normalised into o and lse. So each latent token is
// up-projected once per group for all the queries of a unit: once per call
// unless a sequence's queries x n_rep exceed the chunk's rows (16384 by
// default), which cuts them into query ranges that each expand the
// positions they see again.
#include <algorithm>
#include <cstring>

#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/decode_plan.hpp"
#include "backends/cpu/gqa_form.hpp"
#include "backends/cpu/io_rows.hpp"
#include "backends/cpu/thread_pool.hpp"

namespace gqla::cpu {

namespace {

constexpr float kMaxFloor = -1e30f;  // empty running state, as the kernels start theirs
// A slot is one "page" of kPieceTokens tokens for the kernels.
const int32_t kSlotPage[1] = {0};

// Where the parts of one slot live: [P][d_c] keys, [P][d_v] values, [P][d_r]
// rope keys, elements of the cache dtype.
struct Slot {
    char* kc;
    char* v;
    char* kr;
};

// The slots' element type: the cache dtype, except for an 8-bit cache,
// whose up-projected rows are kept in bf16 (the per-call rows then need no
// scales, and the rope key is bf16 already).
gqla_dtype slot_dtype(const CpuContext* ctx) { return ctx->fp8() ? GQLA_DTYPE_BF16 : ctx->desc.cache_dtype; }

Slot slot_at(const CpuContext* ctx, int s) {
    const gqla_backend_desc& d = ctx->desc;
    const WorkspaceLayout& L = ctx->ws_layout;
    char* base = reinterpret_cast<char*>(ctx->workspace.as<float>() + L.gqa.slots_off + L.slot_floats * size_t(s));
    const size_t es = dtype_size(slot_dtype(ctx));
    Slot sl;
    sl.kc = base;
    sl.v = sl.kc + size_t(kPieceTokens) * d.nope_dim * es;
    sl.kr = sl.v + size_t(kPieceTokens) * d.value_dim * es;
    return sl;
}

// Up-projects the latent rows of positions [t, t + n) (n <= kExpandTokens)
// of sequence `seq` for group g into slot rows from t - piece_t0, and copies
// their rope keys. The kernel table's expand reads W's rows of the group in
// f32, or in bf16 where that copy is exact; a context that keeps only W^T
// in f32 (bf16 cache without oneDNN, weights not bf16) runs the table's f32
// GEMM on it instead.
void expand_rows(const CpuContext* ctx, const LayerWeights& lw, int32_t layer, const gqla_decode_seq& seq, int g,
                 int64_t t, int n, int64_t piece_t0, const Slot& slot, float* scratch) {
    const gqla_backend_desc& d = ctx->desc;
    const int r = d.latent_dim, dc = d.nope_dim, dv = d.value_dim, dr = d.rope_dim, N = dc + dv;
    const int64_t P = d.page_size;
    const size_t es = ctx->elem_size, kr_es = ctx->kept[1].elem;
    const gqla_dtype sdt = slot_dtype(ctx);
    const size_t ses = dtype_size(sdt);
    gqla_dtype cdt = d.cache_dtype;
    const Pool& cp = ctx->kept[0];
    const char* cpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[0], layer));
    const char* krpool = static_cast<const char*>(ctx->pool_layer(ctx->kept[1], layer));
    float* out = scratch + expand_scratch_floats(r, N);  // [tokens][N]
    const void* latent[kExpandTokens] = {};
    for (int j = 0; j < n; ++j) {
        const int64_t pos = t + j;
        latent[j] = cpool + (seq.page_table[pos / P] * cp.page_elems + pos % P * r) * es;
    }
    if (ctx->fp8()) {
        // e4m3 rows widened with their block scales, then up-projected as f32.
        float* lat32 = out + int64_t(kExpandTokens) * N;  // [tokens][r]
        for (int j = 0; j < n; ++j) {
            const int64_t pos = t + j;
            ctx->kernels->fp8_rows(static_cast<const uint8_t*>(latent[j]), r,
                                   cp.scales(cpool, seq.page_table[pos / P], pos % P), kFp8LatentBlockElems,
                                   lat32 + int64_t(j) * r);
            latent[j] = lat32 + int64_t(j) * r;
        }
        cdt = GQLA_DTYPE_F32;
    }
    expand_latent_rows(ctx, lw, g, n, latent, cdt, out, scratch);
    const int64_t row0 = t - piece_t0;
    for (int j = 0; j < n; ++j) {
        const int64_t row = row0 + j, pos = t + j;
        round_row(out + int64_t(j) * N, slot.kc + row * dc * ses, sdt, dc);
        round_row(out + int64_t(j) * N + dc, slot.v + row * dv * ses, sdt, dv);
        std::memcpy(slot.kr + row * dr * ses,
                    krpool + (seq.page_table[pos / P] * ctx->kept[1].page_elems + pos % P * dr) * kr_es,
                    size_t(dr) * ses);
    }
}

}  // namespace

// state = state (+) tile result, through the log-sum-exp (log2 domain).
void fold_into_state(int rows, int dv, const float* acc, const float* m, const float* l, float* s_acc, float* s_m,
                     float* s_l) {
    for (int i = 0; i < rows; ++i) {
        const float mx = std::max(s_m[i], m[i]);
        const float ws = __builtin_exp2f(s_m[i] - mx), wt = __builtin_exp2f(m[i] - mx);
        s_l[i] = s_l[i] * ws + l[i] * wt;
        s_m[i] = mx;
        float* sa = s_acc + int64_t(i) * dv;
        const float* ta = acc + int64_t(i) * dv;
        for (int e = 0; e < dv; ++e) sa[e] = sa[e] * ws + ta[e] * wt;
    }
}

void expand_latent_rows(const CpuContext* ctx, const LayerWeights& lw, int g, int n, const void* const* latent,
                        gqla_dtype cdt, float* out, float* scratch) {
    const int r = ctx->desc.latent_dim, N = ctx->desc.nope_dim + ctx->desc.value_dim;
    const bool exact16 = lw.bf16() && lw.w16_exact;
    if (exact16 || !lw.w.empty()) {
        ExpandItem e;
        e.tokens = n;
        e.latent = latent;
        e.r = r;
        e.w = exact16 ? static_cast<const void*>(lw.w16.as<uint16_t>() + int64_t(g) * N * r)
                      : static_cast<const void*>(lw.w.as<float>() + int64_t(g) * N * r);
        e.w_bf16 = exact16 ? 1 : 0;
        e.N = N;
        e.out = out;
        e.scratch = scratch;
        ctx->kernels->expand[cdt - 1](e);
    } else {
        // Only W^T is kept in f32 (a cache dtype without an exact bf16 W).
        for (int j = 0; j < n; ++j) load_row_f32(latent[j], cdt, r, 1.0f, scratch + int64_t(j) * r);
        ctx->kernels->gemm(n, N, r, scratch, r, lw.wt.as<float>() + int64_t(g) * N, ctx->expanded_width(), out, N);
    }
}

gqla_status decode_gqa_transient(CpuContext* ctx, const gqla_decode_args* a) {
    const gqla_backend_desc& d = ctx->desc;
    const LayerWeights& lw = ctx->weights[static_cast<size_t>(a->layer)];
    if (!lw.set()) return fail(ctx, GQLA_ERR_INVALID_STATE, "decode: weights of layer %d are not set", a->layer);
    const WorkspaceLayout& L = ctx->ws_layout;
    const PathWorkspace& W = L.gqa;
    const int n_rep = ctx->n_rep();
    const int dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim, dk = dc + dr;
    float* ws = ctx->workspace.as<float>();
    float* q32 = ws + W.q_off;
    float* s_acc = ws + W.state_off;  // [rows_cap][dv], then m and l [rows_cap]
    float* s_m = s_acc + W.rows_cap * dv;
    float* s_l = s_m + W.rows_cap;
    DecodePlan plan = plan_arrays(ws, W);
    int32_t* active = plan.order;  // units of the current wave
    const CallRows rows{a};
    GqaChunker chunker(ctx, rows, ws);
    ThreadPool& pool = ctx->threads();
    GqaChunk c;
    while (chunker.next(c)) {
        load_chunk_queries(ctx, rows, c, dk, q32);
        pool.parallel_for_spread(c.rows, [&](int64_t first, int64_t end, int) {
            std::fill(s_acc + first * dv, s_acc + end * dv, 0.0f);
            std::fill(s_m + first, s_m + end, kMaxFloor);
            std::fill(s_l + first, s_l + end, 0.0f);
        });
        // Positions a unit's rows may see: those of its last tile.
        auto unit_extent = [&](const GqaUnit& u) { return c.tiles[u.tile0 + u.tiles - 1].extent; };
        int64_t pieces = 0;
        for (int32_t u = 0; u < c.num_units; ++u)
            pieces = std::max(pieces, (unit_extent(c.units[u]) + kPieceTokens - 1) / kPieceTokens);

        for (int64_t p = 0; p < pieces; ++p) {
            const int64_t t0 = p * kPieceTokens;
            int32_t num_active = 0;
            for (int32_t u = 0; u < c.num_units; ++u)
                if (unit_extent(c.units[u]) > t0) active[num_active++] = u;
            for (int32_t first_slot = 0; first_slot < num_active; first_slot += L.slots) {
                const int32_t slots = std::min(L.slots, num_active - first_slot);
                const int32_t* wave = active + first_slot;
                constexpr int kBlocks = kPieceTokens / kExpandTokens;
                pool.parallel_for(int64_t(slots) * kBlocks, 1, [&](int64_t first, int64_t end, int tid) {
                    float* scratch = ws + W.thread_off + W.thread_floats * size_t(tid);
                    for (int64_t idx = first; idx < end; ++idx) {
                        const int s = static_cast<int>(idx / kBlocks);
                        const GqaUnit& u = c.units[wave[s]];
                        const int64_t t = t0 + idx % kBlocks * kExpandTokens;
                        const int64_t n = std::min<int64_t>(kExpandTokens, unit_extent(u) - t);
                        if (n <= 0) continue;
                        expand_rows(ctx, lw, a->layer, a->seqs[u.b], u.g, t, static_cast<int>(n), t0, slot_at(ctx, s),
                                    scratch);
                    }
                });
                // The tiles that see this piece, as (tile, slot) items.
                int32_t num_items = 0;
                for (int32_t s = 0; s < slots; ++s) {
                    const GqaUnit& u = c.units[wave[s]];
                    for (int32_t ti = u.tile0; ti < u.tile0 + u.tiles; ++ti)
                        if (c.tiles[ti].extent > t0)
                            plan.items[num_items++] = WorkItem{
                                ti, s, 0, std::min<int64_t>(kPieceTokens, c.tiles[ti].extent - t0), c.tiles[ti].rows};
                }
                pool.parallel_for(num_items, 1, [&](int64_t first, int64_t end, int tid) {
                    const GqaThreadArea area = gqa_thread_area(ctx, tid);
                    for (int64_t idx = first; idx < end; ++idx) {
                        const WorkItem& w = plan.items[idx];
                        const GqaTile& t = c.tiles[w.unit];
                        const GqaUnit& u = c.units[t.unit];
                        const Slot sl = slot_at(ctx, w.partial);
                        tile_limits(rows, n_rep, u, t, t0, area.limit);
                        GqaItem it;
                        it.rows = t.rows;
                        it.q = q32 + (u.row0 + t.row0) * dk;
                        it.q_ld = dk;
                        it.q_scale = ctx->query_scale();
                        it.row_limit = area.limit;
                        it.page_table = kSlotPage;
                        it.page_size = kPieceTokens;
                        it.t0 = w.t0;
                        it.t1 = w.t1;
                        it.k1 = sl.kc;
                        it.k1_page_stride = 0;
                        it.d1 = dc;
                        it.k2 = sl.kr;
                        it.k2_page_stride = 0;
                        it.d2 = dr;
                        it.v = sl.v;
                        it.v_page_stride = 0;
                        it.dv = dv;
                        it.acc = area.acc;
                        it.m = area.m;
                        it.l = area.l;
                        it.scratch = area.scratch;
                        gqa_kernel(ctx, t, slot_dtype(ctx))(it);
                        const int64_t row = u.row0 + t.row0;
                        fold_into_state(t.rows, dv, area.acc, area.m, area.l, s_acc + row * dv, s_m + row, s_l + row);
                    }
                });
            }
        }
        pool.parallel_for_spread(c.num_tiles, [&](int64_t first, int64_t end, int) {
            for (int64_t ti = first; ti < end; ++ti) {
                const GqaTile& t = c.tiles[ti];
                const GqaUnit& u = c.units[t.unit];
                const int64_t row = u.row0 + t.row0;
                write_tile_output(rows, n_rep, u, t, dv, s_acc + row * dv, s_m + row, s_l + row, d.io_dtype);
            }
        });
    }
    return GQLA_OK;
}

}  // namespace gqla::cpu

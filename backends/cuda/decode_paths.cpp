// SPDX-License-Identifier: Apache-2.0
// See decode_paths.hpp. Per path:
//   GQA kind / GQLA GQA path : one attention launch (+ combine when split)
//   GQLA absorb path         : pack q (unless the projection and the latent
//                              kernel can read q in place; query_in_place)
//                              -> cuBLAS q~ = W_UK^T qc (batched over weight
//                              blocks: groups, or heads with per-head copies)
//                              -> MQA attention over the latent -> cuBLAS
//                              o = W_UV o~ (-> unpack, unless the output
//                              columns are evenly spaced in o); the
//                              projections take 16-bit operands for 16-bit caches.
// Nothing here allocates or synchronizes, so a call can be captured in a
// CUDA graph.
#include "decode_paths.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "absorb_kernels.hpp"
#include "batched_gemm.hpp"
#include "core/dtype.hpp"
#include "decode_plan.hpp"
#include "latent_wgmma.hpp"
#include "fp8_widening.hpp"
#include "prefill_wgmma.hpp"

namespace gqla::cuda {

namespace {

RowAddress user_rows(const Rows3& r, int32_t n_rep) {
    return RowAddress{r.s[0], r.s[1], n_rep * r.s[2], r.s[2], n_rep, 1};
}
// Absorb workspace in the projections' order: row ((g*B + b)*s_q + qi)*n_rep + hi,
// `dim` apart, for weight blocks g of n_rep heads (1: one block per head).
RowAddress group_major_rows(int64_t batch, int64_t q_len, int32_t n_rep, int64_t dim) {
    return RowAddress{q_len * n_rep * dim, n_rep * dim, batch * q_len * n_rep * dim, dim, n_rep, 1};
}

// The absorb projections see block g's column c = (b*s_q + qi)*n_rep + hi
// of q or o at x + b*sB + qi*sQ + (g*n_rep + hi)*sH. With one head per
// block (MLA, or per-head weight copies: n_rep == 1) that is x + g*sH + c*ld,
// evenly spaced, when s_q == 1 (ld = sB) or the tokens of a sequence are
// evenly spaced (sB == s_q*sQ, ld = sQ); cuBLAS also wants ld >= dim.
bool evenly_spaced_columns(const Rows3& x, int64_t q_len, int n_rep, int64_t dim, int64_t* ld) {
    if (n_rep != 1) return false;
    if (q_len == 1)
        *ld = x.s[0];
    else if (x.s[0] == q_len * x.s[1])
        *ld = x.s[1];
    else
        return false;
    return *ld >= dim && *ld <= INT32_MAX;
}

// Whether the absorb path can leave q where it lies: the query projection
// reads its nope columns (evenly spaced, in the projections' dtype) and the
// latent kernel its rope columns (16-byte pieces), so the pack pass, a
// launch of its own, drops out. Sets *ldq for the projection.
bool query_in_place(const Session& s, const AttentionParams& p, const Rows3& q, int64_t q_len, int n_rep,
                    int64_t nope_dim, gqla_dtype work, int64_t* ldq) {
    if (!s.use_query_in_place || !plans_latent_kernel(s, p) || q.dtype != work) return false;
    if (!evenly_spaced_columns(q, q_len, n_rep, nope_dim, ldq)) return false;
    const int64_t es = static_cast<int64_t>(dtype_size(work));
    const auto aligned = [](int64_t bytes) { return bytes % 16 == 0; };
    return aligned(static_cast<int64_t>(reinterpret_cast<uintptr_t>(q.data)) + nope_dim * es) && aligned(q.s[0] * es) &&
           aligned(q.s[2] * es) && (q_len == 1 || aligned(q.s[1] * es));
}

// A sparse call as the kernels run it: every query row its own launch
// sequence of one query over its compacted list (compact_sparse_lists ran
// before), the rows' addresses unfolded back to (sequence, query) by
// RowAddress::fold. The kernels' page-table paths then serve sparse rows
// unchanged; only gathering single rows (no TMA boxes) differs.
gqla_decode_args unfold_sparse_rows(Session& s, const gqla_decode_args& a, AttentionParams* p) {
    std::vector<gqla_decode_seq>& rows = s.sparse_rows;  // reused: no allocation once grown
    rows.clear();
    for (int b = 0; b < a.batch; ++b)
        for (int qi = 0; qi < a.q_len; ++qi) {
            gqla_decode_seq r = a.seqs[b];
            // What the planner sizes splits by: at most topk tokens, nor more than the query sees.
            r.length = std::min<int64_t>(a.topk, a.seqs[b].length - a.q_len + qi + 1);
            r.q_len = 1;
            r.q_row = static_cast<int64_t>(b) * a.q_len + qi;
            rows.push_back(r);
        }
    gqla_decode_args v = a;
    v.batch = a.batch * a.q_len;
    v.q_len = 1;
    v.seqs = rows.data();
    p->qa.fold = p->oa.fold = p->q_rope_a.fold = a.q_len;
    p->q_len = 1;
    p->rows = p->heads_per_group;
    p->sparse_tokens = s.sparse_tokens.get<int64_t>();
    p->sparse_counts = s.sparse_counts.get<int32_t>();
    p->sparse_stride = a.topk;
    return v;
}

// Launches attention (+ combine) over the whole batch in chunks of kMaxLaunchBatch.
// narrow_maps: TMA maps of the layer's pools for the narrow kernel, or null.
// slots_by_call_index: p's page table and lengths are indexed by each
// sequence's place in the call (widened 8-bit pages), not by its slot.
void run_attention(Session& s, AttentionParams p, const gqla_decode_args& call, int groups,
                   const NarrowTmaMaps* narrow_maps = nullptr, bool slots_by_call_index = false) {
    const bool sparse = call.indices.data != nullptr;
    const gqla_decode_args a = sparse ? unfold_sparse_rows(s, call, &p) : call;
    if (sparse) narrow_maps = nullptr;  // gathered rows, not page boxes
    int64_t call_max_len = 0;
    for (int i = 0; i < a.batch; ++i) call_max_len = std::max<int64_t>(call_max_len, a.seqs[i].length);
    const AttentionPlan base_plan =
        plan_attention(s, p, narrow_maps && narrow_maps->valid, std::min(kMaxLaunchBatch, a.batch), call_max_len);
    const int row_blocks = (p.rows + base_plan.rows_per_cta - 1) / base_plan.rows_per_cta;
    const int64_t per_split_rows = static_cast<int64_t>(a.batch) * a.q_len * p.num_heads;
    const int combine_cap = static_cast<int>(std::clamp<int64_t>(s.part_rows / per_split_rows, 1, kMaxSplits));
    p.part_o = s.part_o.get<float>();
    p.part_lse2 = s.part_lse2.get<float>();
    p.part_batch = a.batch;
    for (int first = 0; first < a.batch; first += kMaxLaunchBatch) {
        const int nb = std::min(kMaxLaunchBatch, a.batch - first);
        int64_t max_len = 0;
        for (int i = 0; i < nb; ++i) {
            p.slots[i] = slots_by_call_index ? first + i : a.seqs[first + i].slot;
            max_len = std::max<int64_t>(max_len, a.seqs[first + i].length);
        }
        p.batch = nb;
        p.batch_offset = first;
        const int64_t base_ctas = static_cast<int64_t>(nb) * groups * row_blocks;
        AttentionPlan plan = base_plan;
        fit_small_launch(s, p, base_ctas, &plan);
        double cost = 0.0;
        int splits = choose_splits(s, plan, base_ctas, max_len, combine_cap, &cost);
        fit_wide_ctas(s, p, base_ctas, max_len, combine_cap, cost, &plan, &splits);
        bool cluster = cluster_merge_fits(s, plan, base_ctas, splits);
        // Splits past the partials' capacity were planned for a cluster merge;
        // where such a cluster does not fit after all, plan for the combine.
        if (splits > combine_cap && !cluster) {
            splits = choose_splits(s, plan, base_ctas, max_len, combine_cap, nullptr, /*clusters=*/false);
            cluster = cluster_merge_fits(s, plan, base_ctas, splits);
        }
        p.num_splits = splits;
        p.cluster_merge = cluster ? 1 : 0;
        dim3 grid(groups * row_blocks, nb, p.num_splits);
        const gqla_dtype cache = static_cast<gqla_dtype>(p.cache_dtype);  // what this launch reads
        if (s.trace)
            std::fprintf(
                stderr,
                "gqla-cuda: attention %s rows=%d grid=(%u,%u,%u) smem=%d blocks/SM=%d stages=%d max_len=%lld%s%s%s\n",
                kernel_name(plan), p.rows, grid.x, grid.y, grid.z, plan.smem_bytes, plan.blocks_per_sm, plan.stages,
                (long long)max_len, p.cluster_merge ? " cluster-merge" : "", p.q_rope ? " q-in-place" : "",
                slots_by_call_index ? " widened-fp8" : "");
        if (plan.prefill_wgmma)
            launch_prefill_wgmma(cache, p, narrow_maps ? *narrow_maps : NarrowTmaMaps{}, s.prefill_turns, grid,
                                 s.stream);
        else if (plan.latent_wgmma)
            launch_latent_wgmma(cache, p,
                                s.latent_maps.empty() ? LatentTmaMaps{} : s.latent_maps[static_cast<size_t>(a.layer)],
                                grid, plan.rows_per_cta, s.latent_dependent_launch, s.stream);
        else if (plan.narrow)
            launch_attention_narrow(cache, plan.stages, plan.narrow_rows, plan.narrow_dims, plan.narrow_warps,
                                    plan.narrow_row_blocks, p, narrow_maps ? *narrow_maps : NarrowTmaMaps{}, grid,
                                    plan.smem_bytes, s.stream);
        else if (plan.per_warp)
            launch_attention_warp(cache, plan.stages, p, grid, plan.smem_bytes, s.stream);
        else if (plan.simt)
            launch_attention_simt(p, grid, plan.smem_bytes, s.stream);
        else
            launch_attention_mma(plan.variant, cache, p, grid, plan.smem_bytes, s.stream);
        if (p.num_splits > 1 && !p.cluster_merge) {
            CombineParams c{};
            c.batch = nb;
            c.batch_offset = first;
            c.q_len = p.q_len;
            c.num_heads = p.num_heads;
            c.dv = p.v.dim;
            c.num_splits = p.num_splits;
            c.part_batch = p.part_batch;
            c.part_o = p.part_o;
            c.part_lse2 = p.part_lse2;
            c.o = p.o;
            c.o_dtype = p.o_dtype;
            c.oa = p.oa;
            c.lse = p.lse;
            c.lse_sB = p.lse_sB;
            c.lse_sQ = p.lse_sQ;
            c.lse_sH = p.lse_sH;
            launch_combine(c, s.dependent_launch, s.stream);
        }
    }
}

AttentionParams common_params(Session& s, const gqla_decode_args& a) {
    AttentionParams p{};
    p.cache_dtype = s.desc.cache_dtype;
    p.page_size = s.desc.page_size;
    p.page_shift = page_shift_of(s.desc.page_size);
    p.page_tables = s.page_tables.get<int32_t>();
    p.table_stride = s.table_stride;
    p.lengths = s.lengths.get<int32_t>() + static_cast<int64_t>(a.layer) * s.desc.max_sequences;
    p.q_len = a.q_len;
    p.num_heads = s.desc.num_heads;
    p.scale_log2 = s.desc.softmax_scale * 1.4426950408889634f;
    return p;
}

}  // namespace

void decode_gqa_path(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
                     const int64_t lse_s[3]) {
    const gqla_backend_desc& d = s.desc;
    const int n_rep = d.num_heads / d.num_kv_heads;
    AttentionParams p = common_params(s, a);
    const std::vector<NarrowTmaMaps>* maps = &s.narrow_maps;  // per layer, where the narrow kernel may use TMA
    if (d.kind == GQLA_KIND_GQA) {
        p.k1 = pool_view(s, s.pool_a, a.layer, d.num_kv_heads, d.head_dim, false);
        p.k2 = p.k1;
        p.k2.dim = 0;
        p.v = pool_view(s, s.pool_b, a.layer, d.num_kv_heads, d.value_dim, false);
    } else if (a.transient) {
        // The transient pool holds one layer (this call's rows, at the
        // sequences' own pages); the rope key is the layer's kept KR.
        if (!s.transient_kc.get())
            throw BackendError(GQLA_ERR_INTERNAL, "CUDA decode: GQA_TRANSIENT attention before its pool was filled");
        // Its rows are in the projection dtype (bf16 for an 8-bit cache,
        // whose rope key is bf16 too): the launch reads that dtype.
        p.k1 = pool_view(s, s.transient_kc, 0, d.num_kv_heads, d.nope_dim, false, transient_format(s));
        p.k2 = pool_view(s, s.pool_b, a.layer, 1, d.rope_dim, true, rope_format(s));
        p.v = pool_view(s, s.transient_ve, 0, d.num_kv_heads, d.value_dim, false, transient_format(s));
        p.cache_dtype = transient_format(s).dtype;
        maps = &s.transient_maps;
    } else {
        if (!s.pool_kc.get())
            throw BackendError(GQLA_ERR_INVALID_STATE,
                               "CUDA decode: GQA path requested but the expanded cache is not enabled");
        p.k1 = pool_view(s, s.pool_kc, a.layer, d.num_kv_heads, d.nope_dim, false);
        p.k2 = pool_view(s, s.pool_b, a.layer, 1, d.rope_dim, true, rope_format(s));
        p.v = pool_view(s, s.pool_ve, a.layer, d.num_kv_heads, d.value_dim, false);
    }
    p.heads_per_group = n_rep;
    p.rows = a.q_len * n_rep;
    p.q = q.data;
    p.q_dtype = q.dtype;
    p.qa = user_rows(q, n_rep);
    p.o = o.data;
    p.o_dtype = o.dtype;
    p.oa = user_rows(o, n_rep);
    p.lse = lse;
    p.lse_sB = lse_s[0];
    p.lse_sQ = lse_s[1];
    p.lse_sH = lse_s[2];
    const size_t layer = static_cast<size_t>(a.layer);
    const NarrowTmaMaps* layer_maps = layer < maps->size() ? &(*maps)[layer] : nullptr;
    const bool widened = widen_fp8_for_prefill(s, a, &p, &layer_maps);
    run_attention(s, p, a, d.num_kv_heads, layer_maps, widened);
}

void decode_absorb_path(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
                        const int64_t lse_s[3]) {
    const gqla_backend_desc& d = s.desc;
    const size_t layer = static_cast<size_t>(a.layer);
    const void* w = s.weights[layer].get();
    if (!w)
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA decode: weights of layer " + std::to_string(a.layer) + " not set");
    // The projections run batched over weight blocks of n_rep heads each.
    const int n_rep = s.heads_per_weight_block(), blocks = d.num_heads / n_rep;
    const int r = d.latent_dim, dc = d.nope_dim, dr = d.rope_dim, dv = d.value_dim;
    const int64_t rows_g = static_cast<int64_t>(a.batch) * a.q_len * n_rep;  // GEMM columns per block
    const int64_t w_group = static_cast<int64_t>(dc + dv) * r;
    // Queries, latent queries and latent outputs are in the projections' dtype.
    const gqla_dtype work = projection_dtype(s);
    const cudaDataType_t work_cu = projection_cuda_type(s);

    AttentionParams p = common_params(s, a);
    p.k1 = pool_view(s, s.pool_a, a.layer, 1, r, true, latent_format(s));
    p.k2 = pool_view(s, s.pool_b, a.layer, 1, dr, true, rope_format(s));
    p.v = p.k1;
    p.v_aliases_k1 = 1;
    p.heads_per_group = d.num_heads;
    p.rows = a.q_len * d.num_heads;
    p.q = s.q_att.get();
    p.q_dtype = work;
    p.qa = group_major_rows(a.batch, a.q_len, n_rep, r + dr);
    p.o = s.o_att.get();
    p.o_dtype = work;
    p.oa = group_major_rows(a.batch, a.q_len, n_rep, r);
    p.lse = lse;
    p.lse_sB = lse_s[0];
    p.lse_sQ = lse_s[1];
    p.lse_sH = lse_s[2];

    // q_nope in block-major rows, unless it can be read where it lies.
    AbsorbLayout lay{a.batch, a.q_len, d.num_heads, n_rep, dc, dr, r, dv};
    int64_t ldq = 0;
    const bool q_in_place = query_in_place(s, p, q, a.q_len, n_rep, dc, work, &ldq);
    if (q_in_place) {
        p.q_rope = static_cast<const unsigned char*>(q.data) + static_cast<int64_t>(dc) * dtype_size(work);
        p.q_rope_a = user_rows(q, n_rep);
    } else {
        launch_absorb_pack_q(lay, q.data, q.dtype, q.s, s.q_nope.get(), s.q_att.get(), work, s.stream);
    }

    // q~ [rows][r] (ld r + d_r) = q_nope [rows][d_c] . W_UK[g] [d_c][r], f32
    // accumulation (f32 caches keep f32 products, no TF32: their tolerance is 1e-5).
    BatchedGemm qp;
    qp.m = r;
    qp.n = static_cast<int>(rows_g);
    qp.k = dc;
    qp.batch = blocks;
    qp.a = w;
    qp.a_type = work_cu;
    qp.lda = r;
    qp.stride_a = w_group;
    qp.b = q_in_place ? q.data : s.q_nope.get();
    qp.b_type = work_cu;
    qp.ldb = q_in_place ? ldq : dc;
    qp.stride_b = q_in_place ? q.s[2] : rows_g * dc;
    qp.c = s.q_att.get();
    qp.c_type = work_cu;
    qp.ldc = r + dr;
    qp.stride_c = rows_g * (r + dr);
    s.gemms.run(s.stream, qp, "absorb query projection");

    run_attention(s, p, a, 1);

    // o [rows][d_v] = o~ [rows][r] . W_UV[g]^T: straight into the caller's o
    // where a group's columns are evenly spaced there and o's dtype is one
    // cuBLAS writes from these operands (theirs or f32), else into f32 rows
    // that a reorder pass scatters.
    const void* w_uv = static_cast<const unsigned char*>(w) + static_cast<int64_t>(dc) * r * dtype_size(work);
    int64_t ldo = 0;
    const bool direct =
        (o.dtype == work || o.dtype == GQLA_DTYPE_F32) && evenly_spaced_columns(o, a.q_len, n_rep, dv, &ldo);
    BatchedGemm op;
    op.trans_a = CUBLAS_OP_T;
    op.m = dv;
    op.n = static_cast<int>(rows_g);
    op.k = r;
    op.batch = blocks;
    op.a = w_uv;
    op.a_type = work_cu;
    op.lda = r;
    op.stride_a = w_group;
    op.b = s.o_att.get();
    op.b_type = work_cu;
    op.ldb = r;
    op.stride_b = rows_g * r;
    op.c = direct ? o.data : s.o_proj.get();
    op.c_type = direct ? cuda_type(static_cast<gqla_dtype>(o.dtype)) : CUDA_R_32F;
    op.ldc = direct ? ldo : dv;
    op.stride_c = direct ? o.s[2] : rows_g * dv;
    s.gemms.run(s.stream, op, "absorb output projection");
    if (!direct) launch_absorb_unpack_o(lay, s.o_proj.get<float>(), o.data, o.dtype, o.s, s.stream);
}

}  // namespace gqla::cuda

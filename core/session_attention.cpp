// SPDX-License-Identifier: Apache-2.0
// Attention calls (gqla_decode and gqla_attention, dense or sparse with
// `indices`, docs/sparse-attention.md): validate, fill the preallocated
// per-sequence array, pick the form the call runs on, call the backend.
// Nothing here allocates on success (a kept-cache switch under the
// session's AUTO does, once, when the cost model changes its mind).
#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/error.hpp"
#include "core/session.hpp"

namespace gqla {

namespace {

const char* path_name(gqla_path p) {
    switch (p) {
        case GQLA_PATH_AUTO:
            return "AUTO";
        case GQLA_PATH_GQA:
            return "GQA";
        case GQLA_PATH_ABSORB:
            return "ABSORB";
        case GQLA_PATH_GQA_TRANSIENT:
            return "GQA_TRANSIENT";
    }
    return "?";
}

// Positions the n queries of a sequence of `length` tokens attend in a
// sparse call: query k sees length - n + 1 + k of them, at most topk.
double sparse_positions(int64_t length, int64_t n, int32_t topk) {
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(std::min<int64_t>(topk, length - n + 1 + k));
    return sum;
}

// A gqla_attention call's path (gqla_decode runs on the session's): a
// gqla_path, and on a GQA session one that session runs.
void check_call_path(const Session::AttentionCall& c, bool gqa) {
    if (c.on_session_path) return;
    const int path_value = c.path_value;
    if (path_value < GQLA_PATH_AUTO || path_value > GQLA_PATH_GQA_TRANSIENT)
        fail(GQLA_ERR_INVALID_ARGUMENT, "path: expected GQLA_PATH_AUTO, _GQA, _ABSORB or _GQA_TRANSIENT (0..3), got %d",
             path_value);
    if (gqa && path_value != GQLA_PATH_AUTO && path_value != GQLA_PATH_GQA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "path: GQLA_PATH_%s needs a GQLA session (this session is GQA)",
             path_name(static_cast<gqla_path>(path_value)));
}

// The query rows of one call as checked: the views of q, o and lse.
struct CallQueries {
    int64_t s_q = 0;  // uniform calls; 0 when ragged
    int64_t total_q = 0;
    int32_t max_len = 0;
    gqla_view q{}, o{}, lse{};
};

// Uniform queries: s_q from q's shape; q, o and lse of [batch, s_q, ...].
CallQueries check_uniform_queries(const Session::AttentionCall& c, const gqla_config& cfg, const DevicePlacement& where,
                                  const char* dq_name) {
    CallQueries r;
    const TensorSpec q_spec{
        "q",          4,    {"batch", "s_q", "num_heads", dq_name}, {c.batch, kAnyExtent, cfg.num_heads, cfg.head_dim},
        cfg.io_dtype, false};
    r.q = check_tensor(c.q, q_spec, where);
    r.s_q = r.q.shape[1];
    if (r.s_q < 1 || r.s_q > cfg.max_q_len)
        fail(GQLA_ERR_INVALID_ARGUMENT, "q: shape[1] (s_q) expected 1..%d (config.max_q_len), got %lld", cfg.max_q_len,
             static_cast<long long>(r.s_q));
    r.total_q = r.s_q * c.batch;
    if (r.total_q > cfg.max_q_tokens)
        fail(GQLA_ERR_INVALID_ARGUMENT, "q: batch %d x s_q %lld = %lld query tokens exceed config.max_q_tokens %lld",
             c.batch, static_cast<long long>(r.s_q), static_cast<long long>(r.total_q),
             static_cast<long long>(cfg.max_q_tokens));
    r.max_len = static_cast<int32_t>(r.s_q);
    const TensorSpec o_spec{
        "o",          4,    {"batch", "s_q", "num_heads", "value_dim"}, {c.batch, r.s_q, cfg.num_heads, cfg.value_dim},
        cfg.io_dtype, false};
    r.o = check_tensor(c.o, o_spec, where);
    if (c.lse != nullptr) {
        const TensorSpec lse_spec{"lse",          3,    {"batch", "s_q", "num_heads"}, {c.batch, r.s_q, cfg.num_heads},
                                  GQLA_DTYPE_F32, false};
        r.lse = check_tensor(c.lse, lse_spec, where);
    }
    return r;
}

// Ragged queries: q_lens, then q, o and lse of [sum(q_lens), ...].
CallQueries check_ragged_queries(const Session::AttentionCall& c, const gqla_config& cfg, const DevicePlacement& where,
                                 const char* dq_name) {
    CallQueries r;
    for (int32_t i = 0; i < c.batch; ++i) {
        const int32_t n = c.q_lens[i];
        if (n < 1 || n > cfg.max_q_len)
            fail(GQLA_ERR_INVALID_ARGUMENT, "q_lens[%d]: expected 1..%d (config.max_q_len), got %d", i, cfg.max_q_len,
                 n);
        r.total_q += n;
        r.max_len = std::max(r.max_len, n);
    }
    if (r.total_q > cfg.max_q_tokens)
        fail(GQLA_ERR_INVALID_ARGUMENT, "q_lens: %lld query tokens in all exceed config.max_q_tokens %lld",
             static_cast<long long>(r.total_q), static_cast<long long>(cfg.max_q_tokens));
    const TensorSpec q_spec{
        "q", 3, {"sum(q_lens)", "num_heads", dq_name}, {r.total_q, cfg.num_heads, cfg.head_dim}, cfg.io_dtype, false};
    r.q = check_tensor(c.q, q_spec, where);
    const TensorSpec o_spec{
        "o",          3,    {"sum(q_lens)", "num_heads", "value_dim"}, {r.total_q, cfg.num_heads, cfg.value_dim},
        cfg.io_dtype, false};
    r.o = check_tensor(c.o, o_spec, where);
    if (c.lse != nullptr) {
        const TensorSpec lse_spec{"lse",          2,    {"sum(q_lens)", "num_heads"}, {r.total_q, cfg.num_heads},
                                  GQLA_DTYPE_F32, false};
        r.lse = check_tensor(c.lse, lse_spec, where);
    }
    return r;
}

// Sparse attention: one row of `topk` positions per query row.
struct SparseIndices {
    gqla_view view{};
    int32_t topk = 0;  // 0: a dense call
};

// Checks a sparse call's `indices` against its queries (none: a dense call).
SparseIndices check_sparse_indices(const Session::AttentionCall& c, const CallQueries& queries, const gqla_config& cfg,
                                   const DevicePlacement& where, const BackendContext& backend) {
    SparseIndices r;
    if (c.indices == nullptr) return r;
    const bool ragged = c.q_lens != nullptr;
    backend.require_feature(GQLA_BACKEND_FEATURE_SPARSE, "indices (sparse attention)");
    if (cfg.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        backend.require_feature(GQLA_BACKEND_FEATURE_SPARSE_FP8, "indices (sparse attention) over an fp8_e4m3 cache");
    const IndexSpec spec{"indices", queries.total_q, ragged ? 0 : c.batch, ragged ? 0 : queries.s_q};
    r.view = check_index_tensor(c.indices, spec, where);
    r.topk = static_cast<int32_t>(r.view.shape[1]);
    return r;
}

// Fails when sequence i of the call has fewer than its n queries cached.
void check_queries_cached(const Session::AttentionCall& c, int32_t i, int64_t n, int64_t length) {
    if (n <= length) return;
    if (c.q_lens != nullptr)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "q_lens[%d]: %lld queries exceed the %lld cached tokens of sequence %lld in layer %d (queries "
             "are the last q_lens[i] cached tokens)",
             i, static_cast<long long>(n), static_cast<long long>(length), static_cast<long long>(c.ids[i]), c.layer);
    fail(GQLA_ERR_INVALID_ARGUMENT,
         "seqs[%d]: s_q %lld exceeds the %lld cached tokens of sequence %lld in layer %d (queries are the "
         "last s_q cached tokens)",
         i, static_cast<long long>(n), static_cast<long long>(length), static_cast<long long>(c.ids[i]), c.layer);
}

// What the cost model and the path policy weigh, summed over the call's
// sequences.
struct CallWork {
    int64_t context_sum = 0;
    double sparse_pairs = 0;      // sparse calls: sum over queries of min(topk, visible positions)
    double weighted_queries = 0;  // sum of q_len * length: the call's attention work
};

// The shape the path policy prices for a call.
struct PolicyShape {
    int32_t batch;
    int64_t context;
    int32_t q_len;
};

// A dense call is `batch` steps of q_eff queries over the mean context. A
// sparse call reads its own rows per query: to the policy it is total_q
// single-query steps over the positions a query attends.
PolicyShape policy_shape(int32_t batch, int64_t total_q, int64_t mean_context, int32_t q_eff, int32_t topk,
                         double sparse_pairs) {
    const bool sparse = topk > 0;
    PolicyShape p;
    p.batch = sparse ? static_cast<int32_t>(std::min<int64_t>(total_q, INT32_MAX)) : batch;
    p.context = sparse ? std::max<int64_t>(1, static_cast<int64_t>(sparse_pairs / static_cast<double>(total_q) + 0.5))
                       : mean_context;
    p.q_len = sparse ? 1 : q_eff;
    return p;
}

}  // namespace

void Session::decode(int32_t layer, int32_t batch, const gqla_seq_id* ids, const gqla_tensor* q, gqla_tensor* o,
                     gqla_tensor* lse) {
    AttentionCall call;
    call.layer = layer;
    call.batch = batch;
    call.ids = ids;
    call.q = q;
    call.o = o;
    call.lse = lse;
    call.on_session_path = true;
    std::lock_guard<std::mutex> lock(mu_);
    attention_locked(call);
}

gqla_path Session::attention(const AttentionCall& call) {
    std::lock_guard<std::mutex> lock(mu_);
    return attention_locked(call);
}

gqla_path Session::attention_locked(const AttentionCall& c) {
    check_layer(c.layer);
    if (c.batch < 1 || c.batch > cfg_.max_batch)
        fail(GQLA_ERR_INVALID_ARGUMENT, "batch: expected 1..%d (config.max_batch), got %d", cfg_.max_batch, c.batch);
    if (c.ids == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "seqs: NULL (expected %d sequence ids)", c.batch);
    const bool gqa = cfg_.kind == GQLA_KIND_GQA;
    const int path_value = c.path_value;
    check_call_path(c, gqa);
    require_weights(c.layer, c.on_session_path ? "decode" : "attention");

    // Query counts: uniform (s_q from q's shape) or one per sequence.
    const bool ragged = c.q_lens != nullptr;
    const char* dq_name = gqa ? "head_dim" : "nope_dim + rope_dim";
    const CallQueries queries = ragged ? check_ragged_queries(c, cfg_, placement_, dq_name)
                                       : check_uniform_queries(c, cfg_, placement_, dq_name);
    const SparseIndices sparse = check_sparse_indices(c, queries, cfg_, placement_, *backend_);

    // The per-sequence array (scratch: a check failing here leaves the
    // session as it was).
    const uint32_t epoch = next_epoch();
    int64_t row = 0;
    CallWork work;
    for (int32_t i = 0; i < c.batch; ++i) {
        auto it = seqs_.find(c.ids[i]);
        if (it == seqs_.end())
            fail(GQLA_ERR_NOT_FOUND, "seqs[%d]: unknown sequence id %lld", i, static_cast<long long>(c.ids[i]));
        const Sequence& s = it->second;
        size_t slot = static_cast<size_t>(s.slot);
        if (slot_epoch_[slot] == epoch)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "seqs[%d]: sequence id %lld repeated (also seqs[%d]); an id may appear "
                 "once per call",
                 i, static_cast<long long>(c.ids[i]), slot_arg_[slot]);
        slot_epoch_[slot] = epoch;
        slot_arg_[slot] = i;
        const int64_t length = s.lengths[static_cast<size_t>(c.layer)];
        const int64_t n = ragged ? c.q_lens[i] : queries.s_q;
        check_queries_cached(c, i, n, length);
        gqla_decode_seq& d = decode_seqs_[static_cast<size_t>(i)];
        d.page_table = s.pages.data();
        d.num_pages = static_cast<int32_t>(s.pages.size());
        d.slot = s.slot;
        d.length = length;
        d.q_len = static_cast<int32_t>(n);
        d.q_row = row;
        row += n;
        work.context_sum += length;
        work.weighted_queries += static_cast<double>(n) * static_cast<double>(length);
        if (sparse.topk > 0) work.sparse_pairs += sparse_positions(length, n, sparse.topk);
    }

    gqla_decode_args args{};
    args.layer = c.layer;
    args.batch = c.batch;
    args.q_len = queries.max_len;
    args.seqs = decode_seqs_.data();
    args.q = queries.q;
    args.o = queries.o;
    args.lse = queries.lse;
    args.ragged = ragged ? 1 : 0;
    args.total_q = queries.total_q;
    args.indices = sparse.view;
    args.topk = sparse.topk;
    gqla_path taken = GQLA_PATH_GQA;
    if (!gqa) {
        // The shape the cost model prices: the mean context, and the query
        // count that gives the call's attention work (sum of q_len * length).
        const int64_t mean_context = std::max<int64_t>(1, work.context_sum / c.batch);
        const int32_t q_eff = static_cast<int32_t>(std::clamp<double>(
            work.weighted_queries / std::max<double>(1.0, static_cast<double>(work.context_sum)) + 0.5, 1.0,
            queries.max_len));
        const bool session_auto = c.on_session_path || path_value == GQLA_PATH_AUTO;
        if (session_auto && requested_ == GQLA_PATH_AUTO) {
            const PolicyShape p =
                policy_shape(c.batch, queries.total_q, mean_context, q_eff, sparse.topk, work.sparse_pairs);
            last_batch_ = p.batch;
            last_context_ = p.context;
            last_q_len_ = p.q_len;
            last_layer_ = c.layer;
            have_history_ = true;
            // The policy weighs one layer's expansion against one layer's call.
            gqla_path want =
                policy_->choose(p.batch, p.context, p.q_len, active_, layer_tokens_[static_cast<size_t>(c.layer)]);
            if (want != active_) switch_for_auto(want);
        }
        taken = c.on_session_path
                    ? active_
                    : call_form(static_cast<gqla_path>(path_value), c.batch, mean_context, q_eff, sparse.topk);
    }
    args.path = taken == GQLA_PATH_ABSORB ? GQLA_PATH_ABSORB : GQLA_PATH_GQA;
    args.transient = taken == GQLA_PATH_GQA_TRANSIENT ? 1 : 0;
    const gqla_backend_vtable& vt = backend_->vt();
    backend_->check(vt.decode(backend_->ctx(), &args), c.on_session_path ? "decode" : "attention");
    return taken;
}

gqla_path Session::call_form(gqla_path requested, int32_t batch, int64_t mean_context, int32_t q_len,
                             int32_t topk) const {
    if (!latent_kept()) {  // config.keep_latent = 0: the kept expanded cache is the only form
        if (requested == GQLA_PATH_ABSORB) require_latent("path: GQLA_PATH_ABSORB");
        if (requested == GQLA_PATH_GQA_TRANSIENT) require_latent("path: GQLA_PATH_GQA_TRANSIENT");
        return GQLA_PATH_GQA;
    }
    switch (requested) {
        case GQLA_PATH_ABSORB:
            return GQLA_PATH_ABSORB;
        case GQLA_PATH_GQA_TRANSIENT:
            return GQLA_PATH_GQA_TRANSIENT;
        case GQLA_PATH_GQA:
            return expanded_ ? GQLA_PATH_GQA : GQLA_PATH_GQA_TRANSIENT;
        case GQLA_PATH_AUTO:
            break;
    }
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = batch;
    w.context = mean_context;
    w.q_len = q_len;
    w.topk = topk;
    const gqla_cost_report r = gqla::predict_cost(cfg_, probe_, w, efficiency_);
    // Ties go to the form that reads the least extra memory: absorb, then
    // the kept expanded cache, then the transient expansion.
    gqla_path best = GQLA_PATH_ABSORB;
    double best_s = r.absorb.time_s;
    if (expanded_ && r.gqa.time_s < best_s) {
        best = GQLA_PATH_GQA;
        best_s = r.gqa.time_s;
    }
    if (r.transient.time_s < best_s) best = GQLA_PATH_GQA_TRANSIENT;
    return best;
}

}  // namespace gqla

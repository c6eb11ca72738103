// SPDX-License-Identifier: Apache-2.0
// Decode: validate, fill the preallocated per-sequence array, pick the path,
// call the backend. Nothing here allocates on success (a path switch under
// AUTO does, once, when the cost model changes its mind).
#include <cstdio>

#include "core/error.hpp"
#include "core/session.hpp"

namespace gqla {

void Session::decode(int32_t layer, int32_t batch, const gqla_seq_id* ids, const gqla_tensor* q, gqla_tensor* o,
                     gqla_tensor* lse) {
    std::lock_guard<std::mutex> lock(mu_);
    check_layer(layer);
    if (batch < 1 || batch > cfg_.max_batch)
        fail(GQLA_ERR_INVALID_ARGUMENT, "batch: expected 1..%d (config.max_batch), got %d", cfg_.max_batch, batch);
    if (ids == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "seqs: NULL (expected %d sequence ids)", batch);
    require_weights(layer, "decode");

    const bool gqa = cfg_.kind == GQLA_KIND_GQA;
    const TensorSpec q_spec{"q", 4,
                            {"batch", "s_q", "num_heads", gqa ? "head_dim" : "nope_dim + rope_dim"},
                            {batch, kAnyExtent, cfg_.num_heads, cfg_.head_dim},
                            cfg_.io_dtype, false};
    gqla_view q_view = check_tensor(q, q_spec, placement_);
    const int64_t s_q = q_view.shape[1];
    if (s_q < 1 || s_q > cfg_.max_q_len)
        fail(GQLA_ERR_INVALID_ARGUMENT, "q: shape[1] (s_q) expected 1..%d (config.max_q_len), got %lld",
             cfg_.max_q_len, static_cast<long long>(s_q));
    const TensorSpec o_spec{"o", 4,
                            {"batch", "s_q", "num_heads", "value_dim"},
                            {batch, s_q, cfg_.num_heads, cfg_.value_dim},
                            cfg_.io_dtype, false};
    gqla_view o_view = check_tensor(o, o_spec, placement_);
    gqla_view lse_view{};
    if (lse != nullptr) {
        const TensorSpec lse_spec{"lse", 3, {"batch", "s_q", "num_heads"}, {batch, s_q, cfg_.num_heads},
                                  GQLA_DTYPE_F32, false};
        lse_view = check_tensor(lse, lse_spec, placement_);
    }

    const uint32_t epoch = next_epoch();
    int64_t context_sum = 0;
    for (int32_t i = 0; i < batch; ++i) {
        char name[32];
        auto it = seqs_.find(ids[i]);
        if (it == seqs_.end()) {
            std::snprintf(name, sizeof(name), "seqs[%d]", i);
            fail(GQLA_ERR_NOT_FOUND, "%s: unknown sequence id %lld", name, static_cast<long long>(ids[i]));
        }
        const Sequence& s = it->second;
        size_t slot = static_cast<size_t>(s.slot);
        if (slot_epoch_[slot] == epoch)
            fail(GQLA_ERR_INVALID_ARGUMENT, "seqs[%d]: sequence id %lld repeated (also seqs[%d]); an id may appear "
                 "once per call", i, static_cast<long long>(ids[i]), slot_arg_[slot]);
        slot_epoch_[slot] = epoch;
        slot_arg_[slot] = i;
        const int64_t length = s.lengths[static_cast<size_t>(layer)];
        if (s_q > length)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "seqs[%d]: s_q %lld exceeds the %lld cached tokens of sequence %lld in layer %d (queries are the "
                 "last s_q cached tokens)", i, static_cast<long long>(s_q), static_cast<long long>(length),
                 static_cast<long long>(ids[i]), layer);
        gqla_decode_seq& d = decode_seqs_[static_cast<size_t>(i)];
        d.page_table = s.pages.data();
        d.num_pages = static_cast<int32_t>(s.pages.size());
        d.slot = s.slot;
        d.length = length;
        context_sum += length;
    }

    if (!gqa && requested_ == GQLA_PATH_AUTO) {
        last_batch_ = batch;
        last_context_ = context_sum / batch;
        last_q_len_ = static_cast<int32_t>(s_q);
        last_layer_ = layer;
        have_history_ = true;
        // The policy weighs one layer's expansion against one layer's decode.
        gqla_path want = policy_->choose(batch, last_context_, last_q_len_, active_,
                                         layer_tokens_[static_cast<size_t>(layer)]);
        if (want != active_) switch_for_auto(want);
    }

    gqla_decode_args args{};
    args.layer = layer;
    args.path = gqa ? GQLA_PATH_GQA : active_;
    args.batch = batch;
    args.q_len = static_cast<int32_t>(s_q);
    args.seqs = decode_seqs_.data();
    args.q = q_view;
    args.o = o_view;
    args.lse = lse_view;
    const gqla_backend_vtable& vt = backend_->vt();
    backend_->check(vt.decode(backend_->ctx(), &args), "decode");
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): gqla_decode on random batches, query counts
// and flawed tensors, on the session's path; every accepted decode is
// compared with the float64 reference over the shadow model's cache
// (check_outputs, session_fuzz_outputs.cpp), and a refused one must write
// nothing.
#include "tests/fuzz/session_fuzz.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fuzz {

std::vector<gqla_seq_id> SessionFuzz::pick_batch(int32_t layer, bool layer_valid, Expect& e) {
    // Mostly sequences that hold tokens in this layer.
    std::vector<gqla_seq_id> filled, all = shadow_.live();
    for (gqla_seq_id id : all)
        if (layer_valid && shadow_.length(id, layer) > 0) filled.push_back(id);
    std::vector<gqla_seq_id>& pool = (!filled.empty() && r_.chance(0.9)) ? filled : all;
    std::shuffle(pool.begin(), pool.end(), r_.gen());
    const int64_t take = pool.empty() ? 1 : r_.range(1, std::min<int64_t>(cfg_.max_batch, int64_t(pool.size())));
    std::vector<gqla_seq_id> ids(pool.begin(), pool.begin() + static_cast<long>(std::min<size_t>(take, pool.size())));
    if (ids.empty() || r_.chance(0.02)) {
        if (ids.empty())
            ids.push_back(unknown_id());
        else
            ids.back() = unknown_id();
        e.error(GQLA_ERR_NOT_FOUND);
    }
    if (ids.size() > 1 && r_.chance(0.02)) {
        ids.back() = ids.front();
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    return ids;
}

SessionFuzz::CallTarget SessionFuzz::pick_call(Expect& e) {
    CallTarget c;
    c.layer = some_layer(e);
    c.layer_valid = layer_ok(c.layer, cfg_.num_layers);
    if (c.layer_valid && shadow_.is_gqla() && !shadow_.weights_set(c.layer)) e.error(GQLA_ERR_INVALID_STATE);
    c.ids = pick_batch(c.layer, c.layer_valid, e);
    return c;
}

bool SessionFuzz::op_decode() {
    run.op = "decode";
    Expect e;
    CallTarget target = pick_call(e);
    const int32_t layer = target.layer;
    const bool layer_valid = target.layer_valid;
    std::vector<gqla_seq_id>& ids = target.ids;
    if (r_.chance(0.01)) {  // more than max_batch
        while (static_cast<int64_t>(ids.size()) <= cfg_.max_batch) ids.push_back(unknown_id());
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    const int64_t batch = static_cast<int64_t>(ids.size());
    int64_t shortest = INT64_MAX;
    for (gqla_seq_id id : ids)
        if (shadow_.has(id) && layer_valid) shortest = std::min(shortest, shadow_.length(id, layer));
    int64_t s_q = r_.range(1, std::max<int64_t>(1, std::min<int64_t>(cfg_.max_q_len, shortest)));
    if (r_.chance(0.04)) s_q = r_.pick<int64_t>({0, cfg_.max_q_len + 1, shortest == INT64_MAX ? 1 : shortest + 1});
    if (s_q < 1 || s_q > cfg_.max_q_len || (shortest != INT64_MAX && s_q > shortest))
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (batch * s_q > cfg_.max_q_tokens) e.error(GQLA_ERR_INVALID_ARGUMENT);  // a small config.max_q_tokens

    const int32_t H = cfg_.num_heads;
    Tensor q = make_tensor(cfg_.io_dtype, {batch, s_q, H, shadow_.q_dim()}, 1.0, true);
    Tensor o = make_tensor(cfg_.io_dtype, {batch, s_q, H, shadow_.out_dim()}, 0, false);
    const bool with_lse = r_.chance(0.7);
    Tensor lse = make_tensor(GQLA_DTYPE_F32, {batch, s_q, H}, 0, false);
    const std::vector<unsigned char> o_before = o.buf.bytes, lse_before = lse.buf.bytes;
    const gqla_tensor* pq = &q.t;
    const gqla_tensor* po = &o.t;
    const gqla_tensor* pl = with_lse ? &lse.t : nullptr;
    const Flaw flaw = maybe_flaw(0.08);
    const int which = static_cast<int>(r_.range(0, with_lse ? 2 : 1));
    bool flawed = which == 0   ? apply_flaw(flaw, q.t, &pq, cfg_.io_dtype, false)
                  : which == 1 ? apply_flaw(flaw, o.t, &po, cfg_.io_dtype, false)
                               : (flaw != Flaw::Null && apply_flaw(flaw, lse.t, &pl, GQLA_DTYPE_F32, false));
    if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
    const gqla_seq_id* pids = ids.data();
    if (r_.chance(0.01)) {
        pids = nullptr;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    gqla_status st = gqla_decode(s_, layer, static_cast<int32_t>(batch), pids, pq, const_cast<gqla_tensor*>(po),
                                 const_cast<gqla_tensor*>(pl));
    if (!check_status("gqla_decode", st, e)) {
        check_unwritten("decode", o, o_before, &lse, lse_before);
        return false;
    }
    CallCheck c;
    c.call = "decode";
    c.layer = layer;
    c.ids = ids;
    c.q_lens.assign(ids.size(), static_cast<int32_t>(s_q));
    c.q = &q;
    c.o = &o;
    c.o_before = &o_before;
    c.lse = with_lse ? &lse : nullptr;
    c.lse_before = &lse_before;
    c.forms = {session_form()};
    check_outputs(c);
    return true;
}

}  // namespace fuzz

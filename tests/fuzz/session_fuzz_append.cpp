// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): gqla_append and gqla_append_batch, with row
// counts around page boundaries and over the pool, missing weights, repeated
// and unknown ids, flawed tensors and bad counts.
#include "tests/fuzz/session_fuzz.hpp"

#include <algorithm>
#include <cstdio>

namespace fuzz {

int64_t SessionFuzz::random_rows() {
    const int64_t P = cfg_.page_size;
    const int64_t free_tokens = (shadow_.pages_total() - shadow_.pages_used()) * P;
    switch (r_.range(0, 9)) {
        case 0:
            return r_.range(1, 3);
        case 1:
            return std::max<int64_t>(1, P - 1);
        case 2:
            return P;
        case 3:
            return P + 1;
        case 4:
            return free_tokens + r_.range(1, P);  // over what is left
        case 5:
            return r_.range(1, 40);
        default:
            return r_.range(1, std::max<int64_t>(2, std::min<int64_t>(2 * P, 24)));
    }
}

bool SessionFuzz::op_append() {
    run.op = "append";
    Expect e;
    const int32_t layer = some_layer(e);
    const gqla_seq_id id = some_id(e);
    if (layer_ok(layer, cfg_.num_layers) && shadow_.is_gqla() && !shadow_.weights_set(layer))
        e.error(GQLA_ERR_INVALID_STATE);
    int64_t n = r_.chance(0.03) ? 0 : random_rows();
    if (n == 0) e.error(GQLA_ERR_INVALID_ARGUMENT);
    if (n > 0 && shadow_.has(id) && layer_ok(layer, cfg_.num_layers) &&
        shadow_.pages_needed(layer, {id}, {n}) > shadow_.pages_total() - shadow_.pages_used())
        e.error(GQLA_ERR_CAPACITY);
    Tensor a = make_tensor(cfg_.io_dtype, a_shape(n), 1.0, true);
    Tensor b = make_tensor(cfg_.io_dtype, b_shape(r_.chance(0.03) ? n + 1 : n), 1.0, true);
    if (b.t.shape[0] != n) e.error(GQLA_ERR_INVALID_ARGUMENT);
    const gqla_tensor* pa = &a.t;
    const gqla_tensor* pb = &b.t;
    const Flaw flaw = maybe_flaw(0.1);
    bool flawed = r_.chance(0.5) ? apply_flaw(flaw, a.t, &pa, cfg_.io_dtype, false)
                                 : apply_flaw(flaw, b.t, &pb, cfg_.io_dtype, false);
    if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
    // A huge row count over a small buffer: must be refused before any row is read.
    if (!flawed && n > 0 && r_.chance(0.01)) {
        a.t.shape[0] = b.t.shape[0] = int64_t(1) << 40;
        e.error(GQLA_ERR_CAPACITY);
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    if (run.verbose) std::printf("append layer %d seq %lld n %lld\n", layer, (long long)id, (long long)n);
    if (!check_status("gqla_append", gqla_append(s_, layer, id, pa, pb), e)) return false;
    shadow_.append(layer, {id}, {n}, a.stored, b.stored);
    return true;
}

bool SessionFuzz::op_append_batch() {
    run.op = "append_batch";
    Expect e;
    const int32_t layer = some_layer(e);
    if (layer_ok(layer, cfg_.num_layers) && shadow_.is_gqla() && !shadow_.weights_set(layer))
        e.error(GQLA_ERR_INVALID_STATE);
    auto live = shadow_.live();
    std::shuffle(live.begin(), live.end(), r_.gen());
    size_t k = live.empty() ? 1 : static_cast<size_t>(r_.range(1, std::min<int64_t>(5, int64_t(live.size()))));
    std::vector<gqla_seq_id> ids(live.begin(), live.begin() + static_cast<long>(std::min(k, live.size())));
    if (ids.empty() || r_.chance(0.03)) {
        ids.push_back(unknown_id());
        e.error(GQLA_ERR_NOT_FOUND);
    }
    if (ids.size() > 1 && r_.chance(0.03)) {
        ids.back() = ids.front();
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    if (static_cast<int64_t>(ids.size()) > cfg_.max_sequences) e.error(GQLA_ERR_INVALID_ARGUMENT);
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        counts.push_back(r_.chance(0.2) ? 0 : r_.range(1, cfg_.page_size + 1));
        total += counts.back();
    }
    if (r_.chance(0.02)) {
        counts[0] = -1;
        total -= 1;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    const bool valid_ids = e.must_succeed() || !(e.allowed & (1u << GQLA_ERR_NOT_FOUND));
    if (valid_ids && layer_ok(layer, cfg_.num_layers) && counts[0] >= 0) {
        bool distinct = true;
        for (size_t i = 1; i < ids.size(); ++i) distinct = distinct && ids[i] != ids[0];
        if (distinct && shadow_.pages_needed(layer, ids, counts) > shadow_.pages_total() - shadow_.pages_used())
            e.error(GQLA_ERR_CAPACITY);
    }
    const int64_t rows = std::max<int64_t>(total, 0);
    Tensor a = make_tensor(cfg_.io_dtype, a_shape(rows), 1.0, true);
    Tensor b = make_tensor(cfg_.io_dtype, b_shape(rows), 1.0, true);
    const gqla_tensor* pa = &a.t;
    const gqla_tensor* pb = &b.t;
    const Flaw flaw = maybe_flaw(0.08);
    const bool flawed = r_.chance(0.5) ? apply_flaw(flaw, a.t, &pa, cfg_.io_dtype, false)
                                       : apply_flaw(flaw, b.t, &pb, cfg_.io_dtype, false);
    if (flawed) e.error(GQLA_ERR_INVALID_ARGUMENT);
    const int64_t* pcounts = counts.data();
    int32_t num = static_cast<int32_t>(ids.size());
    if (r_.chance(0.02)) {
        pcounts = nullptr;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    } else if (r_.chance(0.02)) {
        num = 0;
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    if (run.verbose)
        for (size_t i = 0; i < ids.size(); ++i)
            std::printf("append_batch layer %d seq %lld n %lld\n", layer, (long long)ids[i], (long long)counts[i]);
    if (!check_status("gqla_append_batch", gqla_append_batch(s_, layer, num, ids.data(), pcounts, pa, pb), e))
        return false;
    shadow_.append(layer, ids, counts, a.stored, b.stored);
    return true;
}

std::vector<int64_t> SessionFuzz::a_shape(int64_t n) const {
    if (shadow_.is_gqla()) return {n, cfg_.latent_dim};
    return {n, cfg_.num_kv_heads, cfg_.head_dim};
}

std::vector<int64_t> SessionFuzz::b_shape(int64_t n) const {
    if (shadow_.is_gqla()) return {n, cfg_.rope_dim};
    return {n, cfg_.num_kv_heads, cfg_.value_dim};
}

}  // namespace fuzz

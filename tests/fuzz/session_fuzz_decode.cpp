// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): gqla_decode on random batches, query counts
// and flawed tensors; every accepted decode is compared with the float64
// reference over the shadow model's cache (o by relative L2, lse by absolute
// error), and must write nothing outside the views of o and lse.
#include "tests/fuzz/session_fuzz.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fuzz {

namespace {

double tolerance(gqla_dtype cache, gqla_dtype io) {
    auto of = [](gqla_dtype t) { return t == GQLA_DTYPE_F32 ? 1e-5 : t == GQLA_DTYPE_F16 ? 2e-3 : 1e-2; };
    return std::max(of(cache), of(io));
}

}  // namespace

bool SessionFuzz::op_decode() {
    run.op = "decode";
    Expect e;
    const int32_t layer = some_layer(e);
    const bool layer_valid = layer_ok(layer, cfg_.num_layers);
    if (layer_valid && shadow_.is_gqla() && !shadow_.weights_set(layer)) e.error(GQLA_ERR_INVALID_STATE);
    // Prefer sequences that hold tokens in this layer.
    std::vector<gqla_seq_id> filled, all = shadow_.live();
    for (gqla_seq_id id : all)
        if (layer_valid && shadow_.length(id, layer) > 0) filled.push_back(id);
    std::vector<gqla_seq_id>& pool = (!filled.empty() && r_.chance(0.9)) ? filled : all;
    std::shuffle(pool.begin(), pool.end(), r_.gen());
    int64_t batch = pool.empty() ? 1 : r_.range(1, std::min<int64_t>(cfg_.max_batch, int64_t(pool.size())));
    std::vector<gqla_seq_id> ids(pool.begin(), pool.begin() + static_cast<long>(std::min<size_t>(batch, pool.size())));
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
    if (r_.chance(0.01)) {  // more than max_batch
        while (static_cast<int64_t>(ids.size()) <= cfg_.max_batch) ids.push_back(unknown_id());
        e.error(GQLA_ERR_INVALID_ARGUMENT);
    }
    batch = static_cast<int64_t>(ids.size());
    int64_t shortest = INT64_MAX;
    for (gqla_seq_id id : ids)
        if (shadow_.has(id) && layer_valid) shortest = std::min(shortest, shadow_.length(id, layer));
    int64_t s_q = r_.range(1, std::max<int64_t>(1, std::min<int64_t>(cfg_.max_q_len, shortest)));
    if (r_.chance(0.04)) s_q = r_.pick<int64_t>({0, cfg_.max_q_len + 1, shortest == INT64_MAX ? 1 : shortest + 1});
    if (s_q < 1 || s_q > cfg_.max_q_len || (shortest != INT64_MAX && s_q > shortest))
        e.error(GQLA_ERR_INVALID_ARGUMENT);

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
    if (!check_status("gqla_decode", st, e)) return false;
    check_decode(layer, ids, static_cast<int32_t>(s_q), q, o, o_before, with_lse ? &lse : nullptr, lse_before);
    return true;
}

void SessionFuzz::check_decode(int32_t layer, const std::vector<gqla_seq_id>& ids, int32_t s_q, const Tensor& q,
                               const Tensor& o, const std::vector<unsigned char>& o_before, const Tensor* lse,
                               const std::vector<unsigned char>& lse_before) {
    auto gaps_untouched = [](const Tensor& x, const std::vector<unsigned char>& before) {
        const size_t esz = fuzz::dtype_bytes(x.buf.dtype);
        for (size_t i = 0; i < x.in_view.size(); ++i)
            if (!x.in_view[i] && std::memcmp(&x.buf.bytes[i * esz], &before[i * esz], esz) != 0) return false;
        return true;
    };
    if (!gaps_untouched(o, o_before)) fail("decode wrote outside o's view (into the gaps of its strides)");
    if (lse != nullptr && !gaps_untouched(*lse, lse_before)) fail("decode wrote outside lse's view");
    const double tol = tolerance(cfg_.cache_dtype, cfg_.io_dtype);
    const int64_t H = cfg_.num_heads, Dq = shadow_.q_dim(), Dv = shadow_.out_dim();
    const std::vector<double> got = read_view(o);
    const std::vector<double> got_lse = lse ? read_view(*lse) : std::vector<double>();
    std::vector<double> ref_o(static_cast<size_t>(s_q * H * Dv)), ref_lse(static_cast<size_t>(s_q * H));
    // On the GQA path a GQLA session attends over its expanded cache,
    // stored in the cache dtype: the reference reads it as stored.
    const bool expanded = shadow_.is_gqla() && stats().path == GQLA_PATH_GQA;
    for (size_t b = 0; b < ids.size(); ++b) {
        const double* qb = q.stored.data() + b * static_cast<size_t>(s_q * H * Dq);
        shadow_.reference(ids[b], layer, s_q, qb, ref_o.data(), ref_lse.data(), expanded);
        const double* ob = got.data() + b * static_cast<size_t>(s_q * H * Dv);
        // Relative L2, except that the denominator never drops below half
        // the values' own scale: an output whose terms cancel to almost
        // zero is judged against the size of what was averaged (the
        // rounding error of the cache is relative to that, not to o).
        double diff = 0, norm = 0;
        for (size_t i = 0; i < ref_o.size(); ++i) {
            if (!std::isfinite(ob[i])) diff = INFINITY;
            diff += (ob[i] - ref_o[i]) * (ob[i] - ref_o[i]);
            norm += ref_o[i] * ref_o[i];
        }
        const double floor = 0.5 * shadow_.value_rms(ids[b], layer) * std::sqrt(double(ref_o.size()));
        const double err = std::sqrt(diff) / std::max(std::sqrt(norm), floor);
        if (!(err <= tol))
            fail(
                "decode of sequence %lld (batch index %zu, layer %d, length %lld, s_q %d, path %d): o rel-L2 "
                "%.3g > %.3g",
                (long long)ids[b], b, layer, (long long)shadow_.length(ids[b], layer), s_q, int(stats().path), err,
                tol);
        // lse: absolute error, scaled by |lse| away from zero. Twice the o
        // bound: a 16-bit kernel may round q as well as the cached keys, and
        // both errors land in every score.
        if (lse != nullptr)
            for (size_t i = 0; i < ref_lse.size(); ++i) {
                const double g = got_lse[b * ref_lse.size() + i], want = ref_lse[i];
                if (!(std::fabs(g - want) <= 2 * tol * std::max(1.0, std::fabs(want))))
                    fail("decode of sequence %lld (batch index %zu, layer %d): lse[%zu] %.9g, reference %.9g",
                         (long long)ids[b], b, layer, i, g, want);
            }
    }
    ++run.decodes_checked;
}

}  // namespace fuzz

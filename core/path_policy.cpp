// SPDX-License-Identifier: Apache-2.0
// gqla::PathPolicy: the AUTO path decision, made per decode shape with
// hysteresis so near-equal paths do not flip-flop (each flip to the GQA path
// re-expands the whole cache).
#include <algorithm>

#include "core/cost_model.hpp"

namespace gqla {

namespace {

// ceil(log2(v)) for v >= 1, saturated to 6 bits so the key fields stay apart.
uint32_t log2_bucket(int64_t v) {
    uint32_t b = 0;
    while (b < 63 && (int64_t(1) << b) < v) ++b;
    return b;
}

bool is_concrete(gqla_path p) { return p == GQLA_PATH_GQA || p == GQLA_PATH_ABSORB; }

}  // namespace

PathPolicy::PathPolicy(const gqla_config& cfg, const gqla_probe_info& probe, const Efficiency& eff)
    : cfg_(cfg), probe_(probe), eff_(eff) {}

double PathPolicy::expected_remaining_steps(int64_t mean_context, int32_t q_len) {
    const double steps = static_cast<double>(std::max<int64_t>(mean_context, 0)) / std::max(q_len, 1);
    return std::max(1.0, steps);
}

uint32_t PathPolicy::bucket_key(int32_t batch, int64_t mean_context, int32_t q_len) {
    // +1 keeps 0 free as "empty slot".
    return 1u + (log2_bucket(batch) << 12 | log2_bucket(mean_context) << 6 | log2_bucket(q_len));
}

gqla_path PathPolicy::verdict(int32_t batch, int64_t mean_context, int32_t q_len, gqla_path active,
                              int64_t cached_tokens) const {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = std::max(batch, 1);
    w.context = std::max<int64_t>(mean_context, 1);
    w.q_len = std::max(q_len, 1);
    const gqla_cost_report r = predict_cost(cfg_, probe_, w, eff_);

    if (!is_concrete(active)) {  // no path yet: plain comparison, expansion still has to pay off
        if (r.absorb.time_s <= r.gqa.time_s) return GQLA_PATH_ABSORB;
        const double gain = r.absorb.time_s - r.gqa.time_s;
        const double expand_s = expansion_cost(cfg_, probe_, cached_tokens, eff_).seconds;
        return gain * expected_remaining_steps(mean_context, q_len) > expand_s ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
    }

    const gqla_path other = active == GQLA_PATH_GQA ? GQLA_PATH_ABSORB : GQLA_PATH_GQA;
    const double t_active = active == GQLA_PATH_GQA ? r.gqa.time_s : r.absorb.time_s;
    const double t_other = other == GQLA_PATH_GQA ? r.gqa.time_s : r.absorb.time_s;
    if (t_other * (1.0 + kHysteresis) > t_active) return active;
    if (other == GQLA_PATH_GQA) {
        const double gain = t_active - t_other;
        const double expand_s = expansion_cost(cfg_, probe_, cached_tokens, eff_).seconds;
        if (gain * expected_remaining_steps(mean_context, q_len) <= expand_s) return active;
    }
    return other;  // dropping the expanded cache costs nothing to amortize
}

gqla_path PathPolicy::choose(int32_t batch, int64_t mean_context, int32_t q_len, gqla_path active,
                             int64_t cached_tokens) {
    if (cfg_.kind != GQLA_KIND_GQLA) return GQLA_PATH_GQA;
    const gqla_path v = verdict(batch, mean_context, q_len, active, cached_tokens);
    if (!is_concrete(active)) return v;

    const uint32_t key = bucket_key(batch, mean_context, q_len);
    Bucket& b = buckets_[key % kBuckets];
    if (b.key != key) b = Bucket{key, 0, GQLA_PATH_AUTO};  // new shape (or a colliding one) starts over
    if (v == active) {
        b.votes = 0;
        b.best = active;
        return active;
    }
    b.votes = b.best == v ? b.votes + 1 : 1;
    b.best = v;
    if (b.votes < kRequiredVotes) return active;
    b.votes = 0;
    return v;
}

gqla_path PathPolicy::initial() const {
    if (cfg_.kind != GQLA_KIND_GQLA) return GQLA_PATH_GQA;
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = 1;
    w.context = 4096;
    w.q_len = 1;
    const gqla_cost_report r = predict_cost(cfg_, probe_, w, eff_);
    return r.gqa.time_s * (1.0 + kHysteresis) <= r.absorb.time_s ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
}

}  // namespace gqla

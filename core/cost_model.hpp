// Roofline cost model of SPEC §1.3 and the AUTO path policy built on it.
#pragma once

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla {

// Per-backend correction of the pure roofline: achieved/roofline per path
// ([0] GQA path, [1] absorb path) and a fixed per-call overhead.
struct Efficiency {
    double gqa = 0.8;
    double absorb = 0.6;
    double overhead_s = 5e-6;
};

// Bytes and FLOPs of one decode step for both paths and the one-time cost of
// expanding the cache, priced on `probe`. cfg must be valid (dims resolved:
// value_dim, softmax_scale may be 0). Pure function.
gqla_cost_report predict_cost(const gqla_config& cfg, const gqla_probe_info& probe,
                              const gqla_workload& w, const Efficiency& eff);

// AUTO for GQLA sessions: picks a path per decode shape bucket (batch, context,
// s_q rounded to powers of two), switches only when the other path is
// predicted faster by a hysteresis margin, and switches to the GQA path only
// when the expansion cost is amortized over the decode steps expected at that
// shape. Deterministic; no I/O.
class PathPolicy {
public:
    PathPolicy(const gqla_config& cfg, const gqla_probe_info& probe, const Efficiency& eff);

    // Path to use for a decode of this shape, given the active one.
    // `cached_tokens` is the session's total cached tokens (prices expansion).
    gqla_path choose(int32_t batch, int64_t mean_context, int32_t q_len,
                     gqla_path active, int64_t cached_tokens);

    // Path for a session with no decode history yet (batch 1, context 4096, s_q 1).
    gqla_path initial() const;

    static constexpr double kHysteresis = 0.10;   // other path must be >= 10% faster
private:
    gqla_config cfg_;
    gqla_probe_info probe_;
    Efficiency eff_;
    // bucket state kept small and fixed-size (no allocation on the decode path)
    struct Bucket { uint32_t key = 0; int32_t votes = 0; gqla_path best = GQLA_PATH_AUTO; };
    Bucket buckets_[64];
};

}  // namespace gqla

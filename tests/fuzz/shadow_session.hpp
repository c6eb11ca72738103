// SPDX-License-Identifier: Apache-2.0
// What a gqla session should hold after the calls it accepted: live
// sequences, per-layer cached rows (the exact values handed to gqla), page
// tables with shared pages and copy-on-write exactly as the contract states,
// and the GQLA weights. The fuzzer compares it with gqla after every call and
// computes expected decode outputs from it with the float64 reference.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "gqla/gqla.h"

namespace fuzz {

class ShadowSession {
public:
    explicit ShadowSession(const gqla_config& resolved);

    const gqla_config& config() const { return cfg_; }
    bool is_gqla() const { return cfg_.kind == GQLA_KIND_GQLA; }
    int64_t a_cols() const;  // values per token of k (GQA) or c (GQLA)
    int64_t b_cols() const;  // values per token of v or kr
    int64_t q_dim() const;
    int64_t out_dim() const;

    bool has(gqla_seq_id id) const { return seqs_.count(id) != 0; }
    std::vector<gqla_seq_id> live() const;
    int64_t length(gqla_seq_id id, int32_t layer) const;

    void add(gqla_seq_id id);
    void fork(gqla_seq_id parent, gqla_seq_id child);
    void release(gqla_seq_id id);

    // Pages an append of counts[i] rows to ids[i] takes from the pool (new
    // pages plus copies of shared pages that receive rows).
    int64_t pages_needed(int32_t layer, const std::vector<gqla_seq_id>& ids, const std::vector<int64_t>& counts) const;
    // Record an accepted append; a/b hold sum(counts) rows, packed in id order.
    void append(int32_t layer, const std::vector<gqla_seq_id>& ids, const std::vector<int64_t>& counts,
                const std::vector<double>& a, const std::vector<double>& b);

    bool weights_set(int32_t layer) const { return !weights_[static_cast<size_t>(layer)].empty(); }
    void set_weights(int32_t layer, std::vector<double> w) { weights_[static_cast<size_t>(layer)] = std::move(w); }

    int64_t pages_total() const { return pages_total_; }
    int64_t pages_used() const { return static_cast<int64_t>(refcount_.size()); }
    int64_t sequences() const { return static_cast<int64_t>(seqs_.size()); }
    int64_t tokens_cached() const;

    // Expected o [s_q, H, Dv] and lse [s_q, H] of one sequence for q [s_q, H, Dq].
    // from_expanded (GQLA on the GQA path): the keys' nope parts W_UK c and
    // the values W_UV c as the expanded cache stores them, rounded to the
    // cache dtype, as a GQA cache stores the keys and values it is given.
    void reference(gqla_seq_id id, int32_t layer, int32_t s_q, const double* q, double* o, double* lse,
                   bool from_expanded = false) const;
    // Root mean square of the value vectors the sequence's queries average
    // (GQA: v rows; GQLA: W_UV c per group): the scale of o's rounding error.
    double value_rms(gqla_seq_id id, int32_t layer) const;

private:
    struct Seq {
        std::vector<int64_t> pages;             // abstract page handles
        std::vector<std::vector<double>> a, b;  // per layer, row-major
        std::vector<int64_t> lengths;           // per layer
    };
    void retain(int64_t page) { ++refcount_[page]; }
    void drop(int64_t page);

    // A value as the cache stores it (rounded to the cache dtype).
    double as_stored(double v) const;

    gqla_config cfg_;
    int64_t pages_total_;
    std::map<gqla_seq_id, Seq> seqs_;
    std::map<int64_t, int> refcount_;  // used pages only
    int64_t next_page_ = 0;
    std::vector<std::vector<double>> weights_;  // per layer, empty = not set
};

}  // namespace fuzz

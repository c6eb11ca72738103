// SPDX-License-Identifier: Apache-2.0
// What a gqla session should hold after the calls it accepted: live
// sequences, per-layer cached rows (the values handed to gqla as the cache
// stores them: rounded to its dtype, or quantized per row group for an 8-bit
// cache), page tables with shared pages and copy-on-write exactly as the
// contract states, and the GQLA weights. The fuzzer compares it with gqla
// after every call and computes expected decode outputs from it with the
// float64 reference, on whichever rows the decode's form attends over.
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
    bool fp8() const { return cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3; }
    // GQLA keep_latent = 0: only kr and the expanded rows are kept.
    bool keeps_latent() const { return !is_gqla() || cfg_.keep_latent != 0; }
    int64_t a_cols() const;  // values per token of k (GQA) or c (GQLA)
    int64_t b_cols() const;  // values per token of v or kr
    int64_t q_dim() const;
    int64_t out_dim() const;

    bool has(gqla_seq_id id) const { return seqs_.count(id) != 0; }
    std::vector<gqla_seq_id> live() const;
    int64_t length(gqla_seq_id id, int32_t layer) const;
    // Whether any live sequence holds tokens in `layer`.
    bool layer_has_tokens(int32_t layer) const;

    void add(gqla_seq_id id);
    void fork(gqla_seq_id parent, gqla_seq_id child);
    void release(gqla_seq_id id);

    // Pages an append of counts[i] rows to ids[i] takes from the pool (new
    // pages plus copies of shared pages that receive rows).
    int64_t pages_needed(int32_t layer, const std::vector<gqla_seq_id>& ids, const std::vector<int64_t>& counts) const;
    // Record an accepted append; a/b hold sum(counts) rows, packed in id order.
    void append(int32_t layer, const std::vector<gqla_seq_id>& ids, const std::vector<int64_t>& counts,
                const std::vector<double>& a, const std::vector<double>& b);

    // One sequence's rows as the cache stores them, per layer: what an
    // export carries (sequence_buffer.hpp) and an import restores.
    struct Rows {
        std::vector<int64_t> lengths;
        std::vector<std::vector<double>> a, b;  // per layer, row-major [lengths[l], a_cols / b_cols]
    };
    Rows rows(gqla_seq_id id) const;
    // Pages an import of `rows` takes: its longest layer's, all fresh.
    int64_t pages_for(const Rows& rows) const;
    // Record an accepted import as sequence `id` (values already as stored).
    void import(gqla_seq_id id, const Rows& rows);
    // A value as a 16- or 32-bit cache stores it (rounded to the cache dtype).
    double as_stored(double v) const;
    // Appends n rows of a and b (values as given) to sa and sb as the cache
    // stores them (8-bit: quantized per row group, kr in bf16).
    void store_rows(const double* a, const double* b, int64_t n, std::vector<double>& sa,
                    std::vector<double>& sb) const;

    bool weights_set(int32_t layer) const { return !weights_[static_cast<size_t>(layer)].empty(); }
    void set_weights(int32_t layer, std::vector<double> w) { weights_[static_cast<size_t>(layer)] = std::move(w); }

    int64_t pages_total() const { return pages_total_; }
    int64_t pages_used() const { return static_cast<int64_t>(refcount_.size()); }
    int64_t sequences() const { return static_cast<int64_t>(seqs_.size()); }
    int64_t tokens_cached() const;

    // The rows a decode attends over (GQA kind: always Direct).
    enum class Form {
        Direct,     // the cache as stored: K/V (GQA kind), or the latent c and kr (GQLA absorb path)
        Expanded,   // GQLA, the kept expanded cache: keys [W_UK c | kr] and values W_UV c per group,
                    // rounded to the cache dtype as a GQA cache stores what it is given
                    // (8-bit: quantized per (token, group), from an f32 GEMM: fp8_rows.hpp)
        Transient,  // GQLA GQA_TRANSIENT: rows up-projected for the call, as Expanded, except
                    // that an 8-bit cache's are kept in bf16 (docs/fp8-cache.md)
    };
    static const char* form_name(Form f);

    // The queries of one sequence in one call: q [n, H, Dq]; idx [n, topk]
    // (nullptr: dense) the positions each lists (docs/sparse-attention.md).
    struct Queries {
        int32_t layer = 0;
        int32_t n = 1;
        const double* q = nullptr;
        const int32_t* idx = nullptr;
        int32_t topk = 0;
    };
    struct Expected {
        std::vector<double> o, lse;  // [n, H, Dv], [n, H]; lse -inf for a query row with no visible position
        // Form Expanded over an 8-bit cache, when asked for: the bound of how
        // far the elements at e4m3 rounding boundaries can move o and lse
        // (boundary_slack.hpp); empty when no element is near a boundary.
        std::vector<double> slack_o, slack_lse;
    };
    // Expected o and lse of sequence `id` for these queries on `form`.
    // with_slack: also the boundary slack (costs a second pass).
    Expected reference(gqla_seq_id id, const Queries& queries, Form form, bool with_slack = false) const;
    // Root mean square of the value vectors the sequence's queries average
    // (GQA: v rows; GQLA: W_UV c per group): the scale of o's rounding error.
    double value_rms(gqla_seq_id id, int32_t layer) const;

private:
    struct Seq {
        std::vector<int64_t> pages;             // abstract page handles
        std::vector<std::vector<double>> a, b;  // per layer, row-major, as stored
        std::vector<int64_t> lengths;           // per layer
    };
    void retain(int64_t page) { ++refcount_[page]; }
    void drop(int64_t page);

    // The expanded rows of L tokens of layer l: keys [L, G, d_c + d_r], vals
    // [L, G, d_v]. Form Expanded over an 8-bit cache with dk/dv: also each
    // element's possible deviation; returns whether one may cross a
    // rounding boundary.
    bool expanded_rows(const Seq& s, size_t l, Form form, std::vector<double>& keys, std::vector<double>& vals,
                       std::vector<double>* dk, std::vector<double>* dv) const;

    gqla_config cfg_;
    int64_t pages_total_;
    std::map<gqla_seq_id, Seq> seqs_;
    std::map<int64_t, int> refcount_;  // used pages only
    int64_t next_page_ = 0;
    std::vector<std::vector<double>> weights_;  // per layer, empty = not set
};

}  // namespace fuzz

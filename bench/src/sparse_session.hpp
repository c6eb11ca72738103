// SPDX-License-Identifier: Apache-2.0
// A session for timing sparse (top-k) calls, and the index lists an indexer
// would give them: shared by gqla-bench --topk and the sparse cells of
// --validate-auto.
#pragma once

#include <cstdint>
#include <vector>

#include "gqla/gqla.h"
#include "options.hpp"
#include "presets.hpp"

namespace gqla::bench {

// A session of `preset` holding `batch` sequences of `length` random tokens
// (rows in the io dtype), with random weights; a GQLA session created on
// path GQA keeps the expanded cache beside the latent, so its calls may take
// any form. On a CUDA session q, o and the index lists live in GPU memory
// (as an engine keeps them) and calls are timed by CUDA events around them.
class SparseSession {
public:
    SparseSession(const Preset& p, gqla_path path, gqla_dtype cache, const Options& opt, int batch, int64_t length,
                  int max_q);
    ~SparseSession();
    SparseSession(const SparseSession&) = delete;
    SparseSession& operator=(const SparseSession&) = delete;

    // Median seconds of `reps` calls with s_q queries per sequence on `path`
    // (AUTO: the library's pick, reported in *taken); indices (may be empty:
    // dense) [batch * s_q, topk]. Cold (a 64 MiB sweep before every CPU
    // call) unless `hot`. *cpu_median: the median CPU time of the process
    // over a call (all threads), which a loaded machine inflates less than
    // wall time. On the GPU the median is of device time between CUDA events
    // around each call.
    double time(gqla_path path, int s_q, std::vector<int32_t>& idx, int topk, int reps, bool hot, gqla_path* taken,
                double* cpu_median);
    // The library's prediction for a call of s_q queries per sequence, each
    // listing topk positions.
    gqla_cost_report predict(int s_q, int topk) const;

    int64_t length() const { return length_; }

private:
    const Preset& p_;
    gqla_dtype io_;
    gqla_session* s_ = nullptr;
    bool on_gpu_ = false;
    int batch_;
    int64_t length_;
    std::vector<gqla_seq_id> ids_;
};

// Lists as an indexer gives them: K distinct positions of each query's
// visible prefix (all of it when shorter, padded with -1), sorted.
std::vector<int32_t> indexer_lists(int batch, int s_q, int64_t length, int topk, uint64_t seed);

}  // namespace gqla::bench

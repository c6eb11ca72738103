// SPDX-License-Identifier: Apache-2.0
// One timed decode configuration on the library: a session holding `sets`
// disjoint batches of sequences of equal length, decoded in rotation so each
// call reads cache lines the previous calls did not touch (cold caches), or
// the same batch over and over (hot).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.hpp"
#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct WorkloadSpec {
    const Preset* preset = nullptr;
    SessionShape shape;        // device, path, cache dtype, threads, page size
    int batch = 1;
    int64_t context = 1024;    // tokens per sequence (the mean when `lengths` is given)
    std::vector<int64_t> lengths;  // if not empty: length of sequence i of every batch, i < batch
    int max_s_q = 1;           // largest s_q decoded on this workload
    int sets = 1;              // disjoint batches to rotate over
};

// How many disjoint batches make the rotation read >= cold_bytes of cache
// before a batch comes round again (1 when hot).
int sets_for_cold(const Preset& p, gqla_path path, gqla_dtype cache, int batch, int64_t context,
                  double cold_bytes, bool hot);

class DecodeWorkload {
public:
    // Creates the session, uploads random weights, appends `context` random
    // tokens to sets*batch sequences and selects the path. Throws GqlaError.
    explicit DecodeWorkload(const WorkloadSpec& spec);
    ~DecodeWorkload();
    DecodeWorkload(const DecodeWorkload&) = delete;
    DecodeWorkload& operator=(const DecodeWorkload&) = delete;

    // One decode of sequences [first, first + batch) with s_q queries each.
    // Blocks until the result is there (synchronizes CUDA sessions). timed:
    // CUDA events bracket the call (read by last_device_seconds()).
    void decode(int64_t first, int batch, int s_q, bool timed = false);

    // Median wall time (seconds) of `reps` decodes of `batch` sequences
    // (batch <= spec.batch), rotating over all disjoint groups of `batch`
    // sequences the session holds, after a short warm-up; stops early once
    // `max_total_s` is spent (>= 3 reps), and goes on past `reps` until
    // `min_total_s` is spent (short calls: the median then spans long enough
    // to outvote a busy moment of the machine). hot: always the first group.
    // Cold CPU timings also sweep twice the last-level cache before each
    // call (untimed): the rotation keeps the cache cold, but the layer's
    // weights, read by every call, would otherwise stay cached, which they
    // are not in a model whose other layers run in between.
    double time_decode(int batch, int s_q, int reps, double max_total_s = 3.0, bool hot = false,
                       double min_total_s = 0.0);
    // CUDA sessions with device q/o: median device time (CUDA events around
    // each call, no host launch/sync latency) of the last time_decode; else 0.
    double last_device_seconds() const { return last_device_s_; }
    // 99th percentile of the wall times of the last time_decode, and how
    // many calls it timed: the tail a busy host shows first.
    double last_p99_seconds() const { return last_p99_s_; }
    int last_calls() const { return last_calls_; }

    // Select a path (GQA: expands the cache now, outside any timing).
    void select_path(gqla_path p);
    gqla_path active_path() const;
    gqla_device_type device() const;
    gqla_cost_report predict(int batch, int s_q) const;
    gqla_session* session() { return session_; }
    // true when q/o live in GPU memory (CUDA sessions with a loadable runtime).
    bool io_on_device() const { return q_dev_ != nullptr; }
    const WorkloadSpec& spec() const { return spec_; }

private:
    // Weights, sequences, path and the q/o buffers of a created session.
    void fill(const Preset& p, const SessionShape& shape, gqla_path wanted);

    WorkloadSpec spec_;
    gqla_session* session_ = nullptr;
    std::vector<gqla_seq_id> seqs_;   // set-major: set s is seqs_[s*batch, (s+1)*batch)
    std::vector<unsigned char> q_, o_;  // in spec.shape.io_dtype
    std::unique_ptr<CudaIoBuffer> q_dev_, o_dev_;
    std::unique_ptr<CudaEventTimer> timer_;
    double last_device_s_ = 0;
    double last_p99_s_ = 0;
    int last_calls_ = 0;
    int64_t next_group_ = 0;
};

}  // namespace gqla::bench

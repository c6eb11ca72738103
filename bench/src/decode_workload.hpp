// SPDX-License-Identifier: Apache-2.0
// One timed decode configuration on the library: a session holding `sets`
// disjoint batches of sequences of equal length, decoded in rotation so each
// call reads cache lines the previous calls did not touch (cold caches), or
// the same batch over and over (hot). A call is gqla_decode on the session's
// path or gqla_attention with a path of its own (prefill chunks, ragged
// mixes, the transient GQA form).
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
    SessionShape shape;  // device, path, cache dtype, threads, page size
    int batch = 1;
    int64_t context = 1024;        // tokens per sequence (the mean when `lengths` is given)
    std::vector<int64_t> lengths;  // if not empty: length of sequence i of every batch, i < batch
    int max_s_q = 1;               // largest s_q (or q_lens entry) called on this workload
    int64_t max_q_tokens = 0;      // most query rows of one call (config.max_q_tokens); 0: batch * max_s_q
    int sets = 1;                  // disjoint batches to rotate over
};

// One call's shape: gqla_decode (uniform s_q, the session's path) or
// gqla_attention (uniform s_q or ragged q_lens, `path` for this call).
struct CallShape {
    int batch = 1;
    int s_q = 1;                  // uniform calls
    std::vector<int32_t> q_lens;  // ragged calls: queries of each sequence (size batch)
    bool attention = false;
    gqla_path path = GQLA_PATH_AUTO;  // gqla_attention only
    int64_t query_rows() const;

    static CallShape decode(int batch, int s_q);
    static CallShape uniform(int batch, int s_q, gqla_path path);
    static CallShape ragged(std::vector<int32_t> q_lens, gqla_path path);
};

// How many disjoint batches make the rotation read >= cold_bytes of cache
// before a batch comes round again (1 when hot).
int sets_for_cold(const Preset& p, gqla_path path, gqla_dtype cache, int batch, int64_t context, double cold_bytes,
                  bool hot);

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
    // One call of `shape` on sequences [first, first + shape.batch).
    void call(int64_t first, const CallShape& shape, bool timed = false);

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
    // The same for calls of any shape.
    double time_calls(const CallShape& shape, int reps, double max_total_s = 3.0, bool hot = false,
                      double min_total_s = 0.0);
    // time_calls in steps, so that several workloads can take turns call by
    // call (time_interleaved): begin_timing warms up, each timed_call
    // times one call (after the cache sweep, if cold) and returns the
    // seconds it spent including the sweep, end_timing returns the median
    // and sets the last_* figures.
    void begin_timing(const CallShape& shape, bool hot);
    double timed_call(const CallShape& shape);
    double end_timing();
    int timed_calls() const { return static_cast<int>(times_.size()); }
    // The form the last gqla_attention call ran on (GQA, ABSORB or
    // GQA_TRANSIENT); AUTO before any.
    gqla_path last_path_taken() const { return last_taken_; }
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
    // First sequence of the next group of `batch` in the rotation (hot: the first).
    int64_t next_first(int batch, bool hot);

    WorkloadSpec spec_;
    gqla_session* session_ = nullptr;
    std::vector<gqla_seq_id> seqs_;     // set-major: set s is seqs_[s*batch, (s+1)*batch)
    std::vector<unsigned char> q_, o_;  // in spec.shape.io_dtype
    std::unique_ptr<CudaIoBuffer> q_dev_, o_dev_;
    std::unique_ptr<CudaEventTimer> timer_;
    std::vector<double> times_, device_times_;  // of the timing in progress
    bool hot_ = false;                          // of the timing in progress: one group, no sweep
    bool sweep_caches_ = false;                 // cold CPU timing: sweep before each call
    double last_device_s_ = 0;
    double last_p99_s_ = 0;
    int last_calls_ = 0;
    int64_t next_group_ = 0;
    gqla_path last_taken_ = GQLA_PATH_AUTO;
};

// Times `shape` on every workload, the workloads taking turns call by call
// (reps calls each; stops early once max_total_s per workload is spent,
// after >= 3 calls each), and returns each one's median wall time; each
// workload's last_* figures describe its own calls. On a shared host, or one
// whose memory speed moves between allocations, rows timed this way compare
// like with like; rows timed one after the other may not.
std::vector<double> time_interleaved(const std::vector<DecodeWorkload*>& works, const CallShape& shape, int reps,
                                     double max_total_s, bool hot);

}  // namespace gqla::bench

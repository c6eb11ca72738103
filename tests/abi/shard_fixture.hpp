// SPDX-License-Identifier: Apache-2.0
// Group-sharded sessions under test: one full session and one session per
// shard of the same layer, fed the same tokens (GQA kind: each shard its
// KV heads' slice, through a strided view of the full k/v), decoded with the
// same queries (each shard reads its heads' slice of q and writes its slice
// of a shared o/lse, the all-gather over heads), and a host mirror of the
// inputs for the float64 reference.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gqla/gqla.h"

namespace shards {

constexpr double kF32Tol = 1e-5;

// REQUIRE a call succeeded, showing the library's message when it did not.
void ok(gqla_status st);
// Whether the last failure's message contains `needle` (shown on failure).
bool message_has(const char* needle);
gqla_stats stats_of(gqla_session* s);

struct Shard {
    int32_t begin, count;
};

// Options of a fixture beyond the layer's config.
struct Options {
    std::vector<Shard> shards;
    int32_t keep_latent = 1;          // of the shard sessions (the full one keeps it)
    bool shard_rows_weights = false;  // upload only the shard's rows of W_UKV
    uint64_t seed = 0;                // of the random data; 0 = fresh (GQLA_TEST_SEED replays)
};

// Output of one attention call: rows [N, H, Dv] and lse [N, H].
struct Output {
    std::vector<float> o, lse;
    gqla_path taken = GQLA_PATH_AUTO;  // of the last shard (or of the full session)
};

class Fixture {
public:
    Fixture(const gqla_config& full, Options opt);
    ~Fixture();
    Fixture(const Fixture&) = delete;
    Fixture& operator=(const Fixture&) = delete;

    const gqla_config& config() const { return cfg_; }
    gqla_session* full() const { return full_; }
    const std::vector<gqla_session*>& ranks() const { return ranks_; }
    std::mt19937_64& rng() { return rng_; }
    uint64_t seed() const { return seed_; }

    // A sequence in every session; returns its index in the mirror.
    int add();
    // n random tokens of `layer` appended to sequence `seq` of every session.
    void append(int seq, int32_t layer, int64_t n);
    // Forks sequence `seq` in every session; returns the child's index.
    int fork(int seq);

    // Fresh random queries: q_lens[i] per sequence (empty: uniform s_q).
    std::vector<float> queries(const std::vector<int32_t>& q_lens);
    // One call on the full session / on every shard (their o and lse
    // gathered over heads). q_lens empty: gqla_decode with uniform s_q
    // (session path); else gqla_attention with `path` (ragged).
    gqla_status run_full(int32_t layer, const std::vector<int>& seqs, int32_t s_q, const std::vector<int32_t>& q_lens,
                         const std::vector<float>& q, gqla_path path, Output& out) const;
    gqla_status run_shards(int32_t layer, const std::vector<int>& seqs, int32_t s_q, const std::vector<int32_t>& q_lens,
                           const std::vector<float>& q, gqla_path path, Output& out) const;
    // Float64 reference of the call (inputs as the cache stores them).
    void reference(int32_t layer, const std::vector<int>& seqs, const std::vector<int32_t>& q_lens,
                   const std::vector<float>& q, std::vector<double>& o, std::vector<double>& lse) const;

    // Checks shards against the full session and both against the reference.
    void check_call(int32_t layer, const std::vector<int>& seqs, int32_t s_q, const std::vector<int32_t>& q_lens,
                    gqla_path path, double tol);

    int32_t q_dim() const;
    int32_t v_dim() const;
    std::vector<float>& weights(int32_t layer) { return w_[static_cast<size_t>(layer)]; }
    // Id of mirrored sequence `seq` in session 0 (full) or 1 + shard index.
    gqla_seq_id id_of(int seq, size_t session) const { return seqs_[static_cast<size_t>(seq)].ids[session]; }

private:
    struct Rows {
        std::vector<float> a, b;  // per layer: k/c rows then v/kr rows, io values
    };
    struct Mirror {
        std::vector<Rows> layers;
        std::vector<gqla_seq_id> ids;  // [0] full session, then one per shard
    };
    gqla_status run(gqla_session* s, int32_t layer, const std::vector<gqla_seq_id>& ids, int32_t s_q,
                    const std::vector<int32_t>& q_lens, const float* q, float* o, float* lse, int32_t head0,
                    int32_t heads, gqla_path path, gqla_path* taken) const;
    std::vector<gqla_seq_id> ids_of(const std::vector<int>& seqs, size_t session) const;
    void set_weights(gqla_session* s, int32_t layer, const Shard* shard);

    gqla_config cfg_;
    Options opt_;
    uint64_t seed_;
    std::mt19937_64 rng_;
    gqla_session* full_ = nullptr;
    std::vector<gqla_session*> ranks_;
    std::vector<std::vector<float>> w_;  // per layer
    std::vector<Mirror> seqs_;
};

// The device of the configs below (CPU unless a test program sets another:
// tests/cuda runs these suites on the GPU).
gqla_device_type test_device();
void use_device(gqla_device_type device);

// Even shards: `n` shards of G / n groups each.
std::vector<Shard> even_shards(int32_t groups, int32_t n);
gqla_config gqla_layer(gqla_dtype cache, int32_t layers = 1);  // H=8, G=4, r=40, d_c=16, d_r=8, d_v=12
gqla_config gqa_layer(gqla_dtype cache);                       // H=8, G=4, D=24, Dv=16

}  // namespace shards

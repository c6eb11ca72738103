// SPDX-License-Identifier: Apache-2.0
// State of one run of the API-sequence fuzzer, shared by all its parts: the
// counters printed in the summary, the failure report (seed, call index and
// operation, for replay), the seeded random source whose draws decide the
// whole sequence, the features the run draws, and the check of each call's
// status against the statuses it may return.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gqla/gqla.h"

namespace fuzz {

// What the fuzzer exercises beyond the calls of its first version. Each
// feature makes random draws only when it is on, so with all of them off
// (--features base) a seed replays the sequence it gave before they existed
// call for call: the ctest entries that replay seeds recorded then
// (CMakeLists.txt) stay on the calls that once failed.
struct Features {
    bool fp8 = true;          // cache_dtype FP8_E4M3 (docs/fp8-cache.md)
    bool drop_latent = true;  // GQLA sessions with keep_latent = 0 (docs/sharding.md)
    bool attention = true;    // gqla_attention: ragged q_lens, per-call paths, sparse indices; max_q_tokens
    bool sequence_io = true;  // gqla_sequence_export and gqla_sequence_import
    // Group-sharded sessions (config.group_begin/group_count,
    // docs/sharding.md), drawn from a second random source so that the
    // other features' call stream stays that of a seed without them.
    bool shards = true;
    bool any() const { return fp8 || drop_latent || attention || sequence_io || shards; }
};

struct Run {
    uint64_t seed = 0;
    Features features;
    int64_t calls = 0;  // gqla calls made
    int64_t sessions = 0;
    int64_t shard_sessions = 0;   // of sessions: those serving some of their layer's groups
    int64_t cuda_sessions = 0;    // of sessions: those on a CUDA device (device AUTO on a GPU host)
    int64_t cuda_refused = 0;     // configs of device AUTO the CUDA backend refused (UNSUPPORTED)
    int64_t decodes_checked = 0;  // accepted gqla_decode and gqla_attention calls checked
    int64_t refused = 0;          // calls that returned an error (as expected)
    // Of decodes_checked: gqla_attention calls, sparse ones, those over an
    // 8-bit cache, and those whose check needed the bound of the 8-bit
    // expanded rows' rounding boundaries (shadow_session.hpp).
    int64_t attention_checked = 0;
    int64_t sparse_checked = 0;
    int64_t fp8_checked = 0;
    int64_t boundary_checked = 0;
    int64_t exports_checked = 0;  // accepted exports compared byte for byte
    int64_t imports = 0;          // accepted imports
    int64_t exports_fp8 = 0;      // of exports_checked, over an 8-bit cache
    int64_t imports_fp8 = 0;      // of imports, into an 8-bit cache
    bool verbose = false;
    const char* op = "";  // what is being exercised now
};
extern Run run;

// Reports a mismatch with the seed and call index to replay it, and exits 1.
[[noreturn]] void fail(const char* fmt, ...);

// The --features value that selects run.features ("all" when every one is on).
std::string features_name(const Features& f);
// Parses "all", "base" (none) or a comma-separated list of fp8, latent,
// attention, sequence_io; false when a name is unknown.
bool parse_features(const std::string& list, Features* out);

class Random {
public:
    explicit Random(uint64_t seed) : gen_(seed) {}
    int64_t range(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
    bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(gen_) < p; }
    double normal(double sd) { return std::normal_distribution<double>(0, sd)(gen_); }
    template <class T>
    T pick(const std::vector<T>& v) {
        return v[static_cast<size_t>(range(0, static_cast<int64_t>(v.size()) - 1))];
    }
    std::mt19937_64& gen() { return gen_; }

private:
    std::mt19937_64 gen_;
};

// Statuses a call may return: none = it must succeed.
struct Expect {
    uint32_t allowed = 0;
    void error(gqla_status s) { allowed |= 1u << s; }
    bool must_succeed() const { return allowed == 0; }
};

// Checks one call's status against the expectation; true when it succeeded.
bool check_status(const char* call, gqla_status st, const Expect& e);

}  // namespace fuzz

// SPDX-License-Identifier: Apache-2.0
// State of one run of the API-sequence fuzzer, shared by all its parts: the
// counters printed in the summary, the failure report (seed, call index and
// operation, for replay), the seeded random source whose draws decide the
// whole sequence, and the check of each call's status against the statuses
// it may return.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "gqla/gqla.h"

namespace fuzz {

struct Run {
    uint64_t seed = 0;
    int64_t calls = 0;  // gqla calls made
    int64_t sessions = 0;
    int64_t decodes_checked = 0;
    int64_t refused = 0;  // calls that returned an error (as expected)
    bool verbose = false;
    const char* op = "";  // what is being exercised now
};
extern Run run;

// Reports a mismatch with the seed and call index to replay it, and exits 1.
[[noreturn]] void fail(const char* fmt, ...);

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

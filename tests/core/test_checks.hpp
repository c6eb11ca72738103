// SPDX-License-Identifier: Apache-2.0
// Seeds and error measures shared by the core tests: every randomized test
// draws from a fresh seed (tests/test_seed.hpp), prints it when a check
// fails, and replays it when GQLA_TEST_SEED is set.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "tests/test_seed.hpp"

namespace core_test {

using gqla::test::replay_hint;
using gqla::test::test_seed;

// Error of lse against ref over n values: ||lse - ref|| / ||max(1, |ref|)||
// (L2 norms, max taken per element). lse is a log, so a relative error of
// values near zero would be fragile: there the absolute error counts, where
// every |ref| >= 1 this is the relative L2 error. +inf on a NaN or inf.
template <typename T>
double lse_error(const T* lse, const double* ref, size_t n) {
    double diff = 0.0, floor = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double got = static_cast<double>(lse[i]);
        if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
        const double scale = std::max(1.0, std::abs(ref[i]));
        diff += (got - ref[i]) * (got - ref[i]);
        floor += scale * scale;
    }
    return n ? std::sqrt(diff / floor) : 0.0;
}

}  // namespace core_test

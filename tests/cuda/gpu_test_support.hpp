// SPDX-License-Identifier: Apache-2.0
// What the doctest suites of this folder share: normal random inputs drawn
// from a suite's own engine (each suite keeps its engine type; its seed
// comes from run_seed.hpp), the cache dtypes' tolerances against the float64
// reference, and a CHECK that names what it measured.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "gqla/gqla.h"

namespace gqla::test {

// n values of N(0, scale^2) drawn from `engine` (a standard random engine).
template <class Engine, class = typename Engine::result_type>
std::vector<float> randn(Engine& engine, size_t n, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(engine);
    return v;
}

// Relative L2 bound of a cache dtype against the float64 reference.
inline double tolerance(gqla_dtype cache) {
    return cache == GQLA_DTYPE_F32 ? 1e-5 : cache == GQLA_DTYPE_F16 ? 2e-3 : 1e-2;
}

// CHECKs err <= tol, naming what was measured.
inline void check_error(const std::string& what, double err, double tol) {
    INFO(what);
    CHECK(err <= tol);
}

}  // namespace gqla::test

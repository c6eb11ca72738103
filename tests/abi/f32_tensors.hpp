// SPDX-License-Identifier: Apache-2.0
// Small helpers of the C ABI tests that build f32 host tensors by hand
// (merge, sequence export): status checks, random data, descriptors and the
// relative L2 error.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gqla/gqla.h"

namespace abi {

inline void require_ok(gqla_status st) {
    INFO(std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
}

// Standard normal f32 values: never zeros, fresh per draw.
inline std::vector<float> random_vector(std::mt19937_64& rng, size_t n) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// A contiguous host f32 tensor over v.
inline gqla_tensor host_f32(std::vector<float>& v, std::vector<int64_t> shape) {
    gqla_tensor t;
    REQUIRE(gqla_tensor_init(&t, v.data(), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()), shape.data()) ==
            GQLA_OK);
    return t;
}

// ||a - ref|| / ||ref||.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return std::sqrt(num / den);
}

}  // namespace abi

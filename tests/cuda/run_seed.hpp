// SPDX-License-Identifier: Apache-2.0
// The random seed of one run of a GPU test program (tests/test_seed.hpp:
// GQLA_TEST_SEED when set, to replay a run, otherwise a fresh one, so every
// run draws new inputs), fixed for the process and printed on first use, so
// the output of a failing run says how to replay it.
#pragma once

#include <cstdint>
#include <cstdio>

#include "tests/test_seed.hpp"

namespace gqla::test {

inline uint32_t run_seed() {
    static const uint32_t seed = [] {
        const uint32_t s = static_cast<uint32_t>(test_seed());
        std::printf("%s\n", replay_hint(s).c_str());
        std::fflush(stdout);
        return s;
    }();
    return seed;
}

}  // namespace gqla::test

// SPDX-License-Identifier: Apache-2.0
// The random seed of a randomized test, shared by the core, C ABI and GPU
// suites: GQLA_TEST_SEED when set (every test of the process then draws from
// it, to replay a failing run), otherwise a fresh seed per call; and the
// line a failing check prints so that the run can be replayed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace gqla::test {

inline uint64_t test_seed() {
    if (const char* replay = std::getenv("GQLA_TEST_SEED")) return std::strtoull(replay, nullptr, 10);
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// For doctest's INFO: which seed replays a failure.
inline std::string replay_hint(uint64_t seed) {
    return "random seed " + std::to_string(seed) + " (replay with GQLA_TEST_SEED=" + std::to_string(seed) + ")";
}

}  // namespace gqla::test

// SPDX-License-Identifier: Apache-2.0
// The group-sharded session suites of tests/abi (test_shards.cpp,
// test_shards_state.cpp) on CUDA sessions: the same cases, the same float64
// reference, with every config the fixtures build placed on GPU 0. Exits 77
// (skipped) where no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "gqla/gqla.h"
#include "tests/abi/shard_fixture.hpp"

int main(int argc, char** argv) {
    int32_t gpus = 0;
    if (gqla_device_count(GQLA_DEVICE_CUDA, &gpus) != GQLA_OK || gpus == 0) {
        std::puts("no CUDA device visible: skipped");
        return 77;
    }
    shards::use_device(GQLA_DEVICE_CUDA);
    doctest::Context context(argc, argv);
    return context.run();
}

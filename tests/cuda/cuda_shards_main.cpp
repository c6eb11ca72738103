// SPDX-License-Identifier: Apache-2.0
// The group-sharded session suites of tests/abi (test_shards.cpp,
// test_shards_state.cpp) on CUDA sessions: the same cases, the same float64
// reference, with every config the fixtures build placed on GPU 0. Exits 77
// (skipped) where no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gqla/gqla.h"
#include "tests/cuda/gpu_doctest_main.hpp"
#include "tests/abi/shard_fixture.hpp"

int main(int argc, char** argv) { return gpu_doctest_main(argc, argv, shards::use_device); }

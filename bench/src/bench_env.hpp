// SPDX-License-Identifier: Apache-2.0
// What every measurement in a run shares: the device the sessions land on,
// the machine roofline measured in this run, and the memory the bench may use.
#pragma once

#include <cstdint>

#include "gqla/gqla.h"
#include "machine_roofline.hpp"

namespace gqla::bench {

// Bytes of cache a cold rotation reads before a batch comes round again
// (the default of --cold-mib; validate-auto's GPU rotation is 4 times it).
constexpr double kColdBytes = 512.0 * 1024 * 1024;

struct BenchEnv {
    gqla_device_type device = GQLA_DEVICE_CPU;  // resolved (never AUTO)
    int threads = 0;                            // resolved CPU threads
    MachineRoofline roofline;
    uint64_t memory_cap = 0;  // bytes one case may allocate on the device
};

// Resolves --device auto the way sessions do (CUDA when a GPU is visible
// through the module), then measures or reads the roofline.
BenchEnv make_bench_env(gqla_device_type requested, int threads);

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
#include "bench_env.hpp"

#include <omp.h>

#include <cstring>

#include "support.hpp"

namespace gqla::bench {

BenchEnv make_bench_env(gqla_device_type requested, int threads) {
    BenchEnv env;
    env.threads = threads > 0 ? threads : omp_get_max_threads();
    env.device = requested;
    if (requested == GQLA_DEVICE_AUTO) env.device = resolve_auto_device();
    if (env.device == GQLA_DEVICE_CUDA) {
        env.roofline = cuda_roofline(0);
        gqla_probe_info info;
        std::memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        check(gqla_probe(GQLA_DEVICE_CUDA, 0, 0, &info), "gqla_probe(CUDA)");
        env.memory_cap = static_cast<uint64_t>(info.mem_gb * 0.6 * 1e9);
    } else {
        env.roofline = measure_cpu_roofline(env.threads);
        // Leave most of the memory to everything else running on the machine.
        env.memory_cap = static_cast<uint64_t>(0.35 * static_cast<double>(mem_available_bytes()));
        if (env.memory_cap == 0) env.memory_cap = uint64_t(4) << 30;
    }
    return env;
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// The two roofline numbers of the machine the bench runs on, measured in the
// same run as the timings they judge (a probe from another day, another
// thread count or another frequency state would make roofline fractions lie).
#pragma once

#include <string>

#include "gqla/gqla.h"

namespace gqla::bench {

struct MachineRoofline {
    double read_gbps = 0;         // GB/s (1e9), streaming read
    double peak_gflops = 0;       // f32 FMA peak, all threads
    double peak_bf16_gflops = 0;  // bf16 dot-product peak (CPU: AVX512-BF16; CUDA: tensor cores); 0 if none
    // Whether gqla's kernels on this device compute bf16 caches with bf16
    // dot products: CUDA (tensor cores), and CPUs with AVX512-BF16 unless
    // GQLA_MAX_ISA caps below it. Otherwise the CPU kernels widen bf16 to f32
    // and use f32 FMAs, so their roof stays the f32 FMA peak.
    bool kernels_use_bf16_dot = false;

    // The compute roof of gqla's kernels over a cache of this dtype.
    double peak_for(gqla_dtype cache) const {
        const bool bf16_roof = kernels_use_bf16_dot && cache == GQLA_DTYPE_BF16 && peak_bf16_gflops > peak_gflops;
        return bf16_roof ? peak_bf16_gflops : peak_gflops;
    }
    std::string source;  // how they were obtained
    std::string isa;     // CPU: the SIMD width used for the FMA peak
};

// CPU: multi-threaded streaming sum over >= 1 GiB and independent FMA chains
// on every thread, with the widest ISA the CPU reports (chosen at run time).
// On a CPU with AVX512-BF16 also the bf16 dot-product peak (twice the f32
// FMA rate), printed for reference: the CPU kernels do not use it.
MachineRoofline measure_cpu_roofline(int threads);

// CUDA: the calibrated probe of the library (gqla_probe with
// GQLA_PROBE_CALIBRATE).
MachineRoofline cuda_roofline(int device_index);

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// main() of gqla_cuda_backend_test: GPU tests of the CUDA backend through
// its vtable (no core needed), decode vs the float64 reference for GQA and
// GQLA (both paths). The cases, one per cache dtype each, named
// "<family> bf16" / " f16" / " f32" (but "causal rule"), which the ctest
// entries of tests/cuda/CMakeLists.txt select with doctest filters:
//   cuda_backend_gqa_cases.cpp     GQA kind: paged, ragged lengths, s_q > 1,
//                                  odd dims, TMA page shapes, forks; the causal rule
//   cuda_backend_gqla_cases.cpp    GQLA: absorb, a path switch mid-sequence,
//                                  latent kernel shapes, device io, GEMM plans
//   cuda_backend_graph_cases.cpp   CUDA graph replay after more appends,
//                                  stream switches
//   cuda_backend_ragged_cases.cpp  ragged calls, the transient GQA form of
//                                  GQLA, refused calls
//   cuda_backend_prefill_cases.cpp prefill chunks
// Exit 77 (ctest SKIP_RETURN_CODE) when no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "cuda_backend_fixture.hpp"
#include "cuda_suite_main.hpp"

int main(int argc, char** argv) {
    // The backend's own device count: this executable links the CUDA
    // module, not libgqla (no gqla_device_count).
    const gqla_backend_vtable* vt = gqla_cuda_backend_get(GQLA_BACKEND_ABI_VERSION);
    int32_t n = 0;
    const bool gpu = vt && vt->device_count(&n) == GQLA_OK && n > 0;
    if (gpu && !gqla::test::doctest_query_only(argc, argv)) {
        gqla_probe_info info{};
        info.struct_size = sizeof info;
        if (vt->probe(0, GQLA_PROBE_CALIBRATE, &info) == GQLA_OK)
            std::printf("probe: %s cc %d.%d, %d SMs, %.0f GB/s read, %.0f TFLOP/s bf16 (calibrated %d)\n", info.name,
                        info.cc_major, info.cc_minor, info.sm_count, info.read_gbps, info.peak_gflops_bf16 / 1e3,
                        info.calibrated);
    }
    return gqla::test::cuda_suite_main(argc, argv, gpu, "no CUDA device visible: skipping", gqla::test::reseed_rng);
}

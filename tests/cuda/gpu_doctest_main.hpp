// SPDX-License-Identifier: Apache-2.0
// main() of the GPU suites that run tests/abi's doctest cases on CUDA
// sessions: exit 77 (ctest's skip code) where no GPU is visible, else point
// the suite's fixtures at the GPU and run doctest. The including file
// defines DOCTEST_CONFIG_IMPLEMENT before including doctest.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>

#include "gqla/gqla.h"

inline int gpu_doctest_main(int argc, char** argv, void (*use_device)(gqla_device_type)) {
    int32_t gpus = 0;
    if (gqla_device_count(GQLA_DEVICE_CUDA, &gpus) != GQLA_OK || gpus == 0) {
        std::puts("no CUDA device visible: skipped");
        return 77;
    }
    use_device(GQLA_DEVICE_CUDA);
    doctest::Context context(argc, argv);
    return context.run();
}

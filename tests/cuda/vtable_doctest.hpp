// SPDX-License-Identifier: Apache-2.0
// doctest helpers of the suites over the CUDA backend's vtable
// (gqla_cuda_backend_test, gqla_cuda_nonfinite_test): one case per cache
// dtype under the names the ctest entries filter on, and a REQUIRE on a
// vtable call that shows the backend's error message.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "vtable_harness.hpp"

// The cases "NAME bf16", "NAME f16" and "NAME f32", each calling FN with
// that cache dtype. tests/cuda/CMakeLists.txt selects cases by these names
// (" bf16" selects every case of one dtype).
#define GQLA_CASES_PER_CACHE_DTYPE(NAME, FN)         \
    TEST_CASE(NAME " bf16") { FN(GQLA_DTYPE_BF16); } \
    TEST_CASE(NAME " f16") { FN(GQLA_DTYPE_F16); }   \
    TEST_CASE(NAME " f32") { FN(GQLA_DTYPE_F32); }

namespace gqla::test {

// A vtable call on `h`'s session returned GQLA_OK (else the case stops,
// showing `what` and the backend's message).
inline void require_ok(const Harness& h, gqla_status st, const char* what) {
    const std::string message = st == GQLA_OK ? std::string() : h.vt->error_message(h.ctx);
    INFO(std::string(what) << ": status " << int(st) << " " << message);
    REQUIRE(st == GQLA_OK);
}

}  // namespace gqla::test

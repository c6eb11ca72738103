// SPDX-License-Identifier: Apache-2.0
// Warnings the AVX-512 translation units (kernels_avx512.cpp,
// kernels_avx512bf16.cpp, kernels_amx.cpp) turn off for the rest of the
// unit; included first. GCC 12's AVX-512 headers build conversions on
// `__m512 __Y = __Y;` (_mm512_undefined_*), which -Wuninitialized reports at
// every inlined use.
#pragma once
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

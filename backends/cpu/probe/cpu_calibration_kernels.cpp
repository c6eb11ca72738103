// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/probe/cpu_calibration_kernels.hpp"

#include "core/cpu_features.hpp"
#include "gqla/gqla.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GQLA_X86 1
#endif

namespace gqla {

namespace {

// 12 chains: enough to cover FMA latency (4-5 cycles) times two FMA pipes on
// every current x86 core, so throughput, not latency, is measured. The chain
// loops are unrolled by pragma: rolled, g++ -O2 keeps the accumulators in
// memory and measures store-to-load forwarding instead of the FMA pipes.
constexpr int kChains = 12;

// Multiplier slightly below 1 and a small addend keep values finite and
// normal (denormals would slow some cores down).
constexpr float kMul = 0.999999f;
constexpr float kAdd = 1e-7f;

#ifdef GQLA_X86

// Through memory rather than _mm512_reduce_add_ps, whose g++ 12 expansion
// warns under a target attribute; it runs once per call, so speed is moot.
__attribute__((target("avx512f"))) float sum_lanes_avx512(__m512 v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    float s = 0;
    for (float x : lanes) s += x;
    return s;
}

__attribute__((target("avx512f"))) double fma_loop_avx512(uint64_t iters, float* sink) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m512 m = _mm512_set1_ps(kMul), c = _mm512_set1_ps(kAdd);
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], m, c);
    __m512 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
    *sink += sum_lanes_avx512(s);
    return static_cast<double>(iters) * kChains * 16 * 2;
}

// bf16 dot products (vdpbf16ps): 16 lanes x 2 products each per
// instruction, the instruction the bf16-dot kernel table runs bf16 caches on.
__attribute__((target("avx512f,avx512bf16"))) double dot_bf16_loop_avx512(uint64_t iters, float* sink) {
    __m512 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
    __m512 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm512_add_ps(s, acc[k]);
    *sink += sum_lanes_avx512(s);
    return static_cast<double>(iters) * kChains * 32 * 2;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(uint64_t iters, float* sink) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m256 m = _mm256_set1_ps(kMul), c = _mm256_set1_ps(kAdd);
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, c);
    __m256 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    for (float v : lanes) *sink += v;
    return static_cast<double>(iters) * kChains * 8 * 2;
}

// AVX without FMA: a separate multiply and add per lane (2 FLOPs, 2 uops).
__attribute__((target("avx"))) double mul_add_loop_avx(uint64_t iters, float* sink) {
    __m256 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m256 m = _mm256_set1_ps(kMul), c = _mm256_set1_ps(kAdd);
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_add_ps(_mm256_mul_ps(acc[k], m), c);
    __m256 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm256_add_ps(s, acc[k]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    for (float v : lanes) *sink += v;
    return static_cast<double>(iters) * kChains * 8 * 2;
}

// SSE2 is part of x86-64 itself, so this needs no attribute.
double mul_add_loop_sse(uint64_t iters, float* sink) {
    __m128 acc[kChains];
    for (int k = 0; k < kChains; ++k) acc[k] = _mm_set1_ps(1.0f + 0.01f * static_cast<float>(k));
    const __m128 m = _mm_set1_ps(kMul), c = _mm_set1_ps(kAdd);
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k) acc[k] = _mm_add_ps(_mm_mul_ps(acc[k], m), c);
    __m128 s = acc[0];
    for (int k = 1; k < kChains; ++k) s = _mm_add_ps(s, acc[k]);
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, s);
    for (float v : lanes) *sink += v;
    return static_cast<double>(iters) * kChains * 4 * 2;
}

__attribute__((target("avx512f"))) float read_loop_avx512(const float* p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return sum_lanes_avx512(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx"))) float read_loop_avx(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float s = 0;
    for (float v : lanes) s += v;
    return s;
}

float read_loop_sse(const float* p, size_t n) {
    __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 16) {
        a0 = _mm_add_ps(a0, _mm_load_ps(p + i));
        a1 = _mm_add_ps(a1, _mm_load_ps(p + i + 4));
        a2 = _mm_add_ps(a2, _mm_load_ps(p + i + 8));
        a3 = _mm_add_ps(a3, _mm_load_ps(p + i + 12));
    }
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, _mm_add_ps(_mm_add_ps(a0, a1), _mm_add_ps(a2, a3)));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

#else  // portable fallbacks: plain arrays the compiler may vectorize itself

double mul_add_loop_portable(uint64_t iters, float* sink) {
    constexpr int kLanes = 4;
    float acc[kChains][kLanes];
    for (int k = 0; k < kChains; ++k)
        for (int l = 0; l < kLanes; ++l) acc[k][l] = 1.0f + 0.01f * static_cast<float>(k);
    for (uint64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int k = 0; k < kChains; ++k)
            for (int l = 0; l < kLanes; ++l) acc[k][l] = acc[k][l] * kMul + kAdd;
    for (int k = 0; k < kChains; ++k)
        for (int l = 0; l < kLanes; ++l) *sink += acc[k][l];
    return static_cast<double>(iters) * kChains * kLanes * 2;
}

float read_loop_portable(const float* p, size_t n) {
    float a[16] = {};
    for (size_t i = 0; i < n; i += 16)
        for (int l = 0; l < 16; ++l) a[l] += p[i + l];
    float s = 0;
    for (float v : a) s += v;
    return s;
}

#endif

}  // namespace

uint64_t dependent_adds(uint64_t rounds) {
#ifdef GQLA_X86
    // Register + register: some cores fold chains of add-immediate in the
    // renamer, which would count more than one addition per cycle.
    uint64_t x = 0, step = 1;
    for (uint64_t i = 0; i < rounds; ++i) __asm__ volatile(".rept 64\n\tadd %1, %0\n\t.endr" : "+r"(x) : "r"(step));
    return rounds * 64;
#else
    (void)rounds;
    return 0;
#endif
}

FmaLoopFn pick_fma_loop(uint64_t isa_flags) {
#ifdef GQLA_X86
    if (isa_flags & GQLA_ISA_AVX512F) return fma_loop_avx512;
    if ((isa_flags & GQLA_ISA_AVX2) && (isa_flags & GQLA_ISA_FMA)) return fma_loop_avx2;
    if (isa_flags & GQLA_ISA_AVX) return mul_add_loop_avx;
    return mul_add_loop_sse;
#else
    (void)isa_flags;
    return mul_add_loop_portable;
#endif
}

FmaLoopFn pick_bf16_dot_loop(uint64_t isa_flags) {
#ifdef GQLA_X86
    if (isa_has(isa_flags, kIsaBf16Dot)) return dot_bf16_loop_avx512;
#else
    (void)isa_flags;
#endif
    return nullptr;
}

ReadLoopFn pick_read_loop(uint64_t isa_flags) {
#ifdef GQLA_X86
    if (isa_flags & GQLA_ISA_AVX512F) return read_loop_avx512;
    if (isa_flags & GQLA_ISA_AVX) return read_loop_avx;
    return read_loop_sse;
#else
    (void)isa_flags;
    return read_loop_portable;
#endif
}

}  // namespace gqla

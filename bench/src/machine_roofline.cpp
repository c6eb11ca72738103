// SPDX-License-Identifier: Apache-2.0
#include "machine_roofline.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cpu_features.hpp"
#include "support.hpp"

namespace gqla::bench {
namespace {

// --- read bandwidth ---------------------------------------------------------

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    float r = 0;
    for (float f : lanes) r += f;
    for (; i < n; ++i) r += p[i];
    return r;
}

float sum_scalar(const float* p, size_t n) {
    float r0 = 0, r1 = 0, r2 = 0, r3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        r0 += p[i];
        r1 += p[i + 1];
        r2 += p[i + 2];
        r3 += p[i + 3];
    }
    for (; i < n; ++i) r0 += p[i];
    return r0 + r1 + r2 + r3;
}

double measure_read_gbps(int threads, bool avx2) {
    const size_t bytes = size_t(1) << 30;  // 1 GiB: far beyond any last-level cache
    const size_t n = bytes / sizeof(float);
    float* buf = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!buf) return 0;
        // First touch from the threads that read it, so pages land near them.
#pragma omp parallel for schedule(static) num_threads(threads)
    for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
    double best = 0;
    volatile float sink = 0;
    for (int pass = 0; pass < 4; ++pass) {
        float total = 0;
        const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            const int nt = omp_get_num_threads(), id = omp_get_thread_num();
            const size_t chunk = (n / nt) & ~size_t(31);
            const size_t begin = chunk * id, end = id == nt - 1 ? n : begin + chunk;
            total += avx2 ? sum_avx2(buf + begin, end - begin) : sum_scalar(buf + begin, end - begin);
        }
        const double dt = now_s() - t0;
        sink = sink + total;
        if (pass > 0) best = std::max(best, bytes / dt / 1e9);  // pass 0 warms the TLB
    }
    std::free(buf);
    return best;
}

// --- FMA peak ---------------------------------------------------------------
// 12 independent accumulators hide the FMA latency (4-5 cycles x 2 pipes).

constexpr long kFmaIters = 4'000'000;
constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_avx512(long iters) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    // Summed by hand: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    float r = 0;
    for (float f : lanes) r += f;
    return r;
}

__attribute__((target("avx2,fma"))) float fma_avx2(long iters) {
    __m256 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, s);
    float r = 0;
    for (float f : lanes) r += f;
    return r;
}

// bf16 dot products (vdpbf16ps): 16 lanes x 2 products each per instruction,
// the instruction CPU kernels use on bf16 caches where the CPU has it.
__attribute__((target("avx512f,avx512bf16"))) float dot_bf16_avx512(long iters) {
    __m512 acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
    const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
    for (long i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    float r = 0;
    for (float f : lanes) r += f;
    return r;
}

double measure_bf16_dot_gflops(int threads) {
    volatile float sink = 0;
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
        const long iters = kFmaIters / 2;
        const double t0 = now_s();
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        total += dot_bf16_avx512(iters);
        const double dt = now_s() - t0;
        sink = sink + total;
        const double flops = 4.0 * iters * kChains * 16 * threads;  // 2 products + 2 adds per lane
        best = std::max(best, flops / dt / 1e9);
    }
    return best;
}

double measure_fma_gflops(int threads, int lanes) {
    volatile float sink = 0;
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
        long iters = kFmaIters / (lanes / 8);
        const double t0 = now_s();
        float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        total += lanes == 16 ? fma_avx512(iters) : fma_avx2(iters);
        const double dt = now_s() - t0;
        sink = sink + total;
        const double flops = 2.0 * iters * kChains * lanes * threads;
        best = std::max(best, flops / dt / 1e9);
    }
    return best;
}

}  // namespace

MachineRoofline measure_cpu_roofline(int threads) {
    if (threads <= 0) threads = omp_get_max_threads();
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    MachineRoofline m;
    m.read_gbps = measure_read_gbps(threads, avx2 || avx512);
    if (avx512) {
        m.peak_gflops = measure_fma_gflops(threads, 16);
        m.isa = "avx512";
    } else if (avx2) {
        m.peak_gflops = measure_fma_gflops(threads, 8);
        m.isa = "avx2";
    } else {
        m.isa = "none";
    }
    const bool bf16_dot = __builtin_cpu_supports("avx512bf16");
    if (bf16_dot) m.peak_bf16_gflops = measure_bf16_dot_gflops(threads);
    // The kernels follow the probe's ISA bits (GQLA_MAX_ISA applied) and take
    // the dot products only where they outrun the FMAs (a bf16 peak above
    // the f32 one in the probe).
    gqla_probe_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    m.kernels_use_bf16_dot = bf16_dot && gqla_probe(GQLA_DEVICE_CPU, 0, 0, &info) == GQLA_OK &&
                             isa_has(info.isa_flags, kIsaBf16Dot) && info.peak_gflops_bf16 > info.peak_gflops_f32;
    m.source = "measured: streaming sum over 1 GiB, " + std::to_string(kChains) + " independent FMA chains (" + m.isa +
               (bf16_dot ? "; and avx512bf16 dot chains" : "") + "), " + std::to_string(threads) + " threads";
    return m;
}

MachineRoofline cuda_roofline(int device_index) {
    gqla_probe_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    check(gqla_probe(GQLA_DEVICE_CUDA, device_index, GQLA_PROBE_CALIBRATE, &info), "gqla_probe(CUDA, calibrate)");
    MachineRoofline m;
    m.read_gbps = info.read_gbps;
    m.peak_gflops = info.peak_gflops_f32;
    m.peak_bf16_gflops = info.peak_gflops_bf16;
    m.source = std::string("gqla_probe(CUDA, calibrate): ") + info.name + (info.calibrated ? "" : " (estimated)");
    m.isa = "cuda";
    m.kernels_use_bf16_dot = true;
    return m;
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// Achieved / roofline factors of the CPU kernels, used by the cost model
// (docs/cost-model.md: time = max(m, c) + serial_share * min(m, c) + overhead).
//
// Current factors (2026-12-05), fitted by bench/fit_efficiency.py
// --serial-share 0.5 --read-cap-gbps 32 on a 2-vCPU Zen 5 EPYC (AMD family
// 26, KVM guest) to validate-auto runs kept in
// bench/results/cpu_zen5_fit_2026-12-05/ (three bf16-dot runs, three of the
// f32 tables):
//   * Reads are priced at min(probe, threads x 16 GB/s) (thread_read_gbps):
//     the kernels wait on their own misses, and their speed did not follow
//     the probe's reading, which moved between 36 and 51 GB/s from one
//     process to the next on that host while cell times moved by a median
//     4%. With that cap the memory factor fits at 1.0 for both tables.
//   * serial_share 0.5: on a CPU core the cache misses and the products of
//     one call only partly overlap; 0 (the maximum) left misses of up to 21%
//     regret at s_q = 4, the sum pushed the f32 tables' GQA compute factor
//     to its bound; 0.5 serves both (bf16: 55-56 of 57 cells right per run,
//     max regret 3-8%; f32 tables 56 of 57, max 2-8%, in-sample).
//   * Overheads: ~35-40 us per GQA-form call and ~120 us per absorb call
//     (its two projection GEMMs and their phases on the pool), fitted with
//     the rest.
//   Checked after the fit: two consecutive bf16 runs 56 and 56 of 57 (max
//   regret 3.4% / 10.5%), the f32 tables (AVX-512 without BF16) 56 of 57
//   (max 10.6%).
//   * bf16 caches on AMD family 25 (Zen 4: AVX-512 split into two 256-bit
//     halves, for `vdpbf16ps` as for FMAs) have their own set: with the Zen
//     5 set, two consecutive validate-auto runs on a 2-vCPU Zen 4 EPYC
//     (2026-12-06) picked right in 52 and 55 of 57 cells, max regret 21.5% /
//     12.2%: its absorb calls ran at 0.81-0.85 of their price at 4096 tokens
//     and more (a Zen 4 core keeps more of its bf16 dot peak in the absorb
//     kernel than a Zen 5 core, whose peak is twice as high), and the
//     misses were MLA-shaped s_q = 2 cells where the priced paths nearly
//     tie. Fitted on those two runs (bench/results/cpu_zen4_fit_2026-12-06/,
//     same --serial-share 0.5 --read-cap-gbps 32): 112 of 114 in-sample,
//     max 11.8%; out-of-sample check in docs/cost-model.md.
//   * 8-bit (fp8_e4m3) caches have their own set (kFp8), fitted the same
//     way (--serial-share 0.5 --read-cap-gbps 32) to one fp8 validate-auto
//     run on a 2-vCPU "Intel(R) Xeon(R) Processor" (AVX-512 with BF16 and
//     VBMI; 2026-12-07, bench/results/cpu_xeon_validate_auto_fp8_f32_factors.json).
//     Until then they took the f32 tables' factors, which priced the GQA
//     form's 8-bit rows at the read bandwidth: its MLA-shaped calls (one
//     head per group) ran at 2.2-2.4x their price, so AUTO took the GQA
//     path in 8 dense cells where absorb was 15-45% faster (58 of 66 right,
//     25% of predictions within +-35%) and in two sparse cells where it
//     was 2-4x slower. In-sample with kFp8: 64 of 66, max regret 12.6%, 99%
//     within +-35%; the check run after it is in docs/cost-model.md.
//   * The AMX table (absorb over bf16 and 8-bit latents on AMX tiles,
//     kernels_amx.cpp) has its own sets for those caches (kAmxBf16,
//     kAmxFp8), fitted the same way with --split-projection --max-compute 4
//     to one validate-auto run per dtype on a 2-vCPU "Intel(R) Xeon(R)
//     Processor" (family 6 model 167, AMX-BF16; 2026-12-07, bench/results/
//     cpu_xeon_amx_fit_2026-12-07/, with the check runs after it). The tiles run the absorb attention past
//     the f32 FMA peak (compute 1.6 of it) while its two projections stay
//     weight GEMVs on FMAs (absorb_projection_compute 0.22), so one compute
//     factor for both missed by 1.2-1.7x either way (short contexts are
//     projections, long ones attention). With the f32 tables' factors AUTO
//     took the GQA path where AMX absorb was up to 2.7x faster (42 of 57
//     right, max regret 166%). The GQA-path factors are this host's too: the
//     f32 tables' (fitted on Zen 5) priced its GQA calls 1.3-1.6x short.
//
// Earlier factors and what they were fitted on (history; the max() model
// with the probe's streaming bandwidth, no cap):
// f32 FMA kernels (hosts without AVX512-BF16, f16/f32 caches). Where the
// numbers come from (2-core AMD EPYC, Zen 4 class, bf16 cache, context 4096,
// timed through the vtable; median of >= 100 decodes):
//   GQA form (GQA 32x8, D=128, s_q=1): a hot cache (context 512) runs at
//     69 GFLOP/s on one thread, 0.71 of one core's FMA peak (~97 GFLOP/s),
//     i.e. the kernel keeps up with about 17 GB/s per core of bf16 K/V, so
//     streaming from memory stays the bound; 0.7 leaves room for the
//     softmax, the split merge and page switches.
//   Absorb (MLA 16 heads, s_q=1..2): 66-79 GFLOP/s on one thread, 0.68-0.81
//     of one core's FMA peak; 0.7 is the value used.
//   Overhead: the decode's phases on the backend's thread pool (one call
//     per former worksharing loop, each ending when its last chunk has run)
//     plus planning, about 10 us on an idle machine when it was measured
//     with OpenMP's barriers; not refitted since the pool replaced them.
// Memory and compute use the same factor here. Checked against
// `gqla-bench --validate-auto --device cpu --json` on an idle 2-core EPYC
// with a calibrated probe (34.9 GB/s, 233 GFLOP/s; 57 cells, data in
// bench/results/cpu_validate_auto_f32_kernels.json): AUTO picked the measured-faster
// path in every cell and 96% of predictions were within +-35%, so
// bench/fit_efficiency.py has nothing to improve there. When the bandwidth
// calibration fails (slow first touch of its buffer on a busy VM) the probe
// falls back to a spec estimate and predictions drift; GQLA_PROBE_CACHE
// pins a good calibration.
//   bf16 cache on AVX512-BF16 hosts (bf16 dot products, bf16 weight copies):
//     fitted by bench/fit_efficiency.py to `gqla-bench --validate-auto
//     --device cpu --json` on the same 2-core EPYC (Zen 4; 57 cells, probe
//     calibrated at ~31-35 GB/s and ~230 GFLOP/s f32; data in
//     bench/results/cpu_validate_auto.json). The cost model prices these
//     kernels against the bf16 dot peak (2x the probe's f32 FMA peak).
//     In-sample: AUTO picks the measured-faster path in 55/57 cells, mean
//     regret 0.7%, max 39%, 96% of predictions within +-35%. The absorb
//     memory factor is low because its small-batch steps are bound by the
//     weight GEMVs, which stream at ~60% of the read bandwidth.
//     Rechecked after buffers moved to huge pages and the bench began to
//     evict the weights between calls (as the other layers of a model do):
//     two runs, 55/57 cells, mean regret 0.15%, max 4.5% and 6.6%, 96-98%
//     within +-35% (bench/results/cpu_validate_auto_check.json); a refit
//     on them moves no decision, so the factors stay.
//   Prefill (gqla_attention with q_len > 16: wide kernels, rows in lanes)
//     is not a regime of its own here: the factors stay those fitted to
//     decode. Measured on the same EPYC (one thread, hot cache, 64 rows x
//     4096 tokens of GQA D=128): bf16-dot 172-181 GFLOP/s, ~0.75 of the bf16
//     dot peak (the 0.45 above prices it ~1.7x slow); f32 cache 92-94
//     GFLOP/s, ~0.8 of the f32 FMA peak. GQA_TRANSIENT adds its up-projection
//     (one core, 64 tokens x 512 x 256 per block): ~97 GFLOP/s in f32 with
//     its transposes, ~165-186 with bf16 dot products when the weights are
//     bf16.
//   Sparse calls in the GQA form gather 2 G + 1 rows of 128-256 bytes per
//     position and query (per group KC and VE, and kr), bound by memory
//     latency rather than bandwidth: 0.75 of the GQA path's memory factor.
//     On a 2-core Zen 5 EPYC random gathers of 128-256 byte rows with
//     prefetch reach 16-26 GB/s against ~48 streamed, and dense calls
//     themselves run at 1.5-2x the price of both paths there, so what the
//     factor must carry is the gathers' cost relative to streaming. First
//     set to 0.5, when the GQA-path cells ran at 2-4x their dense-priced
//     prediction; after the GQA kernels' FMA scores and block-ahead prefetch
//     AUTO then took the faster form in 16 and 15 of 20 cells (max regret
//     96% / 74%: LLaMA-3-8B-GQLA cells where the GQA form beat absorb), and
//     with 0.75 in 18 of 20 in two runs (mean regret 0.5% / 0.4%, max 6% /
//     5%; the latent-only picks 20 of 20).
#include "backends/cpu/backend_ops.hpp"
#include "backends/cpu/kernel_table.hpp"
#include "backends/cpu/workspace_layout.hpp"
#include "core/cpu_features.hpp"

namespace gqla::cpu {

namespace {

// Memory and compute factors and the overhead per call of one path.
struct PathFactors {
    double memory, compute, overhead_s;
};
// [0] the GQA path, [1] absorb.
using FactorSet = PathFactors[2];

constexpr FactorSet kF32Tables = {{1.0, 0.66, 40.2e-6}, {1.0, 0.796, 118.3e-6}};
constexpr FactorSet kBf16Dot = {{1.0, 0.33, 34.2e-6}, {1.0, 0.452, 119.3e-6}};
constexpr FactorSet kBf16DotZen4 = {{0.962, 0.447, 44.9e-6}, {0.624, 0.5175, 89.5e-6}};
// 8-bit (e4m3) caches, priced at the f32 FMA peak like the f32 tables but
// with their own kernels' rates: the GQA form widens every stored element
// for each of its few rows per group (about 11-12 GB/s of 8-bit rows on 2
// threads, whatever the shape), and absorb stages each latent block in bf16.
constexpr FactorSet kFp8 = {{0.47, 0.274, 76.8e-6}, {0.436, 0.5785, 275.0e-6}};
// The AMX table (Intel hosts), bf16 and 8-bit caches: absorb's compute
// factor prices its attention on tiles, kAmxProjection its projections.
constexpr FactorSet kAmxBf16 = {{0.625, 0.408, 69.0e-6}, {0.6, 1.6, 308.0e-6}};
constexpr FactorSet kAmxFp8 = {{0.485, 0.272, 83.0e-6}, {0.48, 1.3333, 332.0e-6}};
constexpr double kAmxProjectionBf16 = 0.22, kAmxProjectionFp8 = 0.20;
constexpr double kAmxWidePrefill = 0.45, kAmxFp8SparseGqaMemory = 0.5;

// AMD family 25 with the AVX512-BF16 table: Zen 4 (Zen 3, the same family,
// has no AVX-512). Read once: the identity does not change in a process.
bool is_zen4() {
    static const bool zen4 = [] {
        const CpuIdentity id = cpu_identity();
        return id.vendor == "AuthenticAMD" && id.family == 25;
    }();
    return zen4;
}

}  // namespace

void efficiency(const gqla_backend_desc* desc, gqla_backend_efficiency* inout) {
    inout->serial_share = 0.5;
    inout->thread_read_gbps = 16.0;
    inout->sparse_gqa_memory = 0.75;
    const bool bf16_dot = desc && desc->cache_dtype == GQLA_DTYPE_BF16 && best_kernels().isa == Isa::Avx512Bf16;
    const bool fp8 = desc && desc->cache_dtype == GQLA_DTYPE_FP8_E4M3;
    const bool amx = desc && (desc->cache_dtype == GQLA_DTYPE_BF16 || fp8) && best_kernels().isa == Isa::Amx;
    const FactorSet& f = amx         ? (fp8 ? kAmxFp8 : kAmxBf16)
                         : fp8       ? kFp8
                         : !bf16_dot ? kF32Tables
                         : is_zen4() ? kBf16DotZen4
                                     : kBf16Dot;
    if (amx) {
        inout->absorb_projection_compute = fp8 ? kAmxProjectionFp8 : kAmxProjectionBf16;
        // Calls of more than 16 queries a sequence run the wide GQA kernel
        // (gqa_form.cpp), which keeps more of the FMA peak than the narrow
        // one (fitted on the check runs' kept-cache prefill cells: 0.45 for
        // both dtypes; at the narrow kernel's factor the fp8 ones came out
        // 1.3-2x slower than priced and AUTO took absorb in 2 of 8).
        inout->prefill_compute = kAmxWidePrefill;
        inout->prefill_min_queries = kNarrowQueries + 1;
        inout->prefill_min_rows = 1;
        // Sparse 8-bit calls in the GQA form ran 1.3-1.8x past their price
        // at 0.75 (4 of 20 sparse cells wrong, max regret 75%).
        if (fp8) inout->sparse_gqa_memory = kAmxFp8SparseGqaMemory;
    }
    for (int path = 0; path < 2; ++path) {
        inout->memory[path] = f[path].memory;
        inout->compute[path] = f[path].compute;
        inout->overhead_s[path] = f[path].overhead_s;
    }
}

}  // namespace gqla::cpu

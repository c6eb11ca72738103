// SPDX-License-Identifier: Apache-2.0
// Roofline cost model of docs/cost-model.md and the AUTO path policy built on it.
#pragma once

#include <cstdint>

#include "gqla/gqla.h"

namespace gqla {

// Per-backend correction of the pure roofline, per path ([0] GQA path,
// [1] absorb path). Memory and compute get separate factors because a kernel
// can stream at a good fraction of peak bandwidth while its arithmetic runs
// far below the tensor peak (or the other way round); a single factor on
// max(memory, compute) cannot express that. The fixed overhead differs per
// path because the paths launch different numbers of kernels or passes.
// Defaults here are neutral (equal memory and compute factors) and priced by
// gqla_predict_cost, which has no backend to ask.
struct Efficiency {
    double memory[2] = {0.8, 0.6};        // achieved / peak bandwidth
    double compute[2] = {0.8, 0.6};       // achieved / peak FLOP rate
    double overhead_s[2] = {5e-6, 5e-6};  // fixed seconds per decode call
    // Achieved/roofline of the one-time expansion GEMM ([n, r] x [r, G*(d_c+d_v)]);
    // backends do not report it, so it keeps this default.
    double expand = 0.7;
    // GQA-form calls of at least prefill_min_queries queries and
    // prefill_min_rows rows per group: the compute factor of the backend's
    // prefill kernel (0: none; compute[kGqaPath] prices them too).
    double prefill_compute = 0.0;
    int prefill_min_queries = 0;
    int prefill_min_rows = 0;
    // Sparse GQA-form calls: the share of memory[kGqaPath] their gathers
    // reach (1: priced like dense calls).
    double sparse_gqa_memory = 1.0;
    // Fixed seconds of a GQA_TRANSIENT call's expansion launches.
    double transient_overhead_s = 0.0;
    // Calls of at least this many queries and rows per group, fewer rows than
    // prefill_min_rows, run on the prefill kernel with padded rows (0: none).
    int prefill_half_rows = 0;
    // Share of the smaller of memory and compute time that adds to the
    // larger (0: they overlap, the time is their maximum; 1: their sum).
    double serial_share = 0.0;
    // The absorb form's projections priced apart from its attention (0:
    // compute[kAbsorbPath] prices both): see gqla_backend_efficiency.
    double absorb_projection_compute = 0.0;
    // Read bandwidth one backend thread pulls at most (GB/s; 0: no limit
    // beyond the probe's): see gqla_backend_efficiency.
    double thread_read_gbps = 0.0;

    static constexpr int kGqaPath = 0;
    static constexpr int kAbsorbPath = 1;
};

// Defaults for a device before its backend reports its own factors (see
// backends/cpu/efficiency.cpp and the CUDA backend's vt_efficiency for the
// measured ones):
//   CPU : GQA path 0.7, absorb 0.6 for memory and compute (the absorb path
//         adds two small GEMMs and a long r-wide dot product per head and
//         token, which reach less of the roofline in SIMD code), 15 us per
//         call for both (fork/join of the thread team).
//   CUDA: GQA path 0.8, absorb 0.7 for memory and compute, 8 us per call
//         for both; the CUDA backend replaces all of them with factors fitted
//         to measurements.
Efficiency default_efficiency(gqla_device_type device);

// Storage dtype of W_UKV as the backend of `device` keeps it, which prices the
// absorb path's weight traffic: the CPU backend's projections read bf16
// copies for bf16 caches and f32 otherwise; the CUDA backend stores them in
// the cache dtype (16-bit tensor-core operands for bf16/f16 caches, f32
// otherwise).
gqla_dtype weight_storage_dtype(const gqla_config& cfg, gqla_device_type device);

// Peak FLOP/s (1e9) the cost model prices compute with: CUDA uses the tensor
// (bf16) peak for 16-bit caches and the f32 peak otherwise; CPU the f32 FMA
// peak, doubled for bf16 caches on AVX512-BF16 hosts whose kernels take the
// dot products (the probe's bf16 peak above its f32 one).
double priced_peak_gflops(const gqla_config& cfg, const gqla_probe_info& probe);

// Bytes and FLOPs of one decode step for both paths and the one-time cost of
// expanding the cache, priced on `probe`. cfg must be valid (dims resolved:
// value_dim, softmax_scale may be 0). Pure function.
//   GQA path: the expanded cache KC+VE (G*(d_c+d_v) per token) plus kr once
//     (d_r per token) in the cache dtype; GQA kind: K+V (G*(D+Dv)).
//   absorb:   the latent cache c+kr (r+d_r per token) plus W_UK and W_UV
//     (G*(d_c+d_v)*r, weight_storage_dtype) once per step.
//   both:     q read and o written in io_dtype (lse is ignored: 4 bytes per
//     head and token, never significant).
// Per path: memory_s = bytes / bandwidth and compute_s = flops / peak (pure
// roofline, as gqla.h documents them); time_s = max(memory_s / memory
// efficiency, compute_s / compute efficiency) + overhead; bound names the
// larger of those two efficiency-scaled terms.
// The cache of each sequence is read once per step for all s_q query tokens;
// FLOPs count the causal (query, key) pairs: query i of s_q sees
// context - s_q + 1 + i positions. The expansion covers the
// batch * context cached tokens of one layer.
// A sparse workload (w.topk > 0) scores min(topk, mean visible) positions
// per query, reads them per query (B * s_q * that many cache rows) and adds
// 4 * topk index bytes per query; the expansion still covers B * context.
// The probe must carry positive read_gbps and peak FLOP/s.
gqla_cost_report predict_cost(const gqla_config& cfg, const gqla_probe_info& probe, const gqla_workload& w,
                              const Efficiency& eff);

// One-time cost of building the expanded cache of `tokens` cached tokens of
// one layer: read the latent, write KC+VE, GEMM FLOPs 2*r*G*(d_c+d_v) per
// token (plus reading W_UKV once). Zero for the GQA kind. `tokens` is a
// double so that batch * context of any valid workload fits.
struct ExpansionCost {
    double bytes = 0;
    double flops = 0;
    double seconds = 0;
};
ExpansionCost expansion_cost(const gqla_config& cfg, const gqla_probe_info& probe, double tokens,
                             const Efficiency& eff);

// AUTO for GQLA sessions: picks a path per decode shape bucket (batch, context,
// s_q rounded to powers of two), switches only when the other path is
// predicted faster by a hysteresis margin, and switches to the GQA path only
// when the expansion cost is amortized over the decode steps expected at that
// shape. Deterministic; no I/O.
class PathPolicy {
public:
    PathPolicy(const gqla_config& cfg, const gqla_probe_info& probe, const Efficiency& eff);

    // Path to use for a decode of this shape, given the active one.
    // `cached_tokens` is the session's total cached tokens (prices expansion):
    // tokens of one layer summed over live sequences, since the gain it is
    // weighed against is that of one layer's decode call (both scale with the
    // number of layers, so comparing one layer is exact). active == AUTO (no
    // path yet) returns the better path at once, amortization included.
    gqla_path choose(int32_t batch, int64_t mean_context, int32_t q_len, gqla_path active, int64_t cached_tokens);

    // Path for a session with no decode history yet (batch 1, context 4096, s_q 1).
    // Absorb unless the GQA path is faster by the hysteresis margin: the latent
    // cache is kept anyway, the expanded one costs memory and append work.
    gqla_path initial() const;

    static constexpr double kHysteresis = 0.10;  // other path must be >= 10% faster
    // Consecutive calls of a bucket that must agree before the path switches.
    static constexpr int32_t kRequiredVotes = 2;
    static constexpr int kBuckets = 64;

    // Decode steps still expected at a shape: a sequence seen `mean_context`
    // tokens into its life is, on average, half way (tokens yet to come ~
    // tokens so far), and each step consumes q_len tokens. At least 1.
    static double expected_remaining_steps(int64_t mean_context, int32_t q_len);

private:
    // Best path for the shape ignoring history: the other path must beat
    // `active` by the margin, and a switch to GQA must pay for its expansion.
    gqla_path verdict(int32_t batch, int64_t mean_context, int32_t q_len, gqla_path active,
                      int64_t cached_tokens) const;
    static uint32_t bucket_key(int32_t batch, int64_t mean_context, int32_t q_len);

    gqla_config cfg_;
    gqla_probe_info probe_;
    Efficiency eff_;
    // bucket state kept small and fixed-size (no allocation on the decode path)
    struct Bucket {
        uint32_t key = 0;
        int32_t votes = 0;
        gqla_path best = GQLA_PATH_AUTO;
    };
    Bucket buckets_[kBuckets];
};

}  // namespace gqla

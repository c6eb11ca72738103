// SPDX-License-Identifier: Apache-2.0
// Roofline prices of one decode step (docs/cost-model.md). All counts are doubles:
// products like batch * context * H * r overflow 32 bits and lose nothing
// that matters in 53 bits of mantissa.
#include "core/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/config.hpp"
#include "core/cpu_features.hpp"
#include "core/dtype.hpp"

namespace gqla {

namespace {

struct Dims {
    double H, G, r, d_c, d_r, d_v, D, Dv;
};

Dims dims_of(const gqla_config& cfg) {
    Dims d{};
    d.H = cfg.num_heads;
    d.G = cfg.num_kv_heads;
    d.r = cfg.latent_dim;
    d.d_c = cfg.nope_dim;
    d.d_r = cfg.rope_dim;
    d.d_v = cfg.value_dim;
    d.D = cfg.head_dim;
    d.Dv = cfg.value_dim > 0 ? cfg.value_dim : cfg.head_dim;  // GQA kind: 0 = head_dim
    return d;
}

double bytes_per_second(const gqla_probe_info& probe) { return probe.read_gbps * 1e9; }

// The probe with read_gbps lowered to what the session's threads pull at most
// (Efficiency::thread_read_gbps): every price below reads it from there.
gqla_probe_info priced_probe(const gqla_config& cfg, const gqla_probe_info& probe, const Efficiency& eff) {
    gqla_probe_info p = probe;
    if (eff.thread_read_gbps > 0 && probe.device == GQLA_DEVICE_CPU) {
        const int32_t cores = std::max<int32_t>(1, probe.affinity_cores);
        const int32_t threads = cfg.num_threads > 0 ? std::min(cfg.num_threads, cores) : cores;
        p.read_gbps = std::min(p.read_gbps, threads * eff.thread_read_gbps);
    }
    return p;
}

// split_flops: the share of flops that runs at eff.absorb_projection_compute
// instead of eff.compute[path] (the absorb form's projections, where the
// backend prices them apart).
gqla_path_cost price(double bytes, double flops, const Efficiency& eff, int path, const gqla_probe_info& probe,
                     double peak_flops, double split_flops = 0.0) {
    gqla_path_cost c{};
    c.bytes = bytes;
    c.flops = flops;
    c.memory_s = bytes / bytes_per_second(probe);
    c.compute_s = flops / peak_flops;
    c.overhead_s = eff.overhead_s[path];
    const double achieved_memory_s = c.memory_s / eff.memory[path];
    const bool split = split_flops > 0 && eff.absorb_projection_compute > 0;
    const double achieved_compute_s = split ? (flops - split_flops) / peak_flops / eff.compute[path] +
                                                  split_flops / peak_flops / eff.absorb_projection_compute
                                            : c.compute_s / eff.compute[path];
    c.time_s = std::max(achieved_memory_s, achieved_compute_s) +
               eff.serial_share * std::min(achieved_memory_s, achieved_compute_s) + c.overhead_s;
    c.bound = achieved_compute_s > achieved_memory_s ? GQLA_BOUND_COMPUTE : GQLA_BOUND_MEMORY;
    return c;
}

}  // namespace

Efficiency default_efficiency(gqla_device_type device) {
    const bool cuda = device == GQLA_DEVICE_CUDA;
    const double gqa = cuda ? 0.8 : 0.7;
    const double absorb = cuda ? 0.7 : 0.6;
    const double overhead_s = cuda ? 8e-6 : 15e-6;
    Efficiency e;
    e.memory[Efficiency::kGqaPath] = e.compute[Efficiency::kGqaPath] = gqa;
    e.memory[Efficiency::kAbsorbPath] = e.compute[Efficiency::kAbsorbPath] = absorb;
    e.overhead_s[Efficiency::kGqaPath] = e.overhead_s[Efficiency::kAbsorbPath] = overhead_s;
    return e;
}

namespace {

// CPUs whose kernels run bf16 caches on AVX512-BF16 dot products (twice the
// f32 FMA rate; AMX tiles are not used, so its peak does not count). The
// probe reports a bf16 peak above the f32 one exactly where they do.
bool cpu_bf16_dot(const gqla_config& cfg, const gqla_probe_info& probe) {
    return probe.device == GQLA_DEVICE_CPU && cfg.cache_dtype == GQLA_DTYPE_BF16 &&
           isa_has(probe.isa_flags, kIsaBf16Dot) && probe.peak_gflops_bf16 > probe.peak_gflops_f32;
}

// Bytes of a cached row of n elements split into `groups` scale groups: an
// 8-bit cache stores 1 byte per element and an f32 scale per group
// (docs/fp8-cache.md), the others dtype_size per element and no scales.
double cache_row_bytes(const gqla_config& cfg, double n, double groups) {
    if (cfg.cache_dtype == GQLA_DTYPE_FP8_E4M3) return n + 4.0 * groups;
    return n * static_cast<double>(dtype_size(cfg.cache_dtype));
}
// The rope key kr: bf16 beside an 8-bit cache, else the cache dtype.
double rope_row_bytes(const gqla_config& cfg, double d_r) {
    return d_r * (cfg.cache_dtype == GQLA_DTYPE_FP8_E4M3 ? 2.0 : static_cast<double>(dtype_size(cfg.cache_dtype)));
}
double latent_scale_groups(double r) { return std::ceil(r / kFp8LatentBlock); }

}  // namespace

gqla_dtype weight_storage_dtype(const gqla_config& cfg, gqla_device_type device) {
    // CUDA stores W in the cache dtype; the CPU keeps bf16 copies of W for
    // the absorb projections when the cache is bf16 or fp8_e4m3, f32 otherwise.
    if (device == GQLA_DEVICE_CUDA || cfg.cache_dtype == GQLA_DTYPE_BF16) return cfg.cache_dtype;
    if (cfg.cache_dtype == GQLA_DTYPE_FP8_E4M3) return GQLA_DTYPE_BF16;  // the CPU's bf16 copies
    return GQLA_DTYPE_F32;
}

double priced_peak_gflops(const gqla_config& cfg, const gqla_probe_info& probe) {
    // The CUDA kernels widen 8-bit caches to f16 for the same tensor-core
    // products as 16-bit ones.
    const bool tensor_cores = cfg.cache_dtype == GQLA_DTYPE_BF16 || cfg.cache_dtype == GQLA_DTYPE_F16 ||
                              cfg.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    if (probe.device == GQLA_DEVICE_CUDA && tensor_cores && probe.peak_gflops_bf16 > 0) return probe.peak_gflops_bf16;
    if (cpu_bf16_dot(cfg, probe)) return 2.0 * probe.peak_gflops_f32;
    return probe.peak_gflops_f32;
}

namespace {

// expansion_cost on a probe priced_probe already capped.
ExpansionCost expansion_cost_priced(const gqla_config& cfg, const gqla_probe_info& probe, double tokens,
                                    const Efficiency& eff) {
    ExpansionCost e;
    if (cfg.kind != GQLA_KIND_GQLA || !(tokens > 0)) return e;
    const Dims d = dims_of(cfg);
    const double n = tokens;
    const double weight_elem = static_cast<double>(dtype_size(weight_storage_dtype(cfg, probe.device)));
    const double expanded_width = d.G * (d.d_c + d.d_v);
    // The CUDA backend stages the GEMM's products (in the cache dtype) in a
    // workspace and scatters them into the pages: the expanded rows cross
    // memory three times there (write, read, write), once on the CPU.
    const double expanded_passes = probe.device == GQLA_DEVICE_CUDA ? 3.0 : 1.0;
    e.bytes = n * cache_row_bytes(cfg, d.r, latent_scale_groups(d.r))                  // read the latent
              + expanded_passes * n * cache_row_bytes(cfg, expanded_width, 2.0 * d.G)  // write KC and VE
              + expanded_width * d.r * weight_elem;                                    // read W_UKV once
    e.flops = n * 2.0 * d.r * expanded_width;
    const double memory_s = e.bytes / bytes_per_second(probe);
    // The CPU expands with f32 GEMMs (oneDNN or the kernel table's) whatever
    // the cache dtype, so the bf16 dot-product peak does not apply to it.
    const double peak_gflops = probe.device == GQLA_DEVICE_CPU ? probe.peak_gflops_f32 : priced_peak_gflops(cfg, probe);
    const double compute_s = e.flops / (peak_gflops * 1e9);
    e.seconds = std::max(memory_s, compute_s) / eff.expand;
    return e;
}

}  // namespace

ExpansionCost expansion_cost(const gqla_config& cfg, const gqla_probe_info& measured, double tokens,
                             const Efficiency& eff) {
    return expansion_cost_priced(cfg, priced_probe(cfg, measured, eff), tokens, eff);
}

namespace {

// The GQA form over latent rows up-projected for one call: the expansion of
// every cached token the call reads (expansion_cost, at its own efficiency)
// and then the GQA form's attention over the expanded rows. The CUDA backend
// writes those rows to device memory and reads them back (twice the expanded
// width per token); the CPU backend expands tile by tile into scratch that
// stays in cache, so its attention reads only the latent (counted by the
// expansion) and kr.
gqla_path_cost transient_cost(const gqla_config& cfg, const gqla_probe_info& probe, double tokens, double qo_bytes,
                              double attention_flops, const Efficiency& eff) {
    const Dims d = dims_of(cfg);
    const double peak = priced_peak_gflops(cfg, probe) * 1e9;
    const bool spills = probe.device == GQLA_DEVICE_CUDA;
    const double expanded_width = d.G * (d.d_c + d.d_v);
    const double attention_bytes =
        tokens * ((spills ? cache_row_bytes(cfg, expanded_width, 2.0 * d.G) : 0.0) + rope_row_bytes(cfg, d.d_r)) +
        qo_bytes;
    const gqla_path_cost attend = price(attention_bytes, attention_flops, eff, Efficiency::kGqaPath, probe, peak);
    const ExpansionCost e = expansion_cost_priced(cfg, probe, tokens, eff);
    gqla_path_cost c{};
    c.bytes = attend.bytes + e.bytes;
    c.flops = attend.flops + e.flops;
    c.memory_s = c.bytes / bytes_per_second(probe);
    c.compute_s = c.flops / peak;
    c.overhead_s = attend.overhead_s + eff.transient_overhead_s;
    c.time_s = attend.time_s + e.seconds + eff.transient_overhead_s;
    c.bound = c.compute_s / eff.compute[Efficiency::kGqaPath] > c.memory_s / eff.memory[Efficiency::kGqaPath]
                  ? GQLA_BOUND_COMPUTE
                  : GQLA_BOUND_MEMORY;
    return c;
}

}  // namespace

gqla_cost_report predict_cost(const gqla_config& cfg, const gqla_probe_info& measured, const gqla_workload& w,
                              const Efficiency& eff) {
    const gqla_probe_info probe = priced_probe(cfg, measured, eff);
    gqla_cost_report rep{};
    rep.struct_size = sizeof(rep);
    const Dims d = dims_of(cfg);
    const double B = w.batch, L = static_cast<double>(w.context), s = w.q_len;
    const double cached_tokens = B * L;
    const double queries = B * s;  // query tokens of the step
    // (query, key) pairs a step scores: query i of s sees L - s + 1 + i
    // positions, L - (s - 1) / 2 on average (prefill chunks do about half
    // the rectangle; a decode step of s << L barely differs from s * L).
    const double visible = std::max(1.0, L - (std::min(s, L) - 1.0) / 2.0);
    // A sparse step (topk > 0) scores min(topk, visible) positions per query
    // and reads each query's rows on their own (the lists of a sequence's
    // queries differ), plus the index rows.
    const bool sparse = w.topk > 0;
    const double pairs = queries * (sparse ? std::min(static_cast<double>(w.topk), visible) : visible);
    const double tokens = sparse ? pairs : cached_tokens;  // cache rows read
    const double index_bytes = sparse ? queries * static_cast<double>(w.topk) * 4.0 : 0.0;
    const double io_elem = static_cast<double>(dtype_size(cfg.io_dtype));
    const double peak = priced_peak_gflops(cfg, probe) * 1e9;
    // GQA-form calls in the domain of the backend's prefill kernel are
    // priced at its compute factor (dense calls only: sparse ones gather).
    const double rows_per_group = s * d.H / d.G;
    Efficiency gqa_eff = eff;
    // Calls of fewer rows per group than a block but as many queries (MLA-
    // shaped chunks) may run there too, their blocks part padding.
    const bool prefill_full = rows_per_group >= eff.prefill_min_rows;
    const bool prefill_half =
        eff.prefill_half_rows > 0 && rows_per_group >= eff.prefill_half_rows && s >= eff.prefill_half_rows;
    if (eff.prefill_compute > 0 && !sparse && s >= eff.prefill_min_queries && (prefill_full || prefill_half))
        gqa_eff.compute[Efficiency::kGqaPath] =
            eff.prefill_compute * (prefill_full ? 1.0 : rows_per_group / eff.prefill_min_rows);
    // Sparse GQA-form calls gather a row per group, position and query
    // rather than streaming pages: the backend says how much slower.
    if (sparse) gqa_eff.memory[Efficiency::kGqaPath] *= eff.sparse_gqa_memory;

    if (cfg.kind == GQLA_KIND_GQA) {
        const double bytes = tokens * cache_row_bytes(cfg, d.G * (d.D + d.Dv), 2.0 * d.G) +
                             queries * d.H * (d.D + d.Dv) * io_elem  // q in, o out
                             + index_bytes;
        const double flops = pairs * d.H * (2.0 * d.D + 2.0 * d.Dv);
        rep.gqa = price(bytes, flops, gqa_eff, Efficiency::kGqaPath, probe, peak);
        rep.chosen = GQLA_PATH_GQA;
        rep.call_chosen = GQLA_PATH_GQA;
        return rep;
    }

    const double qo_bytes = queries * d.H * (d.d_c + d.d_r + d.d_v) * io_elem + index_bytes;

    const double gqa_bytes =
        tokens * (cache_row_bytes(cfg, d.G * (d.d_c + d.d_v), 2.0 * d.G) + rope_row_bytes(cfg, d.d_r)) + qo_bytes;
    const double gqa_flops = pairs * d.H * (2.0 * (d.d_c + d.d_r) + 2.0 * d.d_v);
    rep.gqa = price(gqa_bytes, gqa_flops, gqa_eff, Efficiency::kGqaPath, probe, peak);

    const double weight_elem = static_cast<double>(dtype_size(weight_storage_dtype(cfg, probe.device)));
    const double absorb_bytes =
        tokens * (cache_row_bytes(cfg, d.r, latent_scale_groups(d.r)) + rope_row_bytes(cfg, d.d_r)) +
        d.G * (d.d_c + d.d_v) * d.r * weight_elem  // W_UK and W_UV
        + qo_bytes;
    const double projection_flops = queries * d.H * 2.0 * (d.d_c + d.d_v) * d.r;  // q~ and o projections
    const double absorb_flops = pairs * d.H * (2.0 * (d.r + d.d_r) + 2.0 * d.r) + projection_flops;
    rep.absorb = price(absorb_bytes, absorb_flops, eff, Efficiency::kAbsorbPath, probe, peak, projection_flops);

    // A tie goes to absorb: it needs no expanded cache.
    rep.chosen = rep.gqa.time_s < rep.absorb.time_s ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;

    ExpansionCost e =
        expansion_cost_priced(cfg, probe, cached_tokens, eff);  // in double: batch * context may pass int64
    rep.expand_bytes = e.bytes;
    rep.expand_flops = e.flops;
    rep.expand_s = e.seconds;

    rep.transient = transient_cost(cfg, probe, tokens, qo_bytes, gqa_flops, gqa_eff);
    rep.call_chosen = rep.transient.time_s < rep.absorb.time_s ? GQLA_PATH_GQA_TRANSIENT : GQLA_PATH_ABSORB;
    return rep;
}

}  // namespace gqla

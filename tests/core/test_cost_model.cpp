// SPDX-License-Identifier: Apache-2.0
// Cost model (docs/cost-model.md) and the AUTO path policy: hand-counted bytes and
// FLOPs, the worked checks of docs/cost-model.md on synthetic GPU probes, and the policy's
// hysteresis and amortization rules.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "core/cost_model.hpp"

namespace {

using gqla::Efficiency;
using gqla::PathPolicy;

gqla_config gqla_cfg(int H, int G, int r, int d_c, int d_r, int d_v, gqla_dtype cache, gqla_dtype io) {
    gqla_config c{};
    c.struct_size = sizeof(c);
    c.kind = GQLA_KIND_GQLA;
    c.num_heads = H;
    c.num_kv_heads = G;
    c.latent_dim = r;
    c.nope_dim = d_c;
    c.rope_dim = d_r;
    c.value_dim = d_v;
    c.head_dim = d_c + d_r;
    c.num_layers = 1;
    c.cache_dtype = cache;
    c.io_dtype = io;
    return c;
}

gqla_config llama3_8b_gqla() { return gqla_cfg(32, 8, 512, 64, 64, 128, GQLA_DTYPE_BF16, GQLA_DTYPE_BF16); }
gqla_config deepseek_v3_mla() { return gqla_cfg(128, 128, 512, 128, 64, 128, GQLA_DTYPE_BF16, GQLA_DTYPE_BF16); }

gqla_probe_info gpu_probe(double bf16_tflops, double tbps) {
    gqla_probe_info p{};
    p.struct_size = sizeof(p);
    p.device = GQLA_DEVICE_CUDA;
    p.peak_gflops_bf16 = bf16_tflops * 1e3;
    p.peak_gflops_f32 = bf16_tflops * 1e3 / 16;  // must not be what a bf16 cache is priced with
    p.read_gbps = tbps * 1e3;
    return p;
}
gqla_probe_info h100_like() { return gpu_probe(990, 3.35); }
gqla_probe_info h20_like() { return gpu_probe(148, 4.0); }

// 1 GB/s and 1 GFLOP/s: seconds read as nanoseconds per byte / FLOP.
gqla_probe_info unit_cpu_probe() {
    gqla_probe_info p{};
    p.struct_size = sizeof(p);
    p.device = GQLA_DEVICE_CPU;
    p.read_gbps = 1;
    p.peak_gflops_f32 = 1;
    p.peak_gflops_bf16 = 1000;  // the CPU prices with f32 whatever the cache
    return p;
}

Efficiency uniform(double efficiency, double overhead_s) {
    Efficiency e;
    for (int path = 0; path < 2; ++path) {
        e.memory[path] = efficiency;
        e.compute[path] = efficiency;
        e.overhead_s[path] = overhead_s;
    }
    return e;
}

Efficiency pure_roofline() {
    Efficiency e = uniform(1, 0);
    e.expand = 1;
    return e;
}

gqla_workload workload(int32_t batch, int64_t context, int32_t q_len) {
    gqla_workload w{};
    w.struct_size = sizeof(w);
    w.batch = batch;
    w.context = context;
    w.q_len = q_len;
    return w;
}

gqla_path pick(const gqla_config& c, const gqla_probe_info& p, int32_t batch, int64_t context, int32_t q_len) {
    return gqla::predict_cost(c, p, workload(batch, context, q_len), pure_roofline()).chosen;
}

}  // namespace

TEST_CASE("cost model: bytes and FLOPs of a small GQLA config, counted by hand") {
    // H=4 G=2 r=8 d_c=4 d_r=2 d_v=6, f32 cache and io, CPU (f32 weights).
    // B=2, context 10, s_q 3: 20 cached tokens, 6 query tokens.
    const gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    const gqla_cost_report r = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), pure_roofline());
    // q/o: 6 query tokens x 4 heads x (4+2 in + 6 out) x 4 B = 1152
    // GQA path: 20 tokens x (2*(4+6) + 2) x 4 B = 1760
    CHECK(r.gqa.bytes == 1760 + 1152);
    // causal pairs: query i of 3 sees 8 + i positions, 9 on average: 6 x 9 = 54
    // 54 x 4 heads x (2*(4+2) + 2*6) = 216 x 24
    CHECK(r.gqa.flops == 5184);
    // absorb: 20 x (8+2) x 4 = 800, W_UKV 2*(4+6)*8 x 4 B (f32 on CPU) = 640
    CHECK(r.absorb.bytes == 800 + 640 + 1152);
    // 216 x (2*(8+2) + 2*8) = 7776, projections 6 x 4 x 2*(4+6)*8 = 3840
    CHECK(r.absorb.flops == 7776 + 3840);
    // expansion of 20 tokens: read 20x8x4 = 640, write 20x20x4 = 1600, W 640;
    // 20 x 2*8*(2*(4+6)) = 6400 FLOPs
    CHECK(r.expand_bytes == 640 + 1600 + 640);
    CHECK(r.expand_flops == 6400);
    CHECK(r.expand_s == doctest::Approx(6400e-9));  // compute-bound at 1 GFLOP/s

    CHECK(r.gqa.memory_s == doctest::Approx(2912e-9));
    CHECK(r.gqa.compute_s == doctest::Approx(5184e-9));
    CHECK(r.gqa.time_s == doctest::Approx(5184e-9));
    CHECK(r.absorb.time_s == doctest::Approx(11616e-9));
    CHECK(r.chosen == GQLA_PATH_GQA);
}

TEST_CASE("cost model: the CUDA expansion stages its products, so the expanded rows cross memory three times") {
    // As the worked case above (f32, 20 cached tokens): the CPU writes the
    // 1600 expanded bytes once; CUDA writes them to a workspace, reads them
    // back and writes them into the pages.
    const gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    gqla_probe_info cuda = unit_cpu_probe();
    cuda.device = GQLA_DEVICE_CUDA;
    const gqla_cost_report cpu_r = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), pure_roofline());
    const gqla_cost_report cuda_r = gqla::predict_cost(c, cuda, workload(2, 10, 3), pure_roofline());
    CHECK(cpu_r.expand_bytes == 640 + 1600 + 640);
    CHECK(cuda_r.expand_bytes == 640 + 3 * 1600 + 640);
    CHECK(cuda_r.expand_flops == cpu_r.expand_flops);
}

TEST_CASE("cost model: weights are priced in the cache dtype on CUDA; on CPU bf16 for bf16 caches, else f32") {
    gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_BF16, GQLA_DTYPE_F32);
    gqla_probe_info cuda = unit_cpu_probe();
    cuda.device = GQLA_DEVICE_CUDA;
    cuda.peak_gflops_bf16 = 1;
    const gqla_workload w = workload(2, 10, 3);
    const double qo = 1152, latent = 20 * 10 * 2;
    CHECK(gqla::predict_cost(c, unit_cpu_probe(), w, pure_roofline()).absorb.bytes == latent + 160 * 2 + qo);
    CHECK(gqla::predict_cost(c, cuda, w, pure_roofline()).absorb.bytes == latent + 160 * 2 + qo);
    CHECK(gqla::weight_storage_dtype(c, GQLA_DEVICE_CPU) == GQLA_DTYPE_BF16);
    CHECK(gqla::weight_storage_dtype(c, GQLA_DEVICE_CUDA) == GQLA_DTYPE_BF16);
    gqla_config f16 = c;
    f16.cache_dtype = GQLA_DTYPE_F16;
    const double latent16 = 20 * 10 * 2;
    CHECK(gqla::predict_cost(f16, unit_cpu_probe(), w, pure_roofline()).absorb.bytes == latent16 + 160 * 4 + qo);
    CHECK(gqla::weight_storage_dtype(f16, GQLA_DEVICE_CPU) == GQLA_DTYPE_F32);
    CHECK(gqla::weight_storage_dtype(f16, GQLA_DEVICE_CUDA) == GQLA_DTYPE_F16);
}

TEST_CASE("cost model: peak by device and cache dtype") {
    gqla_probe_info gpu = gpu_probe(100, 1);
    gqla_config bf16 = llama3_8b_gqla();
    gqla_config f32 = bf16;
    f32.cache_dtype = GQLA_DTYPE_F32;
    CHECK(gqla::priced_peak_gflops(bf16, gpu) == doctest::Approx(100e3));
    CHECK(gqla::priced_peak_gflops(f32, gpu) == doctest::Approx(100e3 / 16));
    gqla_config fp8 = bf16;
    fp8.kind = GQLA_KIND_GQA;
    fp8.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    CHECK(gqla::priced_peak_gflops(fp8, gpu) == doctest::Approx(100e3));  // widened to f16 for the tensor cores
    gqla_probe_info cpu = unit_cpu_probe();
    CHECK(gqla::priced_peak_gflops(bf16, cpu) == doctest::Approx(1));
    // AVX512-BF16 hosts run bf16 caches on bf16 dot products: twice the f32
    // FMA rate (and never the AMX peak, which the kernels do not use).
    cpu.isa_flags = GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL | GQLA_ISA_AVX512BF16 | GQLA_ISA_AMX;
    cpu.peak_gflops_bf16 = 32;
    CHECK(gqla::priced_peak_gflops(bf16, cpu) == doctest::Approx(2));
    CHECK(gqla::priced_peak_gflops(f32, cpu) == doctest::Approx(1));
    cpu.isa_flags &= ~static_cast<uint64_t>(GQLA_ISA_AVX512BF16);
    CHECK(gqla::priced_peak_gflops(bf16, cpu) == doctest::Approx(1));
}

TEST_CASE("cost model: GQA kind has one path, K+V bytes") {
    gqla_config c{};
    c.struct_size = sizeof(c);
    c.kind = GQLA_KIND_GQA;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.value_dim = 0;  // = head_dim
    c.num_layers = 1;
    c.cache_dtype = GQLA_DTYPE_F32;
    c.io_dtype = GQLA_DTYPE_F32;
    const gqla_cost_report r = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), pure_roofline());
    // 20 tokens x 2 heads x (8+8) x 4 B + 6 x 4 x (8+8) x 4 B
    CHECK(r.gqa.bytes == 2560 + 1536);
    CHECK(r.gqa.flops == 6 * 9 * 4 * 32);  // 6 queries seeing 9 positions on average
    CHECK(r.absorb.bytes == 0);
    CHECK(r.absorb.time_s == 0);
    CHECK(r.chosen == GQLA_PATH_GQA);
    CHECK(r.expand_s == 0);
}

TEST_CASE("cost model: bound classification, efficiency and overhead") {
    const gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    gqla_probe_info fast_compute = unit_cpu_probe();
    fast_compute.peak_gflops_f32 = 1000;
    Efficiency e = uniform(1, 0);
    e.memory[Efficiency::kGqaPath] = 0.5;
    e.memory[Efficiency::kAbsorbPath] = 0.25;
    e.overhead_s[Efficiency::kGqaPath] = 1e-6;
    e.overhead_s[Efficiency::kAbsorbPath] = 3e-6;
    const gqla_cost_report r = gqla::predict_cost(c, fast_compute, workload(2, 10, 3), e);
    CHECK(r.gqa.bound == GQLA_BOUND_MEMORY);
    CHECK(r.absorb.bound == GQLA_BOUND_MEMORY);
    // memory_s stays bytes / bandwidth; the efficiency only enters time_s
    CHECK(r.gqa.memory_s == doctest::Approx(2912e-9));
    CHECK(r.gqa.time_s == doctest::Approx(2912e-9 / 0.5 + 1e-6));
    CHECK(r.absorb.time_s == doctest::Approx(2592e-9 / 0.25 + 3e-6));
    CHECK(r.gqa.overhead_s == 1e-6);
    CHECK(r.absorb.overhead_s == 3e-6);

    const gqla_cost_report slow = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), pure_roofline());
    CHECK(slow.gqa.bound == GQLA_BOUND_COMPUTE);
    CHECK(slow.absorb.bound == GQLA_BOUND_COMPUTE);
}

TEST_CASE("cost model: memory and compute efficiencies scale their own term") {
    // GQA path at 1 GB/s, 1000 GFLOP/s: memory 2912 ns, compute 5.184 ns.
    const gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    gqla_probe_info p = unit_cpu_probe();
    p.peak_gflops_f32 = 1000;
    Efficiency e = pure_roofline();
    e.compute[Efficiency::kGqaPath] = 0.001;  // compute term 5184 ns now exceeds memory
    const gqla_cost_report r = gqla::predict_cost(c, p, workload(2, 10, 3), e);
    CHECK(r.gqa.compute_s == doctest::Approx(5.184e-9));  // the pure roofline term is reported
    CHECK(r.gqa.time_s == doctest::Approx(5184e-9));
    CHECK(r.gqa.bound == GQLA_BOUND_COMPUTE);
    // the absorb path keeps its own factors
    CHECK(r.absorb.bound == GQLA_BOUND_MEMORY);
    CHECK(r.absorb.time_s == doctest::Approx(2592e-9));

    // A slow memory factor on a compute-bound path changes nothing until it
    // overtakes the compute term.
    Efficiency m = pure_roofline();
    m.memory[Efficiency::kGqaPath] = 0.9;
    const gqla_cost_report slow = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), m);
    CHECK(slow.gqa.time_s == doctest::Approx(5184e-9));
    CHECK(slow.gqa.bound == GQLA_BOUND_COMPUTE);
}

TEST_CASE("cost model: serial_share adds that share of the smaller term to the larger") {
    // GQA path at 1 GB/s, 1 GFLOP/s: memory 2912 ns, compute 5184 ns.
    const gqla_config c = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    Efficiency e = pure_roofline();
    const double overlapped = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), e).gqa.time_s;
    CHECK(overlapped == doctest::Approx(5184e-9));
    e.serial_share = 1;
    const gqla_cost_report sum = gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), e);
    CHECK(sum.gqa.time_s == doctest::Approx(5184e-9 + 2912e-9));
    CHECK(sum.gqa.bound == GQLA_BOUND_COMPUTE);  // still the larger term
    e.serial_share = 0.5;
    e.overhead_s[Efficiency::kGqaPath] = 1e-6;
    CHECK(gqla::predict_cost(c, unit_cpu_probe(), workload(2, 10, 3), e).gqa.time_s ==
          doctest::Approx(5184e-9 + 0.5 * 2912e-9 + 1e-6));
}

TEST_CASE("cost model: thread_read_gbps caps the CPU bandwidth at the session's threads") {
    const gqla_config base = gqla_cfg(4, 2, 8, 4, 2, 6, GQLA_DTYPE_F32, GQLA_DTYPE_F32);
    gqla_probe_info p = unit_cpu_probe();
    p.read_gbps = 100;
    p.peak_gflops_f32 = 1e6;  // memory-bound
    p.affinity_cores = 4;
    Efficiency e = pure_roofline();
    const double uncapped = gqla::predict_cost(base, p, workload(2, 10, 3), e).gqa.time_s;
    CHECK(uncapped == doctest::Approx(29.12e-9).epsilon(1e-3));
    e.thread_read_gbps = 10;  // 4 threads pull 40 GB/s at most
    CHECK(gqla::predict_cost(base, p, workload(2, 10, 3), e).gqa.time_s == doctest::Approx(uncapped * 100 / 40));
    gqla_config two = base;
    two.num_threads = 2;  // the session's own threads, not the machine's
    CHECK(gqla::predict_cost(two, p, workload(2, 10, 3), e).gqa.time_s == doctest::Approx(uncapped * 100 / 20));
    gqla_config many = base;
    many.num_threads = 64;  // never more threads than the process may run on
    CHECK(gqla::predict_cost(many, p, workload(2, 10, 3), e).gqa.time_s == doctest::Approx(uncapped * 100 / 40));
    e.thread_read_gbps = 50;  // above the probe: the probe's bandwidth stands
    CHECK(gqla::predict_cost(base, p, workload(2, 10, 3), e).gqa.time_s == doctest::Approx(uncapped));
    // A GPU's bandwidth is not a sum over threads.
    gqla_probe_info gpu = h100_like();
    Efficiency g = pure_roofline();
    const double gpu_time = gqla::predict_cost(llama3_8b_gqla(), gpu, workload(64, 4096, 1), g).gqa.time_s;
    g.thread_read_gbps = 1;
    CHECK(gqla::predict_cost(llama3_8b_gqla(), gpu, workload(64, 4096, 1), g).gqa.time_s == doctest::Approx(gpu_time));
}

TEST_CASE("cost model: sparse GQA-form calls take the backend's gather share of the memory factor") {
    // LLaMA-3-8B-GQLA on the H100-like probe, K = 2048 of 65536: the GQA
    // forms are memory-bound, so halving their memory factor doubles their
    // time; absorb and dense calls keep their prices.
    const gqla_config c = llama3_8b_gqla();
    const gqla_probe_info p = h100_like();
    gqla_workload sparse = workload(64, 65536, 1), dense = workload(64, 2048, 1);
    sparse.topk = 2048;
    Efficiency full = pure_roofline(), half = pure_roofline();
    half.sparse_gqa_memory = 0.5;
    const gqla_cost_report a = gqla::predict_cost(c, p, sparse, full), b = gqla::predict_cost(c, p, sparse, half);
    REQUIRE(a.gqa.bound == GQLA_BOUND_MEMORY);
    CHECK(b.gqa.time_s == doctest::Approx(2 * a.gqa.time_s));
    CHECK(b.absorb.time_s == doctest::Approx(a.absorb.time_s));
    // The transient form's attention gathers too (its expansion does not).
    CHECK(b.transient.time_s > a.transient.time_s);
    CHECK(gqla::predict_cost(c, p, dense, half).gqa.time_s ==
          doctest::Approx(gqla::predict_cost(c, p, dense, full).gqa.time_s));
}

TEST_CASE("cost model: half-used prefill blocks are priced at the prefill factor times the rows used") {
    // DeepSeek-V3 (one head per group): s_q 96 fills 96 of a 128-row block.
    const gqla_config c = deepseek_v3_mla();
    const gqla_probe_info p = h100_like();
    Efficiency e = pure_roofline();
    e.compute[Efficiency::kGqaPath] = 0.1;
    e.prefill_compute = 0.5;
    e.prefill_min_queries = 16;
    e.prefill_min_rows = 128;
    const gqla_workload w = workload(8, 4096, 96), few = workload(8, 4096, 32);
    const double flops = gqla::predict_cost(c, p, w, e).gqa.flops;
    const double peak = 990e12;
    // Without the half-block domain the decode factor prices it.
    CHECK(gqla::predict_cost(c, p, w, e).gqa.time_s == doctest::Approx(flops / (peak * 0.1)));
    e.prefill_half_rows = 64;
    CHECK(gqla::predict_cost(c, p, w, e).gqa.time_s == doctest::Approx(flops / (peak * 0.5 * 96 / 128)));
    // Fewer queries than the half block: still the decode factor.
    const double few_flops = gqla::predict_cost(c, p, few, e).gqa.flops;
    CHECK(gqla::predict_cost(c, p, few, e).gqa.time_s == doctest::Approx(few_flops / (peak * 0.1)));
}

TEST_CASE("cost model: the backend's fixed cost of a transient expansion adds to the transient form only") {
    const gqla_config c = llama3_8b_gqla();
    const gqla_probe_info p = h100_like();
    Efficiency plain = pure_roofline(), launches = pure_roofline();
    launches.transient_overhead_s = 30e-6;
    const gqla_workload w = workload(1, 4096, 64);
    const gqla_cost_report a = gqla::predict_cost(c, p, w, plain), b = gqla::predict_cost(c, p, w, launches);
    CHECK(b.transient.time_s == doctest::Approx(a.transient.time_s + 30e-6));
    CHECK(b.transient.overhead_s == doctest::Approx(a.transient.overhead_s + 30e-6));
    CHECK(b.gqa.time_s == doctest::Approx(a.gqa.time_s));
    CHECK(b.absorb.time_s == doctest::Approx(a.absorb.time_s));
}

TEST_CASE("cost model: a large absorb overhead turns small decodes to the GQA path") {
    // LLaMA-3-8B-GQLA on H100-like specs: absorb wins the pure roofline at one
    // sequence of 4096 tokens, but not once it costs 150 us more per call.
    const gqla_config llama = llama3_8b_gqla();
    Efficiency e = pure_roofline();
    CHECK(gqla::predict_cost(llama, h100_like(), workload(1, 4096, 1), e).chosen == GQLA_PATH_ABSORB);
    e.overhead_s[Efficiency::kAbsorbPath] = 150e-6;
    CHECK(gqla::predict_cost(llama, h100_like(), workload(1, 4096, 1), e).chosen == GQLA_PATH_GQA);
}

TEST_CASE("cost model: docs/cost-model.md worked checks at batch 64, context 4096") {
    const gqla_config llama = llama3_8b_gqla();
    CHECK(pick(llama, h100_like(), 64, 4096, 1) == GQLA_PATH_ABSORB);
    CHECK(pick(llama, h100_like(), 64, 4096, 2) == GQLA_PATH_ABSORB);
    CHECK(pick(llama, h20_like(), 64, 4096, 1) == GQLA_PATH_ABSORB);
    CHECK(pick(llama, h20_like(), 64, 4096, 2) == GQLA_PATH_GQA);
    // "absorb turns compute-bound" on H20 with two query tokens
    const gqla_cost_report r = gqla::predict_cost(llama, h20_like(), workload(64, 4096, 2), pure_roofline());
    CHECK(r.absorb.bound == GQLA_BOUND_COMPUTE);
    CHECK(r.gqa.bound == GQLA_BOUND_MEMORY);

    const gqla_config dsv3 = deepseek_v3_mla();
    for (int s_q : {1, 2}) {
        CHECK(pick(dsv3, h100_like(), 64, 4096, s_q) == GQLA_PATH_ABSORB);
        CHECK(pick(dsv3, h20_like(), 64, 4096, s_q) == GQLA_PATH_ABSORB);
    }
}

TEST_CASE("cost model: worked checks across batch x context") {
    // The absorb path reads W_UK and W_UV (G*(d_c+d_v)*r elements) once per
    // step. With a single sequence of 512 tokens that weight traffic exceeds
    // what the smaller latent cache saves, so the GQA path wins there: the
    // absorb verdicts hold from batch * context >= 1024 cached tokens on.
    const gqla_config llama = llama3_8b_gqla();
    const gqla_config dsv3 = deepseek_v3_mla();
    for (int32_t batch : {1, 8, 64}) {
        for (int64_t context = 512; context <= 16384; context *= 2) {
            CAPTURE(batch);
            CAPTURE(context);
            const gqla_path absorb_expected = batch * context >= 1024 ? GQLA_PATH_ABSORB : GQLA_PATH_GQA;
            CHECK(pick(llama, h100_like(), batch, context, 1) == absorb_expected);
            CHECK(pick(llama, h100_like(), batch, context, 2) == absorb_expected);
            CHECK(pick(llama, h20_like(), batch, context, 1) == absorb_expected);
            CHECK(pick(llama, h20_like(), batch, context, 2) == GQLA_PATH_GQA);
            for (int s_q : {1, 2}) {
                CHECK(pick(dsv3, h100_like(), batch, context, s_q) == absorb_expected);
                CHECK(pick(dsv3, h20_like(), batch, context, s_q) == absorb_expected);
            }
        }
    }
}

TEST_CASE("path policy: GQA kind always uses the GQA path") {
    gqla_config c{};
    c.struct_size = sizeof(c);
    c.kind = GQLA_KIND_GQA;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.value_dim = 64;
    c.num_layers = 1;
    c.cache_dtype = GQLA_DTYPE_BF16;
    c.io_dtype = GQLA_DTYPE_F32;
    PathPolicy policy(c, h100_like(), pure_roofline());
    CHECK(policy.initial() == GQLA_PATH_GQA);
    for (int i = 0; i < 4; ++i) CHECK(policy.choose(8, 4096, 1, GQLA_PATH_GQA, 8 * 4096) == GQLA_PATH_GQA);
}

TEST_CASE("path policy: initial choice is the batch 1, context 4096, s_q 1 verdict") {
    CHECK(PathPolicy(llama3_8b_gqla(), h100_like(), pure_roofline()).initial() == GQLA_PATH_ABSORB);
    CHECK(PathPolicy(deepseek_v3_mla(), h20_like(), pure_roofline()).initial() == GQLA_PATH_ABSORB);
    // A backend whose absorb kernel reaches a tenth of the roofline starts on GQA.
    Efficiency slow_absorb = pure_roofline();
    slow_absorb.memory[Efficiency::kAbsorbPath] = 0.1;
    slow_absorb.compute[Efficiency::kAbsorbPath] = 0.1;
    CHECK(PathPolicy(llama3_8b_gqla(), h20_like(), slow_absorb).initial() == GQLA_PATH_GQA);
}

TEST_CASE("path policy: no flip-flop when the paths are within the margin") {
    // DeepSeek-V3, one sequence of 512 tokens on H100: the paths differ by ~2%.
    const gqla_config c = deepseek_v3_mla();
    const gqla_cost_report r = gqla::predict_cost(c, h100_like(), workload(1, 512, 1), pure_roofline());
    const double ratio = r.absorb.time_s / r.gqa.time_s;
    REQUIRE(ratio > 1.0);
    REQUIRE(ratio < 1.0 + PathPolicy::kHysteresis);

    PathPolicy policy(c, h100_like(), pure_roofline());
    for (gqla_path active : {GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        for (int i = 0; i < 10; ++i) CHECK(policy.choose(1, 512, 1, active, 512) == active);
    }
}

TEST_CASE("path policy: switches after two consistent verdicts") {
    // LLaMA-3-8B-GQLA, s_q 2 on H20: the GQA path is ~20% faster.
    const gqla_config c = llama3_8b_gqla();
    PathPolicy policy(c, h20_like(), pure_roofline());
    const int64_t cached = 8 * 4096;
    CHECK(policy.choose(8, 4096, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_ABSORB);  // first vote
    CHECK(policy.choose(8, 4096, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_GQA);     // confirmed
    for (int i = 0; i < 4; ++i) CHECK(policy.choose(8, 4096, 2, GQLA_PATH_GQA, cached) == GQLA_PATH_GQA);

    // Back at s_q 1 absorb is faster by far: again two votes, no amortization needed.
    CHECK(policy.choose(8, 4096, 1, GQLA_PATH_GQA, cached) == GQLA_PATH_GQA);
    CHECK(policy.choose(8, 4096, 1, GQLA_PATH_GQA, cached) == GQLA_PATH_ABSORB);

    // A verdict for the active path in between resets the count.
    PathPolicy fresh(c, h20_like(), pure_roofline());
    CHECK(fresh.choose(8, 4096, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_ABSORB);
    CHECK(fresh.choose(8, 4096, 2, GQLA_PATH_GQA, cached) == GQLA_PATH_GQA);  // agrees with active
    CHECK(fresh.choose(8, 4096, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_ABSORB);
    CHECK(fresh.choose(8, 4096, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_GQA);

    // With no path yet the verdict applies at once.
    PathPolicy unset(c, h20_like(), pure_roofline());
    CHECK(unset.choose(8, 4096, 2, GQLA_PATH_AUTO, cached) == GQLA_PATH_GQA);
    CHECK(unset.choose(8, 4096, 1, GQLA_PATH_AUTO, cached) == GQLA_PATH_ABSORB);
}

TEST_CASE("path policy: expansion must be amortized before switching to GQA") {
    const gqla_config c = llama3_8b_gqla();
    const gqla_probe_info p = h20_like();
    const Efficiency e = pure_roofline();
    // A session holding a million cached tokens decodes 8 sequences.
    const int64_t cached = 1000000;
    const double expand_s = gqla::expansion_cost(c, p, cached, e).seconds;

    // Short sequences (64 tokens): GQA is faster by far more than the margin,
    // but the ~32 steps left cannot pay for expanding a million tokens.
    const gqla_cost_report short_ctx = gqla::predict_cost(c, p, workload(8, 64, 2), e);
    REQUIRE(short_ctx.gqa.time_s * (1 + PathPolicy::kHysteresis) < short_ctx.absorb.time_s);
    REQUIRE((short_ctx.absorb.time_s - short_ctx.gqa.time_s) * PathPolicy::expected_remaining_steps(64, 2) < expand_s);
    PathPolicy policy(c, p, e);
    for (int i = 0; i < 5; ++i) CHECK(policy.choose(8, 64, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_ABSORB);
    CHECK(policy.choose(8, 64, 2, GQLA_PATH_AUTO, cached) == GQLA_PATH_ABSORB);

    // Long sequences (64k tokens) at the same cache size: worth it.
    CHECK(policy.choose(8, 65536, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_ABSORB);
    CHECK(policy.choose(8, 65536, 2, GQLA_PATH_ABSORB, cached) == GQLA_PATH_GQA);
}

TEST_CASE("path policy: expected remaining steps") {
    CHECK(PathPolicy::expected_remaining_steps(4096, 1) == 4096);
    CHECK(PathPolicy::expected_remaining_steps(4096, 4) == 1024);
    CHECK(PathPolicy::expected_remaining_steps(0, 1) == 1);
}

TEST_CASE("cost model: device default efficiencies are fractions") {
    for (gqla_device_type d : {GQLA_DEVICE_CPU, GQLA_DEVICE_CUDA}) {
        const Efficiency e = gqla::default_efficiency(d);
        for (int path = 0; path < 2; ++path) {
            CAPTURE(path);
            CHECK(e.memory[path] > 0);
            CHECK(e.memory[path] <= 1);
            CHECK(e.compute[path] > 0);
            CHECK(e.compute[path] <= 1);
            CHECK(e.overhead_s[path] >= 0);
        }
    }
}

TEST_CASE("cost model: the largest workloads give finite, positive prices") {
    // batch * context and batch * s_q * context pass int64 here; every count
    // is computed in double, so nothing wraps (UBSan aborts on a wrap).
    const int64_t huge = std::numeric_limits<int64_t>::max();
    const int32_t big_batch = std::numeric_limits<int32_t>::max();
    const gqla_config gqa = [] {
        gqla_config c = llama3_8b_gqla();
        c.kind = GQLA_KIND_GQA;
        c.head_dim = 128;
        return c;
    }();
    for (const gqla_workload& w : {workload(2, huge, 1), workload(big_batch, huge, big_batch)}) {
        for (const gqla_config& c : {llama3_8b_gqla(), deepseek_v3_mla(), gqa}) {
            CAPTURE(w.batch);
            CAPTURE(c.kind);
            const gqla_cost_report r =
                gqla::predict_cost(c, h100_like(), w, gqla::default_efficiency(GQLA_DEVICE_CUDA));
            const bool latent = c.kind == GQLA_KIND_GQLA;
            for (const gqla_path_cost* p : {&r.gqa, &r.absorb}) {
                if (p == &r.absorb && !latent) continue;
                for (double v : {p->bytes, p->flops, p->memory_s, p->compute_s, p->time_s}) {
                    CHECK(std::isfinite(v));
                    CHECK(v > 0);
                }
            }
            if (latent) {
                for (double v : {r.expand_bytes, r.expand_flops, r.expand_s}) {
                    CHECK(std::isfinite(v));
                    CHECK(v > 0);
                }
                // The expansion covers batch * context tokens: at least that many latent reads.
                CHECK(r.expand_bytes >= 2.0 * static_cast<double>(huge));
            }
        }
    }
}

// SPDX-License-Identifier: Apache-2.0
// CPU calibration: the FLOPs-per-cycle table for the three classes of x86
// vector units, the cap at the theoretical peak, the statistics over trials,
// the measured clock, and the per-number measured flag of the probe.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cpu/probe/cpu_calibration.hpp"
#include "backends/cpu/probe/cpu_calibration_kernels.hpp"
#include "backends/cpu/probe/cpu_calibration_measures.hpp"
#include "backends/cpu/probe/cpu_calibration_stats.hpp"
#include "backends/cpu/probe/cpu_estimates.hpp"
#include "core/cpu_features.hpp"
#include "core/cpu_topology.hpp"
#include "backends/cpu/probe/cpu_probe.hpp"
#include "core/probe.hpp"

namespace {

constexpr uint64_t kAvx = GQLA_ISA_SSE42 | GQLA_ISA_AVX;
constexpr uint64_t kAvx2Fma = kAvx | GQLA_ISA_AVX2 | GQLA_ISA_FMA | GQLA_ISA_F16C;
constexpr uint64_t kAvx512 = kAvx2Fma | GQLA_ISA_AVX512F | GQLA_ISA_AVX512BW | GQLA_ISA_AVX512VL;

gqla::CpuIdentity cpu(const char* vendor, uint32_t family, uint32_t model) {
    gqla::CpuIdentity id;
    id.vendor = vendor;
    id.family = family;
    id.model_number = model;
    return id;
}

gqla::ThreadSample sample(double units, double start_s, double end_s, double cpu_s) {
    const auto t0 = gqla::CalibrationClock::time_point{};
    gqla::ThreadSample s;
    s.units = units;
    s.start = t0 + std::chrono::duration_cast<gqla::CalibrationClock::duration>(std::chrono::duration<double>(start_s));
    s.end = t0 + std::chrono::duration_cast<gqla::CalibrationClock::duration>(std::chrono::duration<double>(end_s));
    s.cpu_seconds = cpu_s;
    return s;
}

}  // namespace

TEST_CASE("calibration: FLOPs per cycle of AVX2, split and full-width AVX-512 cores") {
    const auto haswell = cpu("GenuineIntel", 6, 0x3F);
    const auto zen3 = cpu("AuthenticAMD", 0x19, 0x01);
    const auto zen4 = cpu("AuthenticAMD", 0x19, 0x11);
    const auto zen5_server = cpu("AuthenticAMD", 0x1A, 0x02);
    const auto zen5_desktop = cpu("AuthenticAMD", 0x1A, 0x44);
    const auto zen5_mobile = cpu("AuthenticAMD", 0x1A, 0x24);
    const auto sapphire_rapids = cpu("GenuineIntel", 6, 0x8F);

    // AVX2 + FMA: 2 FMA pipes x 8 lanes x 2 FLOPs.
    CHECK(gqla::estimated_f32_flops_per_cycle(haswell, kAvx2Fma) == 32);
    CHECK(gqla::estimated_f32_flops_per_cycle(zen3, kAvx2Fma) == 32);
    // AVX-512 on 256-bit pipes: a 512-bit op takes both halves, so no gain.
    CHECK(gqla::estimated_f32_flops_per_cycle(zen4, kAvx512) == 32);
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_mobile, kAvx512) == 32);
    // Full-width AVX-512: 2 pipes x 16 lanes x 2 FLOPs.
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_server, kAvx512) == 64);
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_desktop, kAvx512) == 64);
    CHECK(gqla::estimated_f32_flops_per_cycle(sapphire_rapids, kAvx512) == 64);
    // The ISA cap decides what the kernels (and so the estimate) may use.
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_server, kAvx2Fma) == 32);
    // Without FMA: one multiply and one add pipe.
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_server, kAvx) == 16);
    CHECK(gqla::estimated_f32_flops_per_cycle(zen5_server, GQLA_ISA_SSE42) == 8);

    CHECK(gqla::amd_splits_512_bit_ops(zen4));
    CHECK_FALSE(gqla::amd_splits_512_bit_ops(zen5_desktop));
    CHECK_FALSE(gqla::amd_splits_512_bit_ops(sapphire_rapids));
}

TEST_CASE("calibration: the peak at a measured clock caps the measurement") {
    gqla::CpuTopology topo;
    topo.affinity_physical_cores = 2;
    const auto zen5 = cpu("AuthenticAMD", 0x1A, 0x02);
    const double ceiling = gqla::theoretical_peak_gflops_f32(zen5, topo, kAvx512, 5.0);
    CHECK(ceiling == doctest::Approx(2 * 64 * 5.0));
    CHECK(gqla::theoretical_peak_gflops_f32(zen5, topo, kAvx512, 0.0) == 0);  // clock unknown

    CHECK(gqla::clamp_to_limit(1000.0, ceiling) == doctest::Approx(ceiling));  // a timing artefact
    CHECK(gqla::clamp_to_limit(600.0, ceiling) == 600.0);
    CHECK(gqla::clamp_to_limit(600.0, 0.0) == 600.0);  // no ceiling known: unchanged
}

TEST_CASE("calibration: rates and statistics over trials") {
    // Two threads, 1e9 units each; one started 1 ms late.
    const std::vector<gqla::ThreadSample> trial = {sample(1e9, 0.0, 0.010, 0.010), sample(1e9, 0.001, 0.011, 0.005)};
    CHECK(gqla::wall_rate(trial) == doctest::Approx(2e9 / 0.011 * 1e-9));
    // Per-thread CPU time: the second thread shared its core for half the trial.
    CHECK(gqla::cpu_time_rate(trial, 1e-3) == doctest::Approx((1e9 / 0.010 + 1e9 / 0.005) * 1e-9));
    CHECK(gqla::cpu_time_rate(trial, 0.006) == 0);  // too short on one thread to divide by
    CHECK(gqla::wall_rate({}) == 0);

    // Third best of six: one high outlier cannot decide it.
    CHECK(gqla::upper_quartile({30, 31, 70, 29, 32, 33}) == 32);
    CHECK(gqla::upper_quartile({5}) == 5);
    CHECK(gqla::upper_quartile({}) == 0);

    CHECK(gqla::long_enough_to_time(1e-3, 1e-9));
    CHECK_FALSE(gqla::long_enough_to_time(1e-3, 1e-5));
    const double res = gqla::steady_clock_resolution_seconds();
    CHECK(res > 0);
    CHECK(res < 1e-3);
}

#if defined(__x86_64__)
TEST_CASE("calibration: dependent additions give a plausible core clock") {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t adds = gqla::dependent_adds(16384);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    REQUIRE(adds == 16384u * 64);
    const double ghz = static_cast<double>(adds) / s * 1e-9;
    MESSAGE("dependent additions: " << ghz << " GHz");
    // Preemption can only lower the reading; no x86 core runs above ~7 GHz.
    CHECK(ghz < 7.0);
}
#endif

TEST_CASE("calibration: never above the FMA peak at the measured clock") {
    const gqla::CpuIdentity id = gqla::cpu_identity();
    const gqla::CpuTopology topo = gqla::cpu_topology();
    const uint64_t isa = gqla::cpu_isa_flags();
    const gqla::CpuCalibration c = gqla::calibrate_cpu(id, topo, isa);
    MESSAGE("peak " << c.peak_gflops_f32 << " GFLOP/s (" << c.peak_before_cap_gflops << " before the cap) at "
                    << c.clock_ghz << " GHz, read " << c.read_gbps << " GB/s, " << c.seconds * 1e3 << " ms");
    CHECK(c.peak_gflops_f32 > 0);
    CHECK(c.peak_gflops_f32 <= c.peak_before_cap_gflops);
    if (c.clock_ghz > 0) {
        const double ceiling = gqla::theoretical_peak_gflops_f32(id, topo, isa, c.clock_ghz);
        CHECK(c.peak_gflops_f32 <= ceiling * (1 + 1e-12));
        CHECK(c.peak_gflops_f32 == doctest::Approx(std::min(c.peak_before_cap_gflops, ceiling)));
    }
    CHECK(c.seconds < 1.0);
}

TEST_CASE("calibration: the probe says which numbers were measured") {
    gqla_probe_info est{};
    est.struct_size = sizeof(est);
    REQUIRE(gqla::probe_cpu(0, &est) == GQLA_OK);
    CHECK(est.measured == 0);
    CHECK(est.calibrated == 0);

    gqla_probe_info cal{};
    cal.struct_size = sizeof(cal);
    REQUIRE(gqla::probe_cpu(GQLA_PROBE_CALIBRATE, &cal) == GQLA_OK);
    CHECK((cal.measured & ~static_cast<int32_t>(GQLA_MEASURED_READ_GBPS | GQLA_MEASURED_PEAK)) == 0);
    CHECK(cal.calibrated == (cal.measured == (GQLA_MEASURED_READ_GBPS | GQLA_MEASURED_PEAK) ? 1 : 0));
    // The FMA measurement needs no memory and little time: it should succeed
    // even where the bandwidth buffer could not be faulted in (busy host).
    WARN((cal.measured & GQLA_MEASURED_PEAK) != 0);
    // An estimated number is the estimate exactly.
    if (!(cal.measured & GQLA_MEASURED_READ_GBPS)) CHECK(cal.read_gbps == est.read_gbps);
    if (!(cal.measured & GQLA_MEASURED_PEAK)) CHECK(cal.peak_gflops_f32 == est.peak_gflops_f32);
}

TEST_CASE("calibration: cache reads are measured as page-sized runs at random places, after the sweeps") {
    // Runs of 8 KiB in random order cannot stream much faster than whole
    // buffers in order: runs read from a cache would, every time. The two
    // are measured one after the other, though, and on a shared host (a
    // build beside the tests) the sweeps once read 12.9 GB/s and the runs
    // 38.2 right after: a calibration may be retried twice for that.
    bool runs_slower = false;
    for (int attempt = 0; attempt < 3 && !runs_slower; ++attempt) {
        const gqla::CpuCalibration c =
            gqla::calibrate_cpu(gqla::cpu_identity(), gqla::cpu_topology(), gqla::cpu_isa_flags());
        MESSAGE("sweeps " << c.stream_gbps << " GB/s, 8 KiB runs at random places " << c.read_gbps << " GB/s");
        if (c.stream_gbps == 0) {  // the buffers could not be faulted in within the budget (busy host): neither
            CHECK(c.read_gbps == 0);
            return;
        }
        // The runs read the buffers the sweeps filled: measured whenever the sweeps were.
        CHECK(c.read_gbps > 0);
        runs_slower = c.read_gbps < 2 * c.stream_gbps;
    }
    CHECK(runs_slower);
}

namespace {

// measure_read_gbps with 32 MiB per thread wanted, 16 MiB the minimum, the
// fill deadline (and the sweeps') already past when it starts and the fill
// cap `cap` after that.
gqla::ReadReading read_past_fill_deadline(std::chrono::seconds cap) {
    std::vector<int> cpus = gqla::cpu_topology().affinity_cpus;
    if (cpus.empty()) cpus.push_back(0);
    const size_t min_bytes = size_t(16) << 20;
    const auto now = gqla::CalibrationClock::now();
    return gqla::measure_read_gbps(cpus, 2 * min_bytes, min_bytes, gqla::cpu_isa_flags(), now, now + cap, now);
}

}  // namespace

TEST_CASE("calibration: a buffer whose first touch outlasts the fill deadline is still read") {
    // A guest whose host reclaimed its free memory faults pages in at a
    // fraction of the write speed; the fill then goes on past its deadline to
    // the minimum size (up to the cap) instead of giving up on the reading.
    const gqla::ReadReading r = read_past_fill_deadline(std::chrono::seconds(20));
    MESSAGE("sweeps " << r.stream_gbps << " GB/s, runs " << r.scattered_gbps << " GB/s");
    CHECK(r.stream_gbps > 0);
    CHECK(r.scattered_gbps > 0);
}

TEST_CASE("calibration: no reading when even the cap leaves the buffer short") {
    const gqla::ReadReading r = read_past_fill_deadline(std::chrono::seconds(0));
    CHECK(r.stream_gbps == 0);
    CHECK(r.scattered_gbps == 0);
}

// SPDX-License-Identifier: Apache-2.0
// gqla::probe_cpu and gqla::cpu_isa_flags: the host CPU described from
// cpuid and sysfs, with roofline numbers measured once per process (and ISA
// cap) or estimated from specs. The CPU backend's probe entry.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/probe/cpu_bf16_dot_check.hpp"
#include "backends/cpu/probe/cpu_probe.hpp"
#include "backends/cpu/probe/cpu_calibration.hpp"
#include "backends/cpu/probe/cpu_estimates.hpp"
#include "core/cpu_features.hpp"
#include "core/cpu_topology.hpp"
#include "core/error.hpp"
#include "core/probe.hpp"
#include "backends/cpu/probe/probe_cache_file.hpp"

namespace gqla {

namespace {

// What does not change while the process runs (hot-plugging CPUs or changing
// the affinity mask mid-run is not something a decode library must follow).
struct HostCpu {
    CpuIdentity identity;
    CpuTopology topology;
    uint64_t isa_uncapped = 0;
};

const HostCpu& host_cpu() {
    static const HostCpu host = [] {
        HostCpu h;
        h.identity = cpu_identity();
        h.topology = cpu_topology();
        h.isa_uncapped = cpu_isa_flags_uncapped();
        return h;
    }();
    return host;
}

struct Measured {
    uint64_t isa_flags = 0;
    // Which numbers were measured; a failed measurement leaves the estimate.
    bool read_measured = false, peak_measured = false;
    bool all_measured() const { return read_measured && peak_measured; }
    double read_gbps = 0;
    double peak_gflops_f32 = 0;
    int attempts = 0;
    std::chrono::steady_clock::time_point last_attempt;
};

// A failed calibration is usually a busy moment (the buffer could not be
// faulted in within the budget, threads were preempted), not a property of
// the machine: later probes measure again, a while apart and a few times at
// most, so a process that started during a build still gets real numbers.
constexpr int kCalibrationAttempts = 3;
constexpr std::chrono::seconds kCalibrationRetryAfter{2};

// Measurements per ISA cap seen in this process (normally exactly one). The
// lock also keeps two threads from calibrating at once, which would halve
// both results.
std::mutex g_calibration_mutex;
std::vector<Measured> g_measured;

constexpr double kImplausibleFraction = 0.25;

Measured calibrated_numbers(const HostCpu& host, uint64_t isa_flags) {
    std::lock_guard<std::mutex> lock(g_calibration_mutex);
    const auto now = std::chrono::steady_clock::now();
    Measured* earlier = nullptr;
    for (Measured& m : g_measured)
        if (m.isa_flags == isa_flags) earlier = &m;
    if (earlier && (earlier->all_measured() || earlier->attempts >= kCalibrationAttempts ||
                    now - earlier->last_attempt < kCalibrationRetryAfter))
        return *earlier;

    CalibrationRecord want;
    want.model = host.identity.model;
    want.affinity_cores = host.topology.affinity_cores;
    want.isa_flags = isa_flags;
    const char* cache_path = std::getenv("GQLA_PROBE_CACHE");
    const bool use_file = cache_path != nullptr && *cache_path != '\0';

    Measured m;
    m.isa_flags = isa_flags;
    m.attempts = earlier ? earlier->attempts + 1 : 1;
    m.last_attempt = now;
    CalibrationRecord stored;
    if (use_file && load_calibration(cache_path, want, &stored)) {
        m.read_gbps = stored.read_gbps;
        m.peak_gflops_f32 = stored.peak_gflops_f32;
        m.read_measured = m.peak_measured = true;
    } else {
        CpuCalibration c;
        try {
            c = calibrate_cpu(host.identity, host.topology, isa_flags);
        } catch (const std::exception&) {
            // No threads or no memory for the buffer: report estimates instead.
        }
        const double est_gbps = estimated_read_gbps(host.topology);
        const double est_peak = estimated_peak_gflops_f32(host.identity, host.topology, isa_flags);
        // A reading far below the spec estimate means the machine was busy
        // (threads preempted) rather than slow; pricing paths on it would be
        // worse than on the estimate, so such a reading counts as failed.
        if (c.read_gbps < kImplausibleFraction * est_gbps) c.read_gbps = 0;
        if (c.peak_gflops_f32 < kImplausibleFraction * est_peak) c.peak_gflops_f32 = 0;
        m.read_measured = c.read_gbps > 0;
        m.peak_measured = c.peak_gflops_f32 > 0;
        // A failed measurement (e.g. no memory for the buffer) falls back to
        // the estimate for that number rather than reporting 0.
        m.read_gbps = m.read_measured ? c.read_gbps : est_gbps;
        m.peak_gflops_f32 = m.peak_measured ? c.peak_gflops_f32 : est_peak;
        // A retry keeps what an earlier attempt did measure.
        if (earlier && earlier->read_measured && !m.read_measured) {
            m.read_measured = true;
            m.read_gbps = earlier->read_gbps;
        }
        if (earlier && earlier->peak_measured && !m.peak_measured) {
            m.peak_measured = true;
            m.peak_gflops_f32 = earlier->peak_gflops_f32;
        }
        if (use_file && m.all_measured()) {
            want.read_gbps = m.read_gbps;
            want.peak_gflops_f32 = m.peak_gflops_f32;
            want.clock_ghz = c.clock_ghz;
            save_calibration(cache_path, want);  // best effort: an unwritable path only costs a re-measure
        }
    }
    if (earlier)
        *earlier = m;
    else
        g_measured.push_back(m);
    return m;
}

void copy_string(char* dst, size_t cap, const std::string& src) {
    size_t n = std::min(cap - 1, src.size());
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}

}  // namespace

uint64_t cpu_isa_flags() {
    // Read on each call (cheap) so a process may tighten the cap before it
    // creates a session, as with ONEDNN_MAX_CPU_ISA.
    return cap_isa_flags(host_cpu().isa_uncapped, std::getenv("GQLA_MAX_ISA"));
}

gqla_status probe_cpu(uint32_t flags, gqla_probe_info* out) {
    if (out == nullptr) return GQLA_ERR_INVALID_ARGUMENT;
    const HostCpu& host = host_cpu();
    const uint64_t isa = cpu_isa_flags();

    gqla_probe_info info{};
    info.struct_size = sizeof(info);
    info.device = GQLA_DEVICE_CPU;
    info.device_index = 0;
    copy_string(info.vendor, sizeof info.vendor, host.identity.vendor);
    copy_string(info.name, sizeof info.name, host.identity.model);
    info.logical_cores = host.topology.logical_cores;
    info.physical_cores = host.topology.physical_cores;
    info.affinity_cores = host.topology.affinity_cores;
    info.isa_flags = isa;
    info.l1d_kb = host.topology.l1d_kb;
    info.l2_kb = host.topology.l2_kb;
    info.l3_kb = host.topology.l3_kb;

    if (flags & GQLA_PROBE_CALIBRATE) {
        Measured m = calibrated_numbers(host, isa);
        info.read_gbps = m.read_gbps;
        info.peak_gflops_f32 = m.peak_gflops_f32;
        info.measured = (m.read_measured ? GQLA_MEASURED_READ_GBPS : 0) | (m.peak_measured ? GQLA_MEASURED_PEAK : 0);
        info.calibrated = m.all_measured() ? 1 : 0;
    } else {
        info.read_gbps = estimated_read_gbps(host.topology);
        info.peak_gflops_f32 = estimated_peak_gflops_f32(host.identity, host.topology, isa);
        info.calibrated = 0;
        info.measured = 0;
    }
    // bf16 runs at the f32 rate where the kernels do not take the dot products.
    info.peak_gflops_bf16 = info.peak_gflops_f32 * (bf16_dot_pays(isa) ? bf16_to_f32_peak_ratio(isa) : 1.0);
    return deliver_probe_info(info, out);
}

}  // namespace gqla

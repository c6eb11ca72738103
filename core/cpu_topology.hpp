// SPDX-License-Identifier: Apache-2.0
// How many CPUs the host has and this process may use, and the cache sizes,
// read from Linux sysfs and the scheduler (each falls back to something sane).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gqla {

struct CpuTopology {
    int32_t logical_cores = 1;                 // online logical CPUs
    int32_t physical_cores = 1;                // distinct (package, core) pairs among them
    int32_t affinity_cores = 1;                // CPUs in this process's affinity mask
    int32_t affinity_physical_cores = 1;       // distinct cores among those (SMT siblings share FMA units)
    std::vector<int> affinity_cpus;            // their ids, for pinning calibration threads
    int32_t l1d_kb = 0, l2_kb = 0, l3_kb = 0;  // of cpu0 (0 when unknown)
    int32_t l3_shared_cpus = 0;                // CPUs sharing cpu0's L3 (0 when unknown)
    double base_clock_ghz = 0;                 // cpufreq base_frequency when exposed, else 0
};

CpuTopology cpu_topology();

// CPUs this process can keep busy: those of its affinity mask, fewer when a
// cgroup CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the
// tightest along the cgroup's ancestors) allows less, rounded up. At least 1.
int32_t usable_cpu_count();

// The pieces of usable_cpu_count, exposed to be tested on fixture text.
namespace cpu_quota {

// CPUs a cgroup v2 cpu.max line grants ("150000 100000" -> 1.5); 0 for
// "max ..." (no limit) or text that does not parse.
double from_cgroup_v2(const char* cpu_max);
// CPUs cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us grant; 0 for a quota
// of -1 (no limit) or text that does not parse.
double from_cgroup_v1(const char* quota_us, const char* period_us);

// The cgroup paths of /proc/self/cgroup text: the v2 one ("0::/a/b") and the
// v1 one of the cpu controller ("4:cpu,cpuacct:/a/b"); "" when absent.
struct CgroupPaths {
    std::string v2;
    std::string v1_cpu;
};
CgroupPaths parse_proc_self_cgroup(const std::string& text);

// Threads for `affinity_cpus` CPUs under a quota of `quota_cpus` (0: none).
int32_t thread_count(int32_t affinity_cpus, double quota_cpus);

}  // namespace cpu_quota

}  // namespace gqla

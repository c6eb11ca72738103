// How many CPUs the host has and this process may use, and the cache sizes,
// read from Linux sysfs and the scheduler (each falls back to something sane).
#pragma once

#include <cstdint>
#include <vector>

namespace gqla {

struct CpuTopology {
    int32_t logical_cores = 1;   // online logical CPUs
    int32_t physical_cores = 1;  // distinct (package, core) pairs among them
    int32_t affinity_cores = 1;  // CPUs in this process's affinity mask
    int32_t affinity_physical_cores = 1; // distinct cores among those (SMT siblings share FMA units)
    std::vector<int> affinity_cpus; // their ids, for pinning calibration threads
    int32_t l1d_kb = 0, l2_kb = 0, l3_kb = 0;  // of cpu0 (0 when unknown)
    int32_t l3_shared_cpus = 0;  // CPUs sharing cpu0's L3 (0 when unknown)
    double base_clock_ghz = 0;   // cpufreq base_frequency when exposed, else 0
};

CpuTopology cpu_topology();

}  // namespace gqla

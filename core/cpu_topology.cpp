#include "core/cpu_topology.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

namespace gqla {

namespace {

const char* kCpuDir = "/sys/devices/system/cpu";

// First line of a small sysfs file, "" when missing.
std::string read_line(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return std::string();
    char buf[256] = {};
    bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
    std::fclose(f);
    if (!ok) return std::string();
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

long read_long(const std::string& path, long fallback) {
    std::string s = read_line(path);
    if (s.empty()) return fallback;
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    return end == s.c_str() ? fallback : v;
}

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::vector<int> parse_cpu_list(const std::string& list) {
    std::vector<int> cpus;
    const char* p = list.c_str();
    while (*p) {
        char* end = nullptr;
        long a = std::strtol(p, &end, 10);
        if (end == p) break;
        long b = a;
        p = end;
        if (*p == '-') {
            b = std::strtol(p + 1, &end, 10);
            p = end;
        }
        for (long c = a; c <= b && c - a < 65536; ++c) cpus.push_back(static_cast<int>(c));
        if (*p == ',') ++p;
    }
    return cpus;
}

// sysfs cache sizes look like "32K", "1024K", "32M".
int32_t parse_size_kb(const std::string& s) {
    if (s.empty()) return 0;
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (end == s.c_str() || v <= 0) return 0;
    switch (*end) {
        case 'M': case 'm': return static_cast<int32_t>(v * 1024);
        case 'G': case 'g': return static_cast<int32_t>(v * 1024 * 1024);
        case 'K': case 'k': return static_cast<int32_t>(v);
        default: return static_cast<int32_t>(v / 1024);  // plain bytes
    }
}

std::pair<long, long> core_key(int cpu) {
    std::string dir = std::string(kCpuDir) + "/cpu" + std::to_string(cpu) + "/topology/";
    return {read_long(dir + "physical_package_id", 0), read_long(dir + "core_id", cpu)};
}

int32_t count_distinct_cores(const std::vector<int>& cpus) {
    std::set<std::pair<long, long>> cores;
    for (int c : cpus) cores.insert(core_key(c));
    return static_cast<int32_t>(cores.size());
}

std::vector<int> online_cpus() {
    std::vector<int> cpus = parse_cpu_list(read_line(std::string(kCpuDir) + "/online"));
    if (cpus.empty()) {
        unsigned n = std::thread::hardware_concurrency();
        for (unsigned i = 0; i < (n ? n : 1); ++i) cpus.push_back(static_cast<int>(i));
    }
    return cpus;
}

std::vector<int> affinity_cpus(const std::vector<int>& online) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        std::vector<int> cpus;
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
        if (!cpus.empty()) return cpus;
    }
#endif
    return online;
}

void read_caches(CpuTopology& t) {
    for (int index = 0; index < 16; ++index) {
        std::string dir = std::string(kCpuDir) + "/cpu0/cache/index" + std::to_string(index) + "/";
        long level = read_long(dir + "level", -1);
        if (level < 0) break;
        std::string type = read_line(dir + "type");
        int32_t kb = parse_size_kb(read_line(dir + "size"));
        if (level == 1 && type == "Data") t.l1d_kb = kb;
        else if (level == 2 && type != "Instruction") t.l2_kb = kb;
        else if (level == 3 && type != "Instruction") {
            t.l3_kb = kb;
            t.l3_shared_cpus = static_cast<int32_t>(parse_cpu_list(read_line(dir + "shared_cpu_list")).size());
        }
    }
#if defined(__linux__) && defined(_SC_LEVEL1_DCACHE_SIZE)
    // glibc answers from cpuid when sysfs lacks the cache directory (containers).
    if (t.l1d_kb == 0) t.l1d_kb = static_cast<int32_t>(sysconf(_SC_LEVEL1_DCACHE_SIZE) > 0 ? sysconf(_SC_LEVEL1_DCACHE_SIZE) / 1024 : 0);
    if (t.l2_kb == 0) t.l2_kb = static_cast<int32_t>(sysconf(_SC_LEVEL2_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL2_CACHE_SIZE) / 1024 : 0);
    if (t.l3_kb == 0) t.l3_kb = static_cast<int32_t>(sysconf(_SC_LEVEL3_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL3_CACHE_SIZE) / 1024 : 0);
#endif
}

}  // namespace

CpuTopology cpu_topology() {
    CpuTopology t;
    std::vector<int> online = online_cpus();
    t.logical_cores = static_cast<int32_t>(online.size());
    t.physical_cores = count_distinct_cores(online);
    t.affinity_cpus = affinity_cpus(online);
    t.affinity_cores = static_cast<int32_t>(t.affinity_cpus.size());
    t.affinity_physical_cores = count_distinct_cores(t.affinity_cpus);
    if (t.physical_cores < 1) t.physical_cores = 1;
    if (t.affinity_physical_cores < 1) t.affinity_physical_cores = 1;
    read_caches(t);
    long base_khz = read_long(std::string(kCpuDir) + "/cpu0/cpufreq/base_frequency", 0);
    t.base_clock_ghz = base_khz > 0 ? static_cast<double>(base_khz) * 1e-6 : 0.0;
    return t;
}

}  // namespace gqla

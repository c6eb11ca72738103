// SPDX-License-Identifier: Apache-2.0
#include "core/cpu_topology.hpp"

#include <algorithm>
#include <cmath>
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
        case 'M':
        case 'm':
            return static_cast<int32_t>(v * 1024);
        case 'G':
        case 'g':
            return static_cast<int32_t>(v * 1024 * 1024);
        case 'K':
        case 'k':
            return static_cast<int32_t>(v);
        default:
            return static_cast<int32_t>(v / 1024);  // plain bytes
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
        if (level == 1 && type == "Data")
            t.l1d_kb = kb;
        else if (level == 2 && type != "Instruction")
            t.l2_kb = kb;
        else if (level == 3 && type != "Instruction") {
            t.l3_kb = kb;
            t.l3_shared_cpus = static_cast<int32_t>(parse_cpu_list(read_line(dir + "shared_cpu_list")).size());
        }
    }
#if defined(__linux__) && defined(_SC_LEVEL1_DCACHE_SIZE)
    // glibc answers from cpuid when sysfs lacks the cache directory (containers).
    if (t.l1d_kb == 0)
        t.l1d_kb =
            static_cast<int32_t>(sysconf(_SC_LEVEL1_DCACHE_SIZE) > 0 ? sysconf(_SC_LEVEL1_DCACHE_SIZE) / 1024 : 0);
    if (t.l2_kb == 0)
        t.l2_kb = static_cast<int32_t>(sysconf(_SC_LEVEL2_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL2_CACHE_SIZE) / 1024 : 0);
    if (t.l3_kb == 0)
        t.l3_kb = static_cast<int32_t>(sysconf(_SC_LEVEL3_CACHE_SIZE) > 0 ? sysconf(_SC_LEVEL3_CACHE_SIZE) / 1024 : 0);
#endif
}

// Whole text of a small file, "" when missing.
std::string read_text(const char* path) {
    std::string text;
    std::FILE* f = std::fopen(path, "r");
    if (!f) return text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    return text;
}

// Calls visit(dir) for root + path and each of its ancestors up to root:
// a quota anywhere above a cgroup limits it too. With a cgroup namespace the
// path may not exist under root; walking up still reaches root itself.
template <class Visit>
void for_cgroup_and_ancestors(const std::string& root, std::string path, Visit visit) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    for (;;) {
        visit(root + path);
        if (path.empty()) return;
        const size_t slash = path.rfind('/');
        path.resize(slash == std::string::npos ? 0 : slash);
    }
}

// The tightest CPU quota of this process's cgroups, 0 when there is none.
double cgroup_quota_cpus() {
    const cpu_quota::CgroupPaths paths = cpu_quota::parse_proc_self_cgroup(read_text("/proc/self/cgroup"));
    double tightest = 0;
    auto tighten = [&](double cpus) {
        if (cpus > 0 && (tightest == 0 || cpus < tightest)) tightest = cpus;
    };
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
        for_cgroup_and_ancestors(root, paths.v2, [&](const std::string& dir) {
            tighten(cpu_quota::from_cgroup_v2(read_line(dir + "/cpu.max").c_str()));
        });
    for (const char* root : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"})
        for_cgroup_and_ancestors(root, paths.v1_cpu, [&](const std::string& dir) {
            tighten(cpu_quota::from_cgroup_v1(read_line(dir + "/cpu.cfs_quota_us").c_str(),
                                              read_line(dir + "/cpu.cfs_period_us").c_str()));
        });
    return tightest;
}

int32_t affinity_cpu_count() {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) return static_cast<int32_t>(online);
#endif
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? static_cast<int32_t>(n) : 1;
}

}  // namespace

namespace cpu_quota {

double from_cgroup_v2(const char* cpu_max) {
    const char* p = cpu_max;
    while (*p == ' ') ++p;
    if (std::strncmp(p, "max", 3) == 0) return 0;
    char* end = nullptr;
    const double quota = std::strtod(p, &end);
    if (end == p || !(quota > 0)) return 0;
    p = end;
    const double period = std::strtod(p, &end);
    if (end == p || !(period > 0)) return 0;
    return quota / period;
}

double from_cgroup_v1(const char* quota_us, const char* period_us) {
    char* end = nullptr;
    const double quota = std::strtod(quota_us, &end);
    if (end == quota_us || !(quota > 0)) return 0;  // -1: no limit
    const double period = std::strtod(period_us, &end);
    if (end == period_us || !(period > 0)) return 0;
    return quota / period;
}

CgroupPaths parse_proc_self_cgroup(const std::string& text) {
    CgroupPaths paths;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        // hierarchy-id:controller-list:path (the path may itself hold ':')
        const size_t c1 = line.find(':');
        const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string::npos) continue;
        const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1);
        const std::string path = line.substr(c2 + 1);
        if (id == "0" && controllers.empty()) {
            paths.v2 = path;
            continue;
        }
        for (size_t pos = 0; pos <= controllers.size();) {
            size_t comma = controllers.find(',', pos);
            if (comma == std::string::npos) comma = controllers.size();
            if (controllers.compare(pos, comma - pos, "cpu") == 0) paths.v1_cpu = path;
            pos = comma + 1;
        }
    }
    return paths;
}

int32_t thread_count(int32_t affinity_cpus, double quota_cpus) {
    int32_t n = std::max<int32_t>(1, affinity_cpus);
    // A quota of 1.5 CPUs still lets two threads run half the time each;
    // the small slack keeps 2.0 (2000000 / 1000000) from becoming 3.
    if (quota_cpus > 0) n = std::min(n, std::max<int32_t>(1, static_cast<int32_t>(std::ceil(quota_cpus - 1e-6))));
    return n;
}

}  // namespace cpu_quota

int32_t usable_cpu_count() { return cpu_quota::thread_count(affinity_cpu_count(), cgroup_quota_cpus()); }

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

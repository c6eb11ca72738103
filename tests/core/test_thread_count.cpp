// SPDX-License-Identifier: Apache-2.0
// Default thread count: the cgroup CPU quota files and /proc/self/cgroup as
// the kernel writes them, and how a quota caps the affinity mask.
#include <doctest/doctest.h>

#include "core/cpu_topology.hpp"

namespace q = gqla::cpu_quota;

TEST_CASE("cgroup v2 cpu.max: a quota in CPUs, none for max") {
    CHECK(q::from_cgroup_v2("max 100000\n") == 0.0);
    CHECK(q::from_cgroup_v2("max") == 0.0);
    CHECK(q::from_cgroup_v2("200000 100000\n") == doctest::Approx(2.0));
    CHECK(q::from_cgroup_v2("150000 100000") == doctest::Approx(1.5));
    CHECK(q::from_cgroup_v2("50000 100000") == doctest::Approx(0.5));
    CHECK(q::from_cgroup_v2("") == 0.0);
    CHECK(q::from_cgroup_v2("garbage") == 0.0);
    CHECK(q::from_cgroup_v2("100000") == 0.0);  // no period: not a quota we can read
    CHECK(q::from_cgroup_v2("100000 0") == 0.0);
}

TEST_CASE("cgroup v1 cfs quota: -1 is no limit") {
    CHECK(q::from_cgroup_v1("-1\n", "100000\n") == 0.0);
    CHECK(q::from_cgroup_v1("300000", "100000") == doctest::Approx(3.0));
    CHECK(q::from_cgroup_v1("25000", "100000") == doctest::Approx(0.25));
    CHECK(q::from_cgroup_v1("", "100000") == 0.0);  // file missing
    CHECK(q::from_cgroup_v1("100000", "") == 0.0);
    CHECK(q::from_cgroup_v1("100000", "0") == 0.0);
}

TEST_CASE("/proc/self/cgroup: the v2 path and the v1 cpu controller's path") {
    SUBCASE("cgroup v2 only") {
        const q::CgroupPaths p = q::parse_proc_self_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n");
        CHECK(p.v2 == "/user.slice/user-1000.slice/session-2.scope");
        CHECK(p.v1_cpu.empty());
    }
    SUBCASE("cgroup v1 with a combined cpu,cpuacct hierarchy") {
        const q::CgroupPaths p = q::parse_proc_self_cgroup(
            "12:pids:/docker/abc\n"
            "5:cpuacct,cpu:/docker/abc\n"
            "4:cpuset:/docker/other\n"
            "1:name=systemd:/docker/abc\n");
        CHECK(p.v1_cpu == "/docker/abc");
        CHECK(p.v2.empty());
    }
    SUBCASE("hybrid: both; cpuset and cpuacct alone are not the cpu controller") {
        const q::CgroupPaths p = q::parse_proc_self_cgroup(
            "3:cpuset:/a\n"
            "2:cpuacct:/b\n"
            "1:cpu:/c\n"
            "0::/d:with:colons");
        CHECK(p.v1_cpu == "/c");
        CHECK(p.v2 == "/d:with:colons");
    }
    SUBCASE("empty or malformed text") {
        const q::CgroupPaths p = q::parse_proc_self_cgroup("nonsense\n\n");
        CHECK(p.v2.empty());
        CHECK(p.v1_cpu.empty());
    }
}

TEST_CASE("thread count: affinity capped by the quota, rounded up, at least 1") {
    CHECK(q::thread_count(8, 0.0) == 8);  // no quota
    CHECK(q::thread_count(8, 2.0) == 2);
    CHECK(q::thread_count(8, 1.5) == 2);  // a partial CPU still runs a thread part of the time
    CHECK(q::thread_count(8, 0.25) == 1);
    CHECK(q::thread_count(2, 16.0) == 2);  // the mask is the tighter limit
    CHECK(q::thread_count(0, 0.0) == 1);
    CHECK(q::thread_count(64, 2000000.0 / 1000000.0) == 2);
}

TEST_CASE("usable_cpu_count stays within the affinity mask") {
    const gqla::CpuTopology t = gqla::cpu_topology();
    const int32_t n = gqla::usable_cpu_count();
    CHECK(n >= 1);
    CHECK(n <= t.affinity_cores);
}

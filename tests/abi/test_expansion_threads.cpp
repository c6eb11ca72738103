// SPDX-License-Identifier: Apache-2.0
// The expansion GEMM of an append on the GQA path runs on the session's own
// threads (docs/architecture.md, "Threading"): it starts no thread of its own
// that could keep spinning into the decode that follows, and its split of a
// one-token append over output columns gives the reference's answers.
#include <doctest/doctest.h>

#include <dirent.h>

#include "gqla/gqla.h"
#include "tests/abi/harness.hpp"

namespace {

// Threads of this process (entries of /proc/self/task); -1 where the
// system has no such directory.
int process_threads() {
    DIR* d = opendir("/proc/self/task");
    if (d == nullptr) return -1;
    int n = 0;
    while (const dirent* e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n;
}

}  // namespace

TEST_CASE("an expanding append runs on the session's threads and starts none") {
    // H=6, G=3: 3 * (96 + 80) = 528 expanded columns, enough for a one-token
    // append to be split over both threads by columns.
    gqla_config cfg = abi::odd_gqla_config(3);
    cfg.num_threads = 2;
    cfg.path = GQLA_PATH_GQA;
    abi::Harness h(cfg);
    const int before = process_threads();
    if (before < 0) {
        MESSAGE("no /proc/self/task: thread count not checked");
    }
    const gqla_seq_id seq = h.add();
    h.append_ok(seq, 0, 300);                            // row slices
    for (int i = 0; i < 5; ++i) h.append_ok(seq, 0, 1);  // column slices
    const gqla_seq_id other = h.add();
    h.append_ok(other, 0, 33);  // three 16-row steps, the last one partial
    if (before >= 0) CHECK(process_threads() == before);

    for (const gqla_seq_id s : {seq, other}) {
        const abi::DecodeResult r = h.decode(0, {s}, 1);
        INFO(abi::replay_hint(r.seed));
        REQUIRE(r.status == GQLA_OK);
        CHECK(r.o_err <= h.tol());
        CHECK(r.lse_err <= h.tol());
    }
}

// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): the sequence calls gqla_sequence_add,
// gqla_sequence_release and gqla_sequence_fork (capacity, unknown ids, ids
// never reused).
#include "tests/fuzz/session_fuzz.hpp"

#include <cstdio>

namespace fuzz {

bool SessionFuzz::op_add() {
    run.op = "sequence_add";
    Expect e;
    if (shadow_.sequences() >= cfg_.max_sequences) e.error(GQLA_ERR_CAPACITY);
    gqla_seq_id id = -1;
    if (!check_status("gqla_sequence_add", gqla_sequence_add(s_, &id), e)) return false;
    if (id < next_unused_id_) fail("sequence_add returned id %lld, reused or decreasing", (long long)id);
    next_unused_id_ = id + 1;
    shadow_.add(id);
    return true;
}

bool SessionFuzz::op_release() {
    run.op = "sequence_release";
    Expect e;
    gqla_seq_id id = some_id(e);
    if (run.verbose) std::printf("release %lld\n", (long long)id);
    if (!check_status("gqla_sequence_release", gqla_sequence_release(s_, id), e)) return false;
    shadow_.release(id);
    return true;
}

bool SessionFuzz::op_fork() {
    run.op = "sequence_fork";
    Expect e;
    gqla_seq_id parent = some_id(e);
    if (shadow_.sequences() >= cfg_.max_sequences) e.error(GQLA_ERR_CAPACITY);
    gqla_seq_id child = -1;
    if (!check_status("gqla_sequence_fork", gqla_sequence_fork(s_, parent, &child), e)) return false;
    if (run.verbose) std::printf("fork %lld -> %lld\n", (long long)parent, (long long)child);
    if (child < next_unused_id_) fail("sequence_fork returned id %lld, reused or decreasing", (long long)child);
    next_unused_id_ = child + 1;
    shadow_.fork(parent, child);
    return true;
}

}  // namespace fuzz

// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): calls that must change nothing: the getters
// (config, sequence length, path), the cost predictions with valid and broken
// workloads, and calls with NULL or short out-pointers.
#include "tests/fuzz/session_fuzz.hpp"

#include <cmath>
#include <cstring>

namespace fuzz {

bool SessionFuzz::op_getters() {
    run.op = "getters";
    const int64_t what = r_.range(0, 5);
    if (what == 0) {
        gqla_config got;
        std::memset(&got, 0, sizeof(got));
        got.struct_size = sizeof(got);
        Expect ok;
        check_status("gqla_session_get_config", gqla_session_get_config(s_, &got), ok);
        gqla_config want = cfg_;
        want.path = got.path;
        if (std::memcmp(&got, &want, sizeof(got)) != 0) fail("session_get_config changed between calls");
        if (expected_path_ != GQLA_PATH_AUTO && got.path != expected_path_)
            fail("session_get_config: path %d, expected %d", int(got.path), int(expected_path_));
    } else if (what == 1) {
        Expect e;
        const gqla_seq_id id = some_id(e);
        const int32_t layer = some_layer(e);
        int64_t len = -7;
        if (check_status("gqla_sequence_length", gqla_sequence_length(s_, id, layer, &len), e) &&
            len != shadow_.length(id, layer))
            fail("sequence_length %lld, expected %lld", (long long)len, (long long)shadow_.length(id, layer));
    } else if (what <= 3) {
        gqla_workload w{sizeof(gqla_workload), static_cast<int32_t>(r_.range(1, 64)), r_.range(1, 8192),
                        static_cast<int32_t>(r_.range(1, 8)), 0};
        Expect e;
        if (w.q_len > w.context) e.error(GQLA_ERR_INVALID_ARGUMENT);  // queries are cached tokens
        if (r_.chance(0.2)) {
            switch (r_.range(0, 3)) {
                case 0:
                    w.batch = 0;
                    break;
                case 1:
                    w.context = -1;
                    break;
                case 2:
                    w.q_len = 0;
                    break;
                default:
                    w.struct_size = 3;
                    break;
            }
            e.error(GQLA_ERR_INVALID_ARGUMENT);
        }
        gqla_cost_report rep;
        std::memset(&rep, 0, sizeof(rep));
        rep.struct_size = sizeof(rep);
        gqla_status st =
            what == 2 ? gqla_session_predict_cost(s_, &w, &rep) : gqla_predict_cost(&cfg_, nullptr, &w, &rep);
        if (check_status(what == 2 ? "gqla_session_predict_cost" : "gqla_predict_cost", st, e)) {
            for (const gqla_path_cost* c : {&rep.gqa, &rep.absorb})
                if (!(std::isfinite(c->time_s) && c->time_s >= 0 && std::isfinite(c->bytes) && c->bytes >= 0 &&
                      std::isfinite(c->flops) && c->flops >= 0))
                    fail("predict_cost: non-finite or negative cost (time %g, bytes %g, flops %g)", c->time_s, c->bytes,
                         c->flops);
            if (rep.chosen != GQLA_PATH_GQA && rep.chosen != GQLA_PATH_ABSORB)
                fail("predict_cost chose %d", int(rep.chosen));
            if (cfg_.kind == GQLA_KIND_GQA && rep.chosen != GQLA_PATH_GQA)
                fail("predict_cost chose %d for a GQA-kind config", int(rep.chosen));
        }
    } else {
        gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_AUTO;
        Expect ok;
        check_status("gqla_get_path", gqla_get_path(s_, &active, r_.chance(0.5) ? &requested : nullptr), ok);
        if (expected_path_ != GQLA_PATH_AUTO && active != expected_path_)
            fail("get_path: active %d, expected %d", int(active), int(expected_path_));
    }
    return false;  // nothing changed: the state must be as before
}

bool SessionFuzz::op_bad_pointers() {
    run.op = "bad pointers";
    Expect bad;
    bad.error(GQLA_ERR_INVALID_ARGUMENT);
    gqla_stats st;
    st.struct_size = sizeof(st);
    switch (r_.range(0, 8)) {
        case 0:
            check_status("gqla_sequence_add(out NULL)", gqla_sequence_add(s_, nullptr), bad);
            break;
        case 1:
            check_status("gqla_session_stats(NULL)", gqla_session_stats(nullptr, &st), bad);
            break;
        case 2:
            check_status("gqla_session_stats(out NULL)", gqla_session_stats(s_, nullptr), bad);
            break;
        case 3: {
            Expect e = bad;
            e.error(GQLA_ERR_NOT_FOUND);
            check_status("gqla_sequence_fork(child NULL)", gqla_sequence_fork(s_, some_id(e), nullptr), e);
            break;
        }
        case 4: {
            Expect e = bad;
            e.error(GQLA_ERR_NOT_FOUND);
            check_status("gqla_sequence_length(out NULL)", gqla_sequence_length(s_, some_id(e), 0, nullptr), e);
            break;
        }
        case 5:
            check_status("gqla_select_path(NULL)", gqla_select_path(nullptr, GQLA_PATH_AUTO), bad);
            break;
        case 6: {
            st.struct_size = 1;
            check_status("gqla_session_stats(struct_size 1)", gqla_session_stats(s_, &st), bad);
            break;
        }
        case 7: {
            Expect e = bad;
            e.error(GQLA_ERR_NOT_FOUND);
            e.error(GQLA_ERR_INVALID_STATE);
            gqla_seq_id id = some_id(e);
            check_status("gqla_decode(q NULL)", gqla_decode(s_, 0, 1, &id, nullptr, nullptr, nullptr), e);
            break;
        }
        default:
            check_status("gqla_get_path(NULL)", gqla_get_path(nullptr, nullptr, nullptr), bad);
            break;
    }
    return false;
}

}  // namespace fuzz

// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): calls that must change nothing: the getters
// (config, sequence length, path), the cost predictions with valid and broken
// workloads (dense and sparse), and calls with NULL or short out-pointers.
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
        gqla_config want = session_cfg_;
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
        if (run.features.attention && r_.chance(0.3)) {  // a sparse step: topk 1..2^20
            w.topk = static_cast<int32_t>(r_.chance(0.9) ? r_.range(1, 4096) : r_.pick<int64_t>({-1, (1 << 20) + 1}));
            if (w.topk < 0 || w.topk > (1 << 20)) e.error(GQLA_ERR_INVALID_ARGUMENT);
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
            // Without the latent both paths are priced, but GQA is the only form.
            if (!shadow_.keeps_latent() && (rep.chosen != GQLA_PATH_GQA || rep.call_chosen != GQLA_PATH_GQA))
                fail("predict_cost chose %d (call_chosen %d) for keep_latent = 0", int(rep.chosen),
                     int(rep.call_chosen));
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
    // The first version's nine cases, then those of the features that are on.
    std::vector<int> later;
    if (run.features.attention) later.insert(later.end(), {9, 10, 11});
    if (run.features.sequence_io) later.insert(later.end(), {12, 13});
    int64_t pick = r_.range(0, 8 + static_cast<int64_t>(later.size()));
    if (pick > 8) pick = later[static_cast<size_t>(pick - 9)];
    gqla_attention_args args;
    switch (pick) {
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
        case 9:
            check_status("gqla_attention_args_default(NULL)", gqla_attention_args_default(nullptr), bad);
            break;
        case 10:
            check_status("gqla_attention(args NULL)", gqla_attention(s_, nullptr), bad);
            break;
        case 11: {  // shorter than 1.1's struct; or no q
            Expect ok;
            check_status("gqla_attention_args_default", gqla_attention_args_default(&args), ok);
            gqla_seq_id id = 1;
            args.batch = 1;
            args.seqs = &id;
            if (r_.chance(0.5))
                args.struct_size = 8;
            else
                args.q = nullptr;
            check_status("gqla_attention(bad args)", gqla_attention(s_, &args), bad);
            break;
        }
        case 12: {
            Expect e = bad;
            e.error(GQLA_ERR_NOT_FOUND);
            check_status("gqla_sequence_export(needed NULL)", gqla_sequence_export(s_, some_id(e), nullptr, 0, nullptr),
                         e);
            break;
        }
        case 13: {
            gqla_seq_id id = -1;
            check_status("gqla_sequence_import(buffer NULL)", gqla_sequence_import(s_, nullptr, 64, &id), bad);
            break;
        }
        default:
            check_status("gqla_get_path(NULL)", gqla_get_path(nullptr, nullptr, nullptr), bad);
            break;
    }
    return false;
}

}  // namespace fuzz

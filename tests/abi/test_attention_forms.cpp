// SPDX-License-Identifier: Apache-2.0
// The three forms of a GQLA session through gqla_attention (absorb, the kept
// expanded cache, the per-call transient expansion): each against the
// reference and against each other, none reusing anything stale between
// calls, and a per-call AUTO that leaves the session's path and kept cache
// alone.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "attention_support.hpp"
#include "tests/reference/reference.hpp"

using abi::active_path;
using abi::Harness;
using abi::path_label;
using abi::require_ok;
using abi::sequences_of_lengths;
using attention::attend;
using attention::Ids;
using attention::light_gqla_config;
using attention::random_rows;
using attention::Request;
using attention::Result;

// Absorb, the GQA path over the kept expanded cache, and the transient
// expansion compute the same attention: each against the reference, and on
// f32 inputs with an f32 cache within 1e-5 of each other. The transient form
// and GQA without a kept cache leave the session on absorb with no expanded
// cache; absorb and the transient form beside a kept cache leave it kept.
TEST_CASE("the three forms of a GQLA session agree with the reference and report what ran") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        for (int32_t G : {2, 6}) {  // G == H: MLA
            gqla_config cfg = abi::odd_gqla_config(G);
            cfg.cache_dtype = dt;
            cfg.max_q_len = 40;
            cfg.path = GQLA_PATH_ABSORB;
            CAPTURE(abi::dtype_label(dt));
            CAPTURE(G);
            Harness h(cfg);
            Request rq;
            rq.seqs = sequences_of_lengths(h, {40, 7, 130, 17});
            rq.q_lens = {1, 7, 33, 16};
            abi::Buffer q = random_rows(h, rq.total_rows());
            REQUIRE(h.stats().expanded_bytes == 0);

            auto run = [&](gqla_path ask, gqla_path expect) {
                CAPTURE(path_label(ask));
                rq.path = ask;
                Result r = attend(h, rq, q);
                CHECK_ATTENTION_MATCHES(r, h.tol());
                CHECK(path_label(r.taken) == std::string(path_label(expect)));
                return r;
            };
            // Session on absorb: no expanded cache is kept, and none appears.
            const Result absorb = run(GQLA_PATH_ABSORB, GQLA_PATH_ABSORB);
            const Result transient = run(GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT);
            CHECK(h.stats().expanded_bytes == 0);
            const Result gqa_without_cache = run(GQLA_PATH_GQA, GQLA_PATH_GQA_TRANSIENT);
            CHECK(h.stats().expanded_bytes == 0);
            gqla_path requested = GQLA_PATH_AUTO;
            CHECK(active_path(h.session(), &requested) == GQLA_PATH_ABSORB);
            CHECK(requested == GQLA_PATH_ABSORB);

            // Session on the GQA path: the kept cache is used by GQA, left alone by the others.
            require_ok(gqla_select_path(h.session(), GQLA_PATH_GQA), "gqla_select_path(GQA)");
            const int64_t kept = h.stats().expanded_bytes;
            CHECK(kept > 0);
            const Result expanded = run(GQLA_PATH_GQA, GQLA_PATH_GQA);
            const Result transient_beside = run(GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT);
            const Result absorb_beside = run(GQLA_PATH_ABSORB, GQLA_PATH_ABSORB);
            CHECK(h.stats().expanded_bytes == kept);
            CHECK(active_path(h.session(), &requested) == GQLA_PATH_GQA);
            CHECK(requested == GQLA_PATH_GQA);

            if (dt == GQLA_DTYPE_F32) {  // path against path (docs/numerics.md)
                const Result* all[] = {&absorb,   &transient,        &gqa_without_cache,
                                       &expanded, &transient_beside, &absorb_beside};
                for (const Result* x : all) {
                    REQUIRE(x->o.size() == expanded.o.size());
                    CHECK(gqla::ref::rel_l2(x->o.data(), expanded.o.data(), x->o.size()) <= 1e-5);
                    CHECK(abi::lse_error(x->lse.data(), expanded.lse.data(), x->lse.size()) <= 1e-5);
                }
            }
        }
    }
}

// Nothing of an earlier call may be reused stale: the transient form (and
// the others) between calls that append (into a partly filled page and
// onto new pages), replace a layer's weights, or attend another layer.
TEST_CASE("every form sees appends, new weights and other layers between calls") {
    for (gqla_path form : {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        gqla_config cfg = light_gqla_config(3);
        cfg.num_layers = 2;
        cfg.max_q_len = 20;
        cfg.path = form == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        CAPTURE(path_label(form));
        Harness h(cfg);
        const auto seqs = sequences_of_lengths(h, {37, 10});
        for (gqla_seq_id s : seqs) h.append_ok(s, 1, 21);
        Request rq;
        rq.seqs = Ids(seqs);
        rq.q_lens = {5, 10};
        rq.path = form;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        h.append_ok(seqs[0], 0, 3);   // into the partly filled third page
        h.append_ok(seqs[1], 0, 20);  // onto new pages
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        h.set_weights(0);  // re-expands a kept cache; a transient one is built per call anyway
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.layer = 1;
        rq.q_lens = {20, 1};
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.layer = 0;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
    }
}

// A call's AUTO picks a form for that call only: with the session's path
// chosen explicitly, neither a large prefill chunk nor a one-query decode
// changes gqla_get_path or the kept expanded cache. For a uniform batch the
// form AUTO runs is the one gqla_session_predict_cost names for that
// workload (call_chosen, with no expanded cache kept).
TEST_CASE("AUTO per call does not change the session's path or kept cache") {
    for (gqla_path session_path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        gqla_config cfg = light_gqla_config(3);
        cfg.max_q_len = 320;
        cfg.path = session_path;
        CAPTURE(path_label(session_path));
        Harness h(cfg);
        const auto seqs = sequences_of_lengths(h, {400, 31, 70, 2});
        const int64_t kept = h.stats().expanded_bytes;
        CHECK((kept > 0) == (session_path == GQLA_PATH_GQA));
        auto unchanged = [&] {
            gqla_path requested = GQLA_PATH_AUTO;
            CHECK(active_path(h.session(), &requested) == session_path);
            CHECK(requested == session_path);
            CHECK(h.stats().expanded_bytes == kept);
            CHECK(h.stats().path == session_path);
        };
        auto allowed = [&](gqla_path taken) {
            return taken == GQLA_PATH_ABSORB || taken == GQLA_PATH_GQA_TRANSIENT ||
                   (taken == GQLA_PATH_GQA && session_path == GQLA_PATH_GQA);
        };

        Request chunk;  // a prefill chunk beside a decoding sequence
        chunk.seqs = Ids{seqs[0], seqs[1]};
        chunk.q_lens = {300, 1};
        chunk.path = GQLA_PATH_AUTO;
        Result r = attend(h, chunk);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();

        Request step;  // one query per sequence
        step.seqs = Ids(seqs);
        step.s_q = 1;
        step.path = GQLA_PATH_AUTO;
        r = attend(h, step);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();
        step.q_lens = {1, 1, 1, 1};
        r = attend(h, step);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();

        if (session_path == GQLA_PATH_ABSORB) {
            // Uniform calls of one sequence: AUTO runs what the cost report
            // predicts for that exact workload.
            for (int32_t s_q : {1, 300}) {
                CAPTURE(s_q);
                Request one;
                one.seqs = Ids{seqs[0]};
                one.s_q = s_q;
                one.path = GQLA_PATH_AUTO;
                r = attend(h, one);
                CHECK_ATTENTION_MATCHES(r, h.tol());
                gqla_workload w{sizeof(gqla_workload), 1, 400, s_q, 0};
                gqla_cost_report rep;
                std::memset(&rep, 0, sizeof rep);
                rep.struct_size = sizeof rep;
                require_ok(gqla_session_predict_cost(h.session(), &w, &rep), "gqla_session_predict_cost");
                CHECK(path_label(r.taken) == std::string(path_label(rep.call_chosen)));
                unchanged();
            }
        }
    }
}

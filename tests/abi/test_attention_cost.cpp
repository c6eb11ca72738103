// SPDX-License-Identifier: Apache-2.0
// Session cost reports (gqla_session_predict_cost, gqla_predict_cost): the
// transient form's cost and the form a call's AUTO would choose, for both
// kinds, and callers passing the 1.0-sized report.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "harness.hpp"

using abi::Harness;
using abi::require_ok;

namespace {

bool all_zero(const gqla_path_cost& c) {
    gqla_path_cost zero;
    std::memset(&zero, 0, sizeof zero);
    return std::memcmp(&c, &zero, sizeof zero) == 0;
}

bool filled(const gqla_path_cost& c) {
    return c.bytes > 0 && c.flops > 0 && c.time_s > 0 && std::isfinite(c.time_s) &&
           (c.bound == GQLA_BOUND_MEMORY || c.bound == GQLA_BOUND_COMPUTE);
}

gqla_cost_report session_cost(gqla_session* s, int32_t batch, int64_t context, int32_t q_len) {
    gqla_workload w{sizeof(gqla_workload), batch, context, q_len, 0};
    gqla_cost_report rep;
    std::memset(&rep, 0xcd, sizeof rep);  // nothing may be left unwritten
    rep.struct_size = sizeof rep;
    require_ok(gqla_session_predict_cost(s, &w, &rep), "gqla_session_predict_cost");
    return rep;
}

// DeepSeek-V3's attention shape (128 heads, MLA), a small pool.
gqla_config v3_config() {
    gqla_config cfg = abi::deepseek_latent_config(128, 128);
    cfg.cache_dtype = GQLA_DTYPE_BF16;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 4096;
    cfg.max_sequences = 8;
    cfg.max_batch = 8;
    cfg.max_q_len = 4;
    cfg.path = GQLA_PATH_ABSORB;
    return cfg;
}

}  // namespace

TEST_CASE("session cost reports fill the transient form and the call's choice") {
    {  // GQLA: a transient cost, and call_chosen the faster of absorb and transient
        gqla_config cfg = v3_config();
        gqla_session* s = nullptr;
        require_ok(gqla_session_create(&cfg, &s), "gqla_session_create");
        struct Shape {
            int32_t batch;
            int64_t context;
            int32_t q_len;
        };
        for (Shape w : {Shape{1, 4096, 4096}, Shape{64, 4096, 1}, Shape{1, 300, 7}, Shape{4, 2000, 64}}) {
            CAPTURE(w.batch);
            CAPTURE(w.context);
            CAPTURE(w.q_len);
            const gqla_cost_report rep = session_cost(s, w.batch, w.context, w.q_len);
            CHECK(filled(rep.absorb));
            CHECK(filled(rep.transient));
            CHECK((rep.call_chosen == GQLA_PATH_ABSORB || rep.call_chosen == GQLA_PATH_GQA_TRANSIENT));
            // "The fastest form the cost model predicts" (clear winners only).
            const double a = rep.absorb.time_s, t = rep.transient.time_s;
            if (a < 0.99 * t) CHECK(rep.call_chosen == GQLA_PATH_ABSORB);
            if (t < 0.99 * a) CHECK(rep.call_chosen == GQLA_PATH_GQA_TRANSIENT);
        }
        // A whole 4096-token prompt: about 3x fewer FLOPs than absorb (gqla.h).
        const gqla_cost_report prefill = session_cost(s, 1, 4096, 4096);
        CHECK(prefill.transient.flops * 2 < prefill.absorb.flops);
        // Decoding 64 sequences: the transient form up-projects every cached
        // token of every sequence for one query each, absorb reads the latent.
        const gqla_cost_report decode = session_cost(s, 64, 4096, 1);
        CHECK(decode.transient.time_s > decode.absorb.time_s);
        CHECK(decode.call_chosen == GQLA_PATH_ABSORB);

        // gqla_predict_cost (no session) fills them too.
        gqla_workload w{sizeof(gqla_workload), 1, 4096, 4096, 0};
        gqla_cost_report pure;
        std::memset(&pure, 0xcd, sizeof pure);
        pure.struct_size = sizeof pure;
        require_ok(gqla_predict_cost(&cfg, nullptr, &w, &pure), "gqla_predict_cost");
        CHECK(filled(pure.transient));
        CHECK((pure.call_chosen == GQLA_PATH_ABSORB || pure.call_chosen == GQLA_PATH_GQA_TRANSIENT));

        // A caller built against 1.0 passes the 1.0 size: accepted, and
        // nothing past it is written.
        gqla_cost_report old;
        std::memset(&old, 0xcd, sizeof old);
        old.struct_size = offsetof(gqla_cost_report, transient);
        {
            INFO(std::string(gqla_last_error_message()));
            CHECK(gqla_session_predict_cost(s, &w, &old) == GQLA_OK);
        }
        CHECK(old.struct_size == offsetof(gqla_cost_report, transient));
        CHECK(old.absorb.time_s > 0);
        const unsigned char* tail =
            reinterpret_cast<const unsigned char*>(&old) + offsetof(gqla_cost_report, transient);
        bool untouched = true;
        for (size_t i = 0; i < sizeof old - offsetof(gqla_cost_report, transient); ++i) untouched &= tail[i] == 0xcd;
        CHECK(untouched);
        gqla_session_destroy(s);
    }
    {  // GQA kind: no transient form, and the call runs GQA
        gqla_config cfg = abi::odd_gqa_config(3);
        Harness h(cfg);
        const gqla_cost_report rep = session_cost(h.session(), 8, 1000, 16);
        CHECK(filled(rep.gqa));
        CHECK(all_zero(rep.transient));
        CHECK(rep.call_chosen == GQLA_PATH_GQA);
    }
}

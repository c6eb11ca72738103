// SPDX-License-Identifier: Apache-2.0
// A NaN in the causal tail of a ragged call's prefill chunk, on every CPU
// kernel table the host has: it reaches exactly the queries that see it.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "attention_support.hpp"
#include "tests/reference/reference.hpp"
#include "nonfinite_support.hpp"

using abi::Harness;
using abi::path_label;
using abi::require_ok;
using attention::attend;
using attention::Ids;
using attention::light_gqla_config;
using attention::random_rows;
using attention::Request;
using attention::Result;

// Each sequence of a ragged call has its own causal limit: a NaN key (GQA: k
// of every KV head; GQLA: the latent c, a key and a value of every head) at
// position 17 of a 20-token sequence attended with 6 queries (positions
// 14..19) reaches queries 3..5 only, never queries 0..2 (which may not see
// it, so it must not be multiplied in even with a zero weight) nor the
// decoding sequence beside it. The reference follows the same rule, so
// outputs must be NaN exactly where it has NaN and match it elsewhere. On
// every CPU kernel table the host has (the masking is the kernels').
TEST_CASE("a NaN in a chunk's causal tail reaches only the queries that see it") {
    const gqla_path forms[] = {GQLA_PATH_GQA, GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
    nonfinite::for_each_isa([&](const char*) {
        for (int kind_form = 0; kind_form < 4; ++kind_form) {
            gqla_config cfg = kind_form == 0 ? abi::odd_gqa_config(3) : light_gqla_config(3);
            cfg.path = kind_form == 0 ? GQLA_PATH_AUTO : kind_form == 3 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
            CAPTURE(path_label(forms[kind_form]));
            Harness h(cfg);
            const gqla_seq_id s = h.add(), t = h.add();
            h.append_ok(s, 0, 17);
            {
                std::vector<double> a = h.rng().normal(static_cast<size_t>(h.a_cols()));
                std::vector<double> b = h.rng().normal(static_cast<size_t>(h.b_cols()));
                for (double& x : a) x = static_cast<float>(x);
                for (double& x : b) x = static_cast<float>(x);
                a[static_cast<size_t>(h.a_cols()) / 2] = std::nan("");
                abi::Buffer ab = abi::make_poisoned(GQLA_DTYPE_F32, a.size());
                abi::Buffer bb = abi::make_poisoned(GQLA_DTYPE_F32, b.size());
                for (size_t i = 0; i < a.size(); ++i) ab.set(i, a[i]);
                for (size_t i = 0; i < b.size(); ++i) bb.set(i, b[i]);
                if (kind_form == 0)  // a NaN in the key of every KV head
                    for (int64_t g = 0; g < cfg.num_kv_heads; ++g)
                        ab.set(static_cast<size_t>(g * cfg.head_dim), std::nan(""));
                gqla_tensor ta = abi::view(ab, h.a_shape(1)), tb = abi::view(bb, h.b_shape(1));
                require_ok(gqla_append(h.session(), 0, s, &ta, &tb), "gqla_append (NaN row)");
                h.record(s, 0, abi::values_of(ab), abi::values_of(bb));
            }
            h.append_ok(s, 0, 2);
            h.append_ok(t, 0, 9);

            Request rq;
            rq.seqs = Ids{t, s};
            rq.q_lens = {1, 6};
            rq.path = forms[kind_form];
            rq.check = false;  // compared below, NaN by NaN
            abi::Buffer q = random_rows(h, 7);
            const Result r = attend(h, rq, q);
            INFO("gqla_attention: " << std::string(gqla_last_error_message()));
            INFO(abi::replay_hint(r.seed));
            REQUIRE(r.status == GQLA_OK);

            const int64_t H = cfg.num_heads, Dq = h.q_dim(), Dv = h.out_dim();
            std::vector<double> qv(static_cast<size_t>(7 * H * Dq)), ro(static_cast<size_t>(7 * H * Dv)),
                rl(static_cast<size_t>(7 * H));
            for (size_t i = 0; i < qv.size(); ++i) qv[i] = q.get(i);
            h.reference(t, 0, 1, qv.data(), ro.data(), rl.data());
            h.reference(s, 0, 6, qv.data() + H * Dq, ro.data() + H * Dv, rl.data() + H);
            // Per (query row, head): NaN exactly where the reference is, close elsewhere.
            std::vector<double> got_f, ref_f;
            int nan_rows = 0, pattern_mismatch = 0;
            for (int64_t row = 0; row < 7 * H; ++row) {
                const bool ref_nan = std::isnan(rl[static_cast<size_t>(row)]);
                nan_rows += ref_nan;
                bool got_nan = std::isnan(r.lse[static_cast<size_t>(row)]);
                for (int64_t k = 0; k < Dv; ++k) {
                    const double g = r.o[static_cast<size_t>(row * Dv + k)], e = ro[static_cast<size_t>(row * Dv + k)];
                    got_nan = got_nan && std::isnan(g);
                    if (!ref_nan) {
                        got_f.push_back(g);
                        ref_f.push_back(e);
                    }
                }
                if (got_nan != ref_nan) ++pattern_mismatch;
            }
            CHECK(nan_rows == 3 * H);  // queries 3..5 of the chunk, every head
            CHECK(pattern_mismatch == 0);
            CHECK(gqla::ref::rel_l2(got_f.data(), ref_f.data(), got_f.size()) <= h.tol());
        }
    });
}

// SPDX-License-Identifier: Apache-2.0
// gqla.hpp: the C++ layer over the C ABI — RAII, exceptions carrying the
// status and message, and decode results equal to the reference.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gqla/gqla.hpp"
#include "harness.hpp"
#include "tests/reference/reference.hpp"

static_assert(!std::is_copy_constructible_v<gqla::Session>, "sessions are move-only");
static_assert(std::is_nothrow_move_constructible_v<gqla::Session>, "sessions move without throwing");

TEST_CASE("gqla.hpp: a GQLA session on both paths matches the reference") {
    abi::Rng rng;
    CAPTURE(rng.seed());
    const int H = 6, G = 2, r = 384, dc = 96, dr = 32, dv = 80;
    const int64_t n = 41;
    gqla_config cfg = gqla::make_gqla_config(H, G, r, dc, dr, dv);
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 1024;
    cfg.path = GQLA_PATH_ABSORB;
    gqla::validate(cfg);
    gqla::Session session(cfg);
    CHECK(session.config().latent_dim == r);

    auto to_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    auto to_f64 = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    auto w = to_f32(rng.normal(static_cast<size_t>(G) * (dc + dv) * r, 1.0 / std::sqrt(double(r))));
    auto c = to_f32(rng.normal(static_cast<size_t>(n) * r));
    auto kr = to_f32(rng.normal(static_cast<size_t>(n) * dr));
    auto q = to_f32(rng.normal(static_cast<size_t>(H) * (dc + dr)));
    session.set_weights(0, gqla::tensor(w.data(), {G * (dc + dv), r}));
    const gqla_seq_id seq = session.add_sequence();
    session.append(0, seq, gqla::tensor(c.data(), {n, r}), gqla::tensor(kr.data(), {n, dr}));
    CHECK(session.length(seq, 0) == n);

    std::vector<double> ref(static_cast<size_t>(H) * dv), ref_lse(H);
    auto qd = to_f64(q), wd = to_f64(w), cd = to_f64(c), krd = to_f64(kr);
    gqla::ref::gqla_decode(H, G, r, dc, dr, dv, n, 1, 1.0 / std::sqrt(double(dc + dr)), qd.data(), wd.data(), cd.data(),
                           krd.data(), ref.data(), ref_lse.data());

    for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        session.select_path(path);
        CHECK(session.path() == path);
        CHECK(session.requested_path() == path);
        std::vector<float> o(ref.size(), NAN), lse(H, NAN);
        gqla_tensor tl = gqla::tensor(lse.data(), {1, 1, H});
        session.decode(0, {seq}, gqla::tensor(q.data(), {1, 1, H, dc + dr}), gqla::tensor(o.data(), {1, 1, H, dv}),
                       &tl);
        CHECK(gqla::ref::rel_l2(o.data(), ref.data(), o.size()) <= 1e-5);
        CHECK(gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()) <= 1e-5);
        CHECK((session.stats().expanded_bytes > 0) == (path == GQLA_PATH_GQA));
    }

    const gqla_seq_id child = session.fork(seq);
    CHECK(session.length(child, 0) == n);
    session.release(child);
    session.synchronize();
    session.set_stream(nullptr);
    // With G = 2 the expanded rows (G*(d_c+d_v) + d_r = 384 elements) are
    // smaller than the latent ones (r + d_r = 416), and absorb also reads W:
    // the GQA path must read fewer bytes at any context.
    const gqla_cost_report report = session.predict_cost(gqla::workload(8, 8192, 1));
    CHECK(report.gqa.bytes < report.absorb.bytes);
    CHECK(report.gqa.time_s > 0);
}

TEST_CASE("gqla.hpp: failures throw gqla::Error with status and message") {
    gqla_config cfg = gqla::make_gqa_config(6, 4, 64);
    CHECK_THROWS_AS(gqla::validate(cfg), gqla::Error);
    try {
        gqla::Session bad(cfg);
        FAIL("a session with num_kv_heads = 4, num_heads = 6 was created");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(e.message().find("config.num_kv_heads") != std::string::npos);
        CHECK(std::string(e.what()).find("GQLA_ERR_INVALID_ARGUMENT") != std::string::npos);
    }

    gqla::Session s(gqla::make_gqa_config(6, 3, 64));
    try {
        s.length(123456, 0);
        FAIL("an unknown sequence has a length");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_NOT_FOUND);
    }
    try {
        s.select_path(GQLA_PATH_ABSORB);
        FAIL("a GQA session accepted the absorb path");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_INVALID_ARGUMENT);
    }
    std::vector<float> w(16, 1.0f);
    CHECK_THROWS_AS(s.set_weights(0, gqla::tensor(w.data(), {4, 4})), gqla::Error);
    CHECK_THROWS_AS(s.append_batch(0, {1, 2}, {1}, gqla::tensor(w.data(), {1, 16}), gqla::tensor(w.data(), {1, 16})),
                    gqla::Error);
}

TEST_CASE("gqla.hpp: a GQA session, moves and probes") {
    abi::Rng rng;
    CAPTURE(rng.seed());
    const int H = 6, G = 3, D = 40, L = 17;
    gqla_config cfg = gqla::make_gqa_config(H, G, D);
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 256;
    gqla::Session first(cfg);
    gqla::Session s(std::move(first));
    CHECK_FALSE(static_cast<bool>(first));
    REQUIRE(static_cast<bool>(s));

    auto k = std::vector<float>(), v = std::vector<float>(), q = std::vector<float>();
    for (double x : rng.normal(static_cast<size_t>(L) * G * D)) k.push_back(static_cast<float>(x));
    for (double x : rng.normal(static_cast<size_t>(L) * G * D)) v.push_back(static_cast<float>(x));
    for (double x : rng.normal(static_cast<size_t>(H) * D)) q.push_back(static_cast<float>(x));
    const gqla_seq_id a = s.add_sequence(), b = s.add_sequence();
    s.append_batch(0, {a, b}, {L - 5, 5}, gqla::tensor(k.data(), {L, G, D}), gqla::tensor(v.data(), {L, G, D}));
    CHECK(s.length(a) == L - 5);
    CHECK(s.length(b) == 5);

    std::vector<double> kd(k.begin(), k.begin() + static_cast<long>(L - 5) * G * D),
        vd(v.begin(), v.begin() + static_cast<long>(L - 5) * G * D), qd(q.begin(), q.end()), ref(H * D);
    gqla::ref::gqa_decode(H, G, D, D, L - 5, 1, 1.0 / std::sqrt(double(D)), qd.data(), kd.data(), vd.data(), ref.data(),
                          nullptr);
    std::vector<float> o(ref.size(), NAN);
    s.decode(0, {a}, gqla::tensor(q.data(), {1, 1, H, D}), gqla::tensor(o.data(), {1, 1, H, D}));
    CHECK(gqla::ref::rel_l2(o.data(), ref.data(), o.size()) <= 1e-5);

    gqla::Session other(cfg);
    other = std::move(s);
    CHECK(other.length(a) == L - 5);
    gqla_session* raw = other.detach();
    CHECK_FALSE(static_cast<bool>(other));
    gqla::Session adopted(raw);
    CHECK(adopted.stats().sequences == 2);

    CHECK(gqla::version() == GQLA_VERSION);
    CHECK(gqla::device_count(GQLA_DEVICE_CPU) == 1);
    const gqla_probe_info p = gqla::probe();
    CHECK(p.logical_cores >= 1);
    const gqla_cost_report r = gqla::predict_cost(cfg, gqla::workload(2, 100), &p);
    CHECK(r.chosen == GQLA_PATH_GQA);
    CHECK(gqla::status_string(GQLA_ERR_CAPACITY).find("GQLA_ERR_CAPACITY") != std::string::npos);
    const gqla_tensor t = gqla::strided_tensor(q.data(), GQLA_DTYPE_F32, {2, 3}, {10, 1});
    CHECK(t.strides[0] == 10);
    CHECK(t.shape[1] == 3);
}

TEST_CASE("gqla.hpp: attend with ragged q_lens on every path matches the reference") {
    abi::Rng rng;
    CAPTURE(rng.seed());
    const int H = 6, G = 3, r = 384, dc = 96, dr = 32, dv = 80, dq = dc + dr;
    gqla_config cfg = gqla::make_gqla_config(H, G, r, dc, dr, dv);
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 1024;
    cfg.path = GQLA_PATH_ABSORB;  // no expanded cache kept: GQA runs transient
    cfg.max_q_tokens = 64;
    gqla::Session s(cfg);
    CHECK(s.config().max_q_tokens == 64);

    auto to_f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    const std::vector<double> w = rng.normal(static_cast<size_t>(G) * (dc + dv) * r, 1.0 / std::sqrt(double(r)));
    const std::vector<float> wf = to_f32(w);
    s.set_weights(0, gqla::tensor(wf.data(), {G * (dc + dv), r}));

    // A decoding sequence (1 query), a prefill chunk (7) and a whole prompt (13).
    const std::vector<int64_t> lengths = {40, 9, 13};
    const std::vector<int32_t> q_lens = {1, 7, 13};
    std::vector<gqla_seq_id> seqs;
    std::vector<std::vector<double>> c, kr;
    for (int64_t n : lengths) {
        c.push_back(rng.normal(static_cast<size_t>(n) * r));
        kr.push_back(rng.normal(static_cast<size_t>(n) * dr));
        const auto cf = to_f32(c.back()), krf = to_f32(kr.back());
        seqs.push_back(s.add_sequence());
        s.append(0, seqs.back(), gqla::tensor(cf.data(), {n, r}), gqla::tensor(krf.data(), {n, dr}));
    }
    int64_t rows = 0;
    for (int32_t n : q_lens) rows += n;
    const std::vector<float> q = to_f32(rng.normal(static_cast<size_t>(rows) * H * dq));

    // The reference, one sequence at a time over its packed rows.
    std::vector<double> ref(static_cast<size_t>(rows) * H * dv), ref_lse(static_cast<size_t>(rows) * H);
    const std::vector<double> qd(q.begin(), q.end());
    for (size_t i = 0, row = 0; i < seqs.size(); row += q_lens[i], ++i) {
        gqla::ref::gqla_decode(H, G, r, dc, dr, dv, lengths[i], q_lens[i], 1.0 / std::sqrt(double(dq)),
                               qd.data() + row * H * dq, w.data(), c[i].data(), kr[i].data(), ref.data() + row * H * dv,
                               ref_lse.data() + row * H);
    }

    const std::pair<gqla_path, gqla_path> asked_and_run[] = {
        {GQLA_PATH_ABSORB, GQLA_PATH_ABSORB},
        {GQLA_PATH_GQA, GQLA_PATH_GQA_TRANSIENT},
        {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT},
        {GQLA_PATH_AUTO, GQLA_PATH_AUTO},  // AUTO: any form
    };
    for (const auto& [asked, expected] : asked_and_run) {
        const int asked_path = asked;
        CAPTURE(asked_path);
        std::vector<float> o(ref.size(), NAN), lse(ref_lse.size(), NAN);
        gqla_tensor tl = gqla::tensor(lse.data(), {rows, H});
        const gqla_path taken = s.attend(0, seqs, q_lens, gqla::tensor(q.data(), {rows, H, dq}),
                                         gqla::tensor(o.data(), {rows, H, dv}), &tl, asked);
        if (expected != GQLA_PATH_AUTO) CHECK(taken == expected);
        CHECK(taken != GQLA_PATH_AUTO);
        CHECK(gqla::ref::rel_l2(o.data(), ref.data(), o.size()) <= 1e-5);
        CHECK(gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()) <= 1e-5);
        // The call's path leaves the session's alone.
        CHECK(s.path() == GQLA_PATH_ABSORB);
        CHECK(s.stats().expanded_bytes == 0);
    }

    // Without q_lens it is decode with uniform queries: [B, s_q, H, Dq].
    const std::vector<gqla_seq_id> pair = {seqs[0], seqs[2]};
    const std::vector<float> q2 = to_f32(rng.normal(2 * 2 * H * dq));
    std::vector<float> o_attend(2 * 2 * H * dv, NAN), o_decode(o_attend.size(), NAN);
    s.attend(0, pair, {}, gqla::tensor(q2.data(), {2, 2, H, dq}), gqla::tensor(o_attend.data(), {2, 2, H, dv}), nullptr,
             GQLA_PATH_ABSORB);
    s.decode(0, pair, gqla::tensor(q2.data(), {2, 2, H, dq}), gqla::tensor(o_decode.data(), {2, 2, H, dv}));
    const std::vector<double> o_decode_d(o_decode.begin(), o_decode.end());
    CHECK(gqla::ref::rel_l2(o_attend.data(), o_decode_d.data(), o_attend.size()) <= 1e-6);

    // Mistakes throw, naming q_lens; nothing changes.
    std::vector<float> o(ref.size(), NAN);
    try {
        s.attend(0, seqs, {1, 7}, gqla::tensor(q.data(), {rows, H, dq}), gqla::tensor(o.data(), {rows, H, dv}));
        FAIL("q_lens shorter than seqs was accepted");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(e.message().find("q_lens") != std::string::npos);
    }
    try {
        // Same total, but the second sequence holds 9 tokens, not 10.
        s.attend(0, seqs, {1, 10, 10}, gqla::tensor(q.data(), {rows, H, dq}), gqla::tensor(o.data(), {rows, H, dv}));
        FAIL("more queries than cached tokens were accepted");
    } catch (const gqla::Error& e) {
        CHECK(e.status() == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(e.message().find("q_lens") != std::string::npos);
    }
    CHECK(s.length(seqs[2], 0) == 13);

    // The cost model's numbers behind AUTO's choice for one call.
    const gqla_cost_report report = s.predict_cost(gqla::workload(1, 4096, 16));
    CHECK(report.transient.time_s > 0);
    CHECK((report.call_chosen == GQLA_PATH_ABSORB || report.call_chosen == GQLA_PATH_GQA_TRANSIENT));
}

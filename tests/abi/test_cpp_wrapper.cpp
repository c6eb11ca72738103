// SPDX-License-Identifier: Apache-2.0
// gqla.hpp: the C++ layer over the C ABI — RAII, exceptions carrying the
// status and message, and decode results equal to the reference.
#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "gqla/gqla.hpp"
#include "harness.hpp"
#include "core/reference.hpp"

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
    gqla::ref::gqla_decode(H, G, r, dc, dr, dv, n, 1, 1.0 / std::sqrt(double(dc + dr)), qd.data(), wd.data(),
                           cd.data(), krd.data(), ref.data(), ref_lse.data());

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

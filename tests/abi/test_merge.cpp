// SPDX-License-Identifier: Apache-2.0
// gqla_merge_attention_states: partial attentions over disjoint position sets
// merge into the attention over their union. With one query token per
// sequence a decode attends to every cached position, so decoding the same q
// over sequences X and Y and merging must equal decoding it over a sequence
// holding X's tokens followed by Y's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "f32_tensors.hpp"
#include "harness.hpp"
#include "gqla/gqla.h"

namespace {

constexpr int H = 6, G = 2, D = 40, DV = 24;

using abi::host_f32;
using abi::random_vector;
using abi::rel_l2;
constexpr void (*ok)(gqla_status) = abi::require_ok;

struct Partials {
    std::vector<float> o_x, lse_x, o_y, lse_y, o_union, lse_union;
};

// Decodes one random q over X, Y and X followed by Y on an f32 GQA session.
Partials decode_partials(std::mt19937_64& rng, int64_t nx, int64_t ny) {
    gqla_config cfg;
    ok(gqla_config_default(&cfg, GQLA_KIND_GQA));
    cfg.num_heads = H;
    cfg.num_kv_heads = G;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.page_size = 16;
    cfg.max_tokens = 4096;
    gqla_session* s = nullptr;
    ok(gqla_session_create(&cfg, &s));
    gqla_seq_id x, y, u;
    ok(gqla_sequence_add(s, &x));
    ok(gqla_sequence_add(s, &y));
    ok(gqla_sequence_add(s, &u));
    std::vector<float> kx = random_vector(rng, nx * G * D), vx = random_vector(rng, nx * G * DV);
    std::vector<float> ky = random_vector(rng, ny * G * D), vy = random_vector(rng, ny * G * DV);
    gqla_tensor tkx = host_f32(kx, {nx, G, D}), tvx = host_f32(vx, {nx, G, DV});
    gqla_tensor tky = host_f32(ky, {ny, G, D}), tvy = host_f32(vy, {ny, G, DV});
    ok(gqla_append(s, 0, x, &tkx, &tvx));
    ok(gqla_append(s, 0, y, &tky, &tvy));
    ok(gqla_append(s, 0, u, &tkx, &tvx));
    ok(gqla_append(s, 0, u, &tky, &tvy));

    Partials p;
    std::vector<float> q = random_vector(rng, H * D);
    gqla_tensor tq = host_f32(q, {1, 1, H, D});
    auto run = [&](gqla_seq_id seq, std::vector<float>& o, std::vector<float>& lse) {
        o.assign(H * DV, std::numeric_limits<float>::quiet_NaN());
        lse.assign(H, std::numeric_limits<float>::quiet_NaN());
        gqla_tensor to = host_f32(o, {1, 1, H, DV}), tl = host_f32(lse, {1, 1, H});
        ok(gqla_decode(s, 0, 1, &seq, &tq, &to, &tl));
    };
    run(x, p.o_x, p.lse_x);
    run(y, p.o_y, p.lse_y);
    run(u, p.o_union, p.lse_union);
    gqla_session_destroy(s);
    return p;
}

// lse is a logarithm: absolute error, relative only beyond magnitude 1.
void check_lse(const std::vector<float>& got, const std::vector<float>& ref, double tol) {
    for (size_t i = 0; i < ref.size(); ++i)
        CHECK(std::fabs(got[i] - ref[i]) <= tol * std::max(1.0, std::fabs(double(ref[i]))));
}

}  // namespace

TEST_CASE("merge: two partial decodes equal the decode over their union") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    for (const auto& shape : {std::pair<int64_t, int64_t>{1, 1}, {37, 70}, {16, 5}, {200, 33}}) {
        const int64_t nx = shape.first, ny = shape.second;  // named (CAPTURE cannot take a structured binding)
        CAPTURE(nx);
        CAPTURE(ny);
        Partials p = decode_partials(rng, nx, ny);
        std::vector<float> o(H * DV, std::numeric_limits<float>::quiet_NaN()), lse(H, 0.0f);
        gqla_tensor parts[2] = {host_f32(p.o_x, {1, 1, H, DV}), host_f32(p.o_y, {1, 1, H, DV})};
        gqla_tensor lses[2] = {host_f32(p.lse_x, {1, 1, H}), host_f32(p.lse_y, {1, 1, H})};
        gqla_tensor to = host_f32(o, {1, 1, H, DV}), tl = host_f32(lse, {1, 1, H});
        ok(gqla_merge_attention_states(2, parts, lses, &to, &tl));
        CHECK(rel_l2(o, p.o_union) <= 1e-5);
        check_lse(lse, p.lse_union, 1e-5);

        // In place into the first part, order of parts swapped.
        gqla_tensor swapped[2] = {parts[1], parts[0]};
        gqla_tensor swapped_lse[2] = {lses[1], lses[0]};
        ok(gqla_merge_attention_states(2, swapped, swapped_lse, &swapped[0], &swapped_lse[0]));
        CHECK(rel_l2(p.o_y, p.o_union) <= 1e-5);
        check_lse(p.lse_y, p.lse_union, 1e-5);
    }
}

TEST_CASE("merge: bf16 output, a single part, and empty parts") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    Partials p = decode_partials(rng, 29, 41);
    // One part: the identity.
    {
        std::vector<float> o(H * DV), lse(H);
        gqla_tensor part = host_f32(p.o_x, {H, DV}), l = host_f32(p.lse_x, {H});
        gqla_tensor to = host_f32(o, {H, DV}), tl = host_f32(lse, {H});
        ok(gqla_merge_attention_states(1, &part, &l, &to, &tl));
        CHECK(o == p.o_x);
        CHECK(lse == p.lse_x);
    }
    // An empty part (lse -inf) whose output holds NaN is skipped.
    {
        std::vector<float> empty_o(H * DV, std::numeric_limits<float>::quiet_NaN());
        std::vector<float> empty_lse(H, -std::numeric_limits<float>::infinity());
        std::vector<uint16_t> o16(H * DV, 0x7fc0);
        std::vector<float> lse(H);
        gqla_tensor parts[3] = {host_f32(p.o_x, {H, DV}), host_f32(empty_o, {H, DV}), host_f32(p.o_y, {H, DV})};
        gqla_tensor lses[3] = {host_f32(p.lse_x, {H}), host_f32(empty_lse, {H}), host_f32(p.lse_y, {H})};
        gqla_tensor to;
        const int64_t shape[2] = {H, DV};
        ok(gqla_tensor_init(&to, o16.data(), GQLA_DTYPE_BF16, 2, shape));
        gqla_tensor tl = host_f32(lse, {H});
        ok(gqla_merge_attention_states(3, parts, lses, &to, &tl));
        std::vector<float> o(H * DV);
        for (size_t i = 0; i < o.size(); ++i) o[i] = gqla::bf16_to_f32(o16[i]);
        CHECK(rel_l2(o, p.o_union) <= 1e-2);
        check_lse(lse, p.lse_union, 1e-5);
    }
    // Every part empty: zeros and -inf, no NaN.
    {
        std::vector<float> a(H * DV, std::numeric_limits<float>::quiet_NaN()), la(H, -INFINITY);
        std::vector<float> o(H * DV, 1.0f), lse(H, 0.0f);
        gqla_tensor part = host_f32(a, {H, DV}), l = host_f32(la, {H});
        gqla_tensor to = host_f32(o, {H, DV}), tl = host_f32(lse, {H});
        ok(gqla_merge_attention_states(1, &part, &l, &to, &tl));
        for (float v : o) CHECK(v == 0.0f);
        for (float v : lse) CHECK(v == -INFINITY);
    }
}

TEST_CASE("merge: a NaN lse poisons its row only") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    std::mt19937_64 rng(seed);
    Partials p = decode_partials(rng, 8, 9);
    p.lse_y[2] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> o(H * DV), lse(H);
    gqla_tensor parts[2] = {host_f32(p.o_x, {H, DV}), host_f32(p.o_y, {H, DV})};
    gqla_tensor lses[2] = {host_f32(p.lse_x, {H}), host_f32(p.lse_y, {H})};
    gqla_tensor to = host_f32(o, {H, DV}), tl = host_f32(lse, {H});
    ok(gqla_merge_attention_states(2, parts, lses, &to, &tl));
    for (int h = 0; h < H; ++h) {
        CAPTURE(h);
        CHECK(std::isnan(lse[h]) == (h == 2));
        for (int c = 0; c < DV; ++c) CHECK(std::isfinite(o[h * DV + c]) == (h != 2));
    }
}

TEST_CASE("merge: bad arguments are refused and name the argument") {
    std::vector<float> a(H * DV, 1.0f), b(H * DV, 1.0f), la(H, 0.0f), lb(H, 0.0f), o(H * DV), lo(H);
    gqla_tensor parts[2] = {host_f32(a, {H, DV}), host_f32(b, {H, DV})};
    gqla_tensor lses[2] = {host_f32(la, {H}), host_f32(lb, {H})};
    gqla_tensor to = host_f32(o, {H, DV}), tl = host_f32(lo, {H});
    auto refused = [](gqla_status st, gqla_status expected, const char* needle) {
        CHECK(st == expected);
        CHECK(std::string(gqla_last_error_message()).find(needle) != std::string::npos);
    };
    refused(gqla_merge_attention_states(0, parts, lses, &to, &tl), GQLA_ERR_INVALID_ARGUMENT, "num_states");
    refused(gqla_merge_attention_states(2, nullptr, lses, &to, &tl), GQLA_ERR_INVALID_ARGUMENT, "outputs");
    refused(gqla_merge_attention_states(2, parts, lses, nullptr, &tl), GQLA_ERR_INVALID_ARGUMENT, "out");

    gqla_tensor short_part = host_f32(b, {H - 1, DV});
    gqla_tensor mixed[2] = {parts[0], short_part};
    refused(gqla_merge_attention_states(2, mixed, lses, &to, &tl), GQLA_ERR_INVALID_ARGUMENT, "outputs[1]->shape[0]");

    gqla_tensor bad_lse[2] = {lses[0], lses[1]};
    bad_lse[1].dtype = GQLA_DTYPE_BF16;
    refused(gqla_merge_attention_states(2, parts, bad_lse, &to, &tl), GQLA_ERR_INVALID_ARGUMENT, "lses[1]->dtype");

    gqla_tensor on_gpu[2] = {parts[0], parts[1]};
    on_gpu[0].device = GQLA_DEVICE_CUDA;
    refused(gqla_merge_attention_states(2, on_gpu, lses, &to, &tl), GQLA_ERR_UNSUPPORTED, "outputs[0]");

    // out overlapping an input without being it.
    gqla_tensor shifted = host_f32(a, {H - 1, DV});
    shifted.data = a.data() + DV;
    gqla_tensor small_parts[2] = {host_f32(b, {H - 1, DV}), host_f32(o, {H - 1, DV})};
    gqla_tensor small_lses[2] = {host_f32(la, {H - 1}), host_f32(lb, {H - 1})};
    gqla_tensor partly[2] = {host_f32(a, {H - 1, DV}), small_parts[0]};
    refused(gqla_merge_attention_states(2, partly, small_lses, &shifted, nullptr), GQLA_ERR_INVALID_ARGUMENT,
            "overlaps");
    // Nothing was written by the refused calls.
    for (float v : a) CHECK(v == 1.0f);
}

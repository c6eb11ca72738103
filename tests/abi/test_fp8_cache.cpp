// SPDX-License-Identifier: Apache-2.0
// 8-bit (e4m3) caches through the C ABI on every CPU kernel table the host
// has: each attention call is compared with the float64 reference on the
// dequantized cache (the kernels' error, bf16 bound) and on the inputs as
// given (adds the 8-bit rounding, 6e-2), on normal data and on data with an
// outlier channel; GQA kind (narrow and wide tiles), GQLA absorb, GQA path
// and GQA_TRANSIENT, ragged calls, forks, path switches, a GQLA session
// without the latent, saturation, the per-token bytes in the stats and the
// refusals. (Sequence export and import: test_sequence_export.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "fp8_support.hpp"
#include "harness.hpp"
#include "nonfinite_support.hpp"

namespace {

using fp8test::Errors;
using fp8test::Fp8Session;
using fp8test::kGivenBound;
using fp8test::kStoredBound;

gqla_config odd_gqa() {
    gqla_config c;
    gqla_config_default(&c, GQLA_KIND_GQA);
    c.num_heads = 6;
    c.num_kv_heads = 3;
    c.head_dim = 72;
    c.value_dim = 40;
    c.num_layers = 2;
    c.page_size = 16;
    c.max_tokens = 4096;
    c.max_q_len = 40;
    c.max_sequences = 16;
    c.max_batch = 8;
    return c;
}

// r = 300: two whole 128-element scale blocks and a partial one.
gqla_config odd_gqla(int32_t groups) {
    gqla_config c;
    gqla_config_default(&c, GQLA_KIND_GQLA);
    c.num_heads = 6;
    c.num_kv_heads = groups;
    c.latent_dim = 300;
    c.nope_dim = 40;
    c.rope_dim = 24;
    c.value_dim = 56;
    c.num_layers = 2;
    c.page_size = 16;
    c.max_tokens = 4096;
    c.max_q_len = 40;
    c.max_sequences = 16;
    c.max_batch = 8;
    c.path = GQLA_PATH_ABSORB;
    return c;
}

void check(const Errors& e, const char* what_c) {
    const std::string what = what_c;
    CAPTURE(what);
    CHECK(e.stored <= kStoredBound);
    CHECK(e.lse <= kStoredBound);
    CHECK(e.given <= kGivenBound);
}

// Lengths around page edges (page 16), a long one, appended unevenly.
std::vector<gqla_seq_id> sequences(Fp8Session& s, const std::vector<int64_t>& lengths) {
    std::vector<gqla_seq_id> ids;
    for (int64_t L : lengths) {
        const gqla_seq_id id = s.add();
        for (int64_t done = 0; done < L;) {
            const int64_t n = std::min<int64_t>(L - done, 1 + (done * 7 + 5) % 23);
            s.append(id, n);
            done += n;
        }
        ids.push_back(id);
    }
    return ids;
}

// f(groups, seed, outlier) for normal and outlier data, on every ISA, with
// 1 and 3 groups (odd_gqla).
template <class F>
void for_each_gqla_case(F f) {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (bool outlier : {false, true}) {
        CAPTURE(outlier);
        nonfinite::for_each_isa([&](const char*) {
            for (int32_t groups : {1, 3}) {
                CAPTURE(groups);
                f(groups, seed + groups, outlier);
            }
        });
    }
}

}  // namespace

TEST_CASE("fp8 GQA kind: decode, prefill tiles, ragged calls and forks on every ISA") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    for (bool outlier : {false, true}) {
        CAPTURE(outlier);
        nonfinite::for_each_isa([&](const char*) {
            Fp8Session s(odd_gqa(), seed, outlier);
            std::vector<gqla_seq_id> ids = sequences(s, {1, 15, 16, 17, 40, 700});
            check(s.attend(ids, {1}, GQLA_PATH_AUTO, false), "s_q 1");
            std::vector<gqla_seq_id> some(ids.begin() + 1, ids.end());
            check(s.attend(some, {3}, GQLA_PATH_GQA, false), "s_q 3");
            // Ragged: a decode step beside prefill chunks (wide tiles).
            check(s.attend({ids[5], ids[0], ids[4]}, {33, 1, 17}, GQLA_PATH_AUTO, true), "ragged");
            // Fork inside a page, then both sides grow: copy-on-write must
            // carry the scales of the shared partial page.
            const gqla_seq_id child = s.fork(ids[3]);
            s.append(child, 5);
            s.append(ids[3], 2);
            check(s.attend({ids[3], child}, {2}, GQLA_PATH_AUTO, false), "fork");
        });
    }
}

TEST_CASE("fp8 GQLA: absorb, GQA path, GQA_TRANSIENT and path switches on every ISA") {
    for_each_gqla_case([](int32_t groups, uint64_t seed, bool outlier) {
        Fp8Session s(odd_gqla(groups), seed, outlier);
        std::vector<gqla_seq_id> ids = sequences(s, {1, 16, 17, 90, 301});
        check(s.attend(ids, {1}, GQLA_PATH_ABSORB, false), "absorb s_q 1");
        check(s.attend({ids[3], ids[4]}, {4}, GQLA_PATH_ABSORB, false), "absorb s_q 4");
        check(s.attend({ids[4], ids[0], ids[2]}, {20, 1, 3}, GQLA_PATH_GQA_TRANSIENT, true), "transient ragged");
        // Switch to the GQA path: the expanded cache is built from the
        // stored latent and quantized per (token, group).
        INFO("gqla_select_path: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_select_path(s.session(), GQLA_PATH_GQA) == GQLA_OK);
        check(s.attend(ids, {1}, GQLA_PATH_GQA, false), "GQA path s_q 1");
        s.append(ids[2], 9);  // appended while expanded: written in both
        const gqla_seq_id child = s.fork(ids[2]);
        s.append(child, 3);
        check(s.attend({ids[2], child, ids[4]}, {2, 3, 30}, GQLA_PATH_GQA, true), "GQA path ragged, fork");
        REQUIRE(gqla_select_path(s.session(), GQLA_PATH_ABSORB) == GQLA_OK);
        check(s.attend({ids[2], child}, {1}, GQLA_PATH_ABSORB, false), "back to absorb");
    });
}

// r = 320, d_r = 32: whole 32-element key steps, the shapes the AMX absorb
// kernel takes (two whole scale blocks and a 64-element one); odd_gqla's
// r = 300 runs the AVX-512 kernel there.
TEST_CASE("fp8 GQLA absorb on whole 32-element key steps (AMX tiles where the host has them) on every ISA") {
    for_each_gqla_case([](int32_t groups, uint64_t seed, bool outlier) {
        gqla_config c = odd_gqla(groups);
        c.latent_dim = 320;
        c.rope_dim = 32;
        Fp8Session s(c, seed, outlier);
        std::vector<gqla_seq_id> ids = sequences(s, {1, 16, 17, 90, 301});
        check(s.attend(ids, {1}, GQLA_PATH_ABSORB, false), "absorb s_q 1");
        check(s.attend({ids[3], ids[4]}, {4}, GQLA_PATH_ABSORB, false), "absorb s_q 4");
        check(s.attend({ids[4], ids[0], ids[2]}, {20, 1, 3}, GQLA_PATH_ABSORB, true), "absorb ragged");
        const gqla_seq_id child = s.fork(ids[2]);
        s.append(child, 3);
        check(s.attend({ids[2], child}, {2}, GQLA_PATH_ABSORB, false), "absorb fork");
    });
}

TEST_CASE("fp8 GQLA without the latent (keep_latent = 0): the expanded rows a latent-keeping session builds") {
    for_each_gqla_case([](int32_t groups, uint64_t seed, bool outlier) {
        gqla_config cfg = odd_gqla(groups);
        cfg.keep_latent = 0;
        cfg.path = GQLA_PATH_GQA;
        // The same seed and calls give both sessions the same weights,
        // rows and queries; the latent-keeping one expands at its
        // path switch (rows so far) and at append (rows after).
        Fp8Session s(cfg, seed, outlier), kept(odd_gqla(groups), seed, outlier);
        const std::vector<int64_t> lengths = {1, 16, 17, 90, 301};
        std::vector<gqla_seq_id> ids = sequences(s, lengths), kept_ids = sequences(kept, lengths);
        INFO("gqla_select_path: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_select_path(kept.session(), GQLA_PATH_GQA) == GQLA_OK);
        // Same expanded bytes and kernels: the same outputs, so the
        // same errors to the last bit; each within the fp8 bounds.
        const auto same = [&](const Errors& e, const Errors& k, const char* what) {
            check(e, what);
            CHECK(e.stored == k.stored);
            CHECK(e.given == k.given);
            CHECK(e.lse == k.lse);
        };
        same(s.attend(ids, {1}, GQLA_PATH_GQA, false), kept.attend(kept_ids, {1}, GQLA_PATH_GQA, false), "s_q 1");
        same(s.attend({ids[4], ids[0], ids[2]}, {20, 1, 3}, GQLA_PATH_AUTO, true),
             kept.attend({kept_ids[4], kept_ids[0], kept_ids[2]}, {20, 1, 3}, GQLA_PATH_GQA, true), "ragged");
        // A fork inside a page, then both sides grow.
        const gqla_seq_id child = s.fork(ids[2]), kept_child = kept.fork(kept_ids[2]);
        s.append(child, 3);
        kept.append(kept_child, 3);
        s.append(ids[2], 9);
        kept.append(kept_ids[2], 9);
        same(s.attend({ids[2], child}, {2}, GQLA_PATH_GQA, false),
             kept.attend({kept_ids[2], kept_child}, {2}, GQLA_PATH_GQA, false), "fork");
        if (groups == 1 && !outlier) {  // one append longer than an expansion block (2048 rows)
            const gqla_seq_id long_id = s.add(), kept_long = kept.add();
            s.append(long_id, 2100);
            kept.append(kept_long, 2100);
            same(s.attend({long_id}, {3}, GQLA_PATH_GQA, false), kept.attend({kept_long}, {3}, GQLA_PATH_GQA, false),
                 "2100 rows in one append");
        }
        // KR in bf16 beside the 8-bit expanded rows, no latent.
        gqla_stats st;
        st.struct_size = sizeof st;
        REQUIRE(gqla_session_stats(s.session(), &st) == GQLA_OK);
        CHECK(st.kept_bytes_per_token == 24 * 2);
        CHECK(st.expanded_bytes_per_token == groups * (40 + 56) + 2 * 4 * groups);
    });
}

TEST_CASE("fp8 GQA kind: a bf16 query is multiplied as given, so a sharp softmax keeps lse exact on every ISA") {
    // The bf16-dot kernels once rounded the query after the softmax scale
    // had been folded into it: 2^-9 of every score, 2e-3 of lse at this
    // scale (about 4x the default 1 / sqrt(72)) on the AVX512-BF16 table.
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    nonfinite::for_each_isa([&](const char*) {
        for (int32_t head_dim : {72, 24}) {  // 24: keys too narrow for the VBMI kernel's 64-byte steps
            CAPTURE(head_dim);
            gqla_config c = odd_gqa();
            c.head_dim = head_dim;
            c.io_dtype = GQLA_DTYPE_BF16;
            c.softmax_scale = 0.5f;
            Fp8Session s(c, seed, false);
            std::vector<gqla_seq_id> ids = sequences(s, {3, 17, 40});
            for (int32_t s_q : {1, 3}) {
                CAPTURE(s_q);
                const Errors e = s.attend(ids, {s_q}, GQLA_PATH_AUTO, false);
                CHECK(e.lse <= 1e-4);
                CHECK(e.stored <= kStoredBound);
            }
        }
    });
}

TEST_CASE("fp8 saturation: large rows stay finite and accurate") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    nonfinite::for_each_isa([&](const char*) {
        // Values of 1e30 (f32 io): each row's scale takes them to <= 448, so
        // nothing saturates to a wrong value and nothing overflows.
        gqla_config c = odd_gqa();
        c.softmax_scale = 1e-30f / std::sqrt(72.0f);  // keeps the scores of order one
        Fp8Session s(c, seed, false);
        const gqla_seq_id a = s.add(), b = s.add();
        s.append(a, 37, 1e30);
        s.append(b, 5, 1e30);
        s.append(b, 20, 1e-20);  // tiny rows beside huge ones in a page
        const Errors e = s.attend({a, b}, {2}, GQLA_PATH_AUTO, false);
        check(e, "1e30 and 1e-20 rows");
    });
}

TEST_CASE("fp8 stats: bytes per token of DeepSeek-V3 dims and of the GQA kind") {
    gqla_config c;
    gqla_config_default(&c, GQLA_KIND_GQLA);
    c.num_heads = 16;
    c.num_kv_heads = 1;
    c.latent_dim = 512;
    c.nope_dim = 128;
    c.rope_dim = 64;
    c.value_dim = 128;
    c.num_layers = 1;
    c.max_tokens = 1024;
    c.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    c.device = GQLA_DEVICE_CPU;
    c.num_threads = 1;
    gqla_session* s = nullptr;
    REQUIRE(gqla_session_create(&c, &s) == GQLA_OK);
    gqla_stats st;
    st.struct_size = sizeof st;
    REQUIRE(gqla_session_stats(s, &st) == GQLA_OK);
    CHECK(st.kept_bytes_per_token == 512 + 4 * 4 + 64 * 2);  // 656
    CHECK(st.expanded_bytes_per_token == 128 + 128 + 2 * 4);
    gqla_session_destroy(s);

    gqla_config g = odd_gqa();
    g.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    g.device = GQLA_DEVICE_CPU;
    REQUIRE(gqla_session_create(&g, &s) == GQLA_OK);
    REQUIRE(gqla_session_stats(s, &st) == GQLA_OK);
    CHECK(st.kept_bytes_per_token == 3 * (72 + 40) + 2 * 3 * 4);
    gqla_session_destroy(s);
}

TEST_CASE("fp8: an io dtype of fp8 is refused with a message") {
    gqla_config c = odd_gqa();
    c.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    c.io_dtype = GQLA_DTYPE_FP8_E4M3;
    c.device = GQLA_DEVICE_CPU;
    gqla_session* s = nullptr;
    CHECK(gqla_session_create(&c, &s) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()).find("io_dtype") != std::string::npos);
}

TEST_CASE("fp8 GQA kind with bf16 io") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    gqla_config c = odd_gqa();
    c.io_dtype = GQLA_DTYPE_BF16;
    Fp8Session s(c, seed, false);
    std::vector<gqla_seq_id> ids = sequences(s, {5, 64, 129});
    check(s.attend(ids, {1}, GQLA_PATH_AUTO, false), "bf16 io");
}

TEST_CASE("fp8 head dims past 64 (whole 64-element chunks plus a tail) on every ISA") {
    const uint64_t seed = abi::test_seed();
    INFO(abi::replay_hint(seed));
    nonfinite::for_each_isa([&](const char*) {
        gqla_config g = odd_gqa();
        g.num_heads = 4;
        g.num_kv_heads = 2;
        g.head_dim = 136;
        g.value_dim = 200;
        Fp8Session s(g, seed, true);
        std::vector<gqla_seq_id> ids = sequences(s, {3, 33, 130});
        check(s.attend(ids, {1}, GQLA_PATH_AUTO, false), "GQA kind s_q 1");
        check(s.attend({ids[1], ids[2]}, {3}, GQLA_PATH_AUTO, false), "GQA kind s_q 3");
        gqla_config l = odd_gqla(2);
        l.nope_dim = 72;
        l.value_dim = 128;
        l.path = GQLA_PATH_GQA;
        Fp8Session x(l, seed + 1, false);
        std::vector<gqla_seq_id> xs = sequences(x, {2, 70});
        check(x.attend(xs, {2}, GQLA_PATH_GQA, false), "GQLA GQA path");
        check(x.attend(xs, {1}, GQLA_PATH_ABSORB, false), "GQLA absorb");
    });
}

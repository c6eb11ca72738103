// SPDX-License-Identifier: Apache-2.0
// The CPU backend driven through its vtable against the float64 reference:
// odd head counts and dims, page-boundary lengths, thousands of tokens,
// several sequences per call, every cache dtype, every ISA the host has,
// both GQLA paths. Outputs are poisoned with NaN before every decode.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "tests/core/test_cpu_backend_support.hpp"

using namespace cpu_backend_test;

namespace {

// Lengths around the page size (16) and one long context; appended in two
// batched calls so that the second starts mid-page.
void fill_sequences(Driver& drv) {
    for (int i = 0; i < 5; ++i) drv.add_sequence();
    REQUIRE(drv.append({0, 1, 2, 3, 4}, {1, 7, 16, 9, 1200}, 0) == GQLA_OK);
    REQUIRE(drv.append({1, 3, 4}, {8, 8, 1301}, 0) == GQLA_OK);  // lengths 1, 15, 16, 17, 2501
}

std::vector<int> sequences_at_least(Driver& drv, int64_t len) {
    std::vector<int> idx;
    for (size_t i = 0; i < drv.sequences().size(); ++i)
        if (drv.sequences()[i].length >= len) idx.push_back(static_cast<int>(i));
    return idx;
}

void check_all_q_lens(Driver& drv, gqla_path path, double tol, const char* what) {
    for (int s_q = 1; s_q <= 5; ++s_q) {
        gqla_status st;
        Errors e = drv.decode_and_check(sequences_at_least(drv, s_q), s_q, path, &st);
        INFO(std::string(what) << " s_q=" << s_q << " rel_l2(o)=" << e.out << " lse error=" << e.lse);
        INFO(drv.replay_hint());
        REQUIRE(st == GQLA_OK);
        CHECK(e.out <= tol);
        CHECK(e.lse <= tol);
    }
}

}  // namespace

TEST_CASE("cpu backend: GQA kind matches the reference for every dtype, group count and ISA") {
    for (KernelChoice kernels : kAllKernels)
        for (gqla_dtype dt : kAllDtypes)
            for (int G : {2, 3}) {
                Driver drv(gqa_desc(dt, G));
                REQUIRE(drv.status() == GQLA_OK);
                if (!use_kernels(drv.ctx(), kernels)) {
                    MESSAGE("host lacks " << kernels_label(kernels) << "; skipped");
                    continue;
                }
                fill_sequences(drv);
                INFO("kernels=" << std::string(kernels_label(kernels)) << " cache=" << std::string(gqla::dtype_name(dt))
                                << " G=" << G);
                check_all_q_lens(drv, GQLA_PATH_GQA, tolerance(dt), "gqa");
            }
}

namespace {

// Every kernel table and group count over one cache dtype (a test case per
// dtype: each takes tens of seconds under the sanitizers).
void gqla_paths_match(gqla_dtype dt) {
    for (KernelChoice kernels : kAllKernels)
        for (int G : {2, 3}) {
            Driver drv(gqla_desc(dt, G));
            REQUIRE(drv.status() == GQLA_OK);
            if (!use_kernels(drv.ctx(), kernels)) {
                MESSAGE("host lacks " << kernels_label(kernels) << "; skipped");
                continue;
            }
            INFO("kernels=" << std::string(kernels_label(kernels)) << " cache=" << std::string(gqla::dtype_name(dt))
                            << " G=" << G);
            REQUIRE(!drv.set_random_weights(GQLA_DTYPE_BF16).empty());
            fill_sequences(drv);
            check_all_q_lens(drv, GQLA_PATH_ABSORB, tolerance(dt), "absorb");

            // Switch the GQA path on: expand what is cached, then keep
            // appending with expansion.
            REQUIRE(drv.vt()->set_expanded(drv.ctx(), 1) == GQLA_OK);
            REQUIRE(drv.expand_all() == GQLA_OK);
            check_all_q_lens(drv, GQLA_PATH_GQA, tolerance(dt), "gqa path after expand");
            REQUIRE(drv.append({0, 2, 4}, {3, 1, 40}, 1) == GQLA_OK);
            check_all_q_lens(drv, GQLA_PATH_GQA, tolerance(dt), "gqa path after expanded append");
            check_all_q_lens(drv, GQLA_PATH_ABSORB, tolerance(dt), "absorb after expanded append");

            if (dt == GQLA_DTYPE_F32) {
                std::vector<double> o_gqa, o_abs;
                gqla_status st;
                const std::vector<int> all = sequences_at_least(drv, 3);
                // Same queries for both paths: fix the rng state.
                std::mt19937_64 saved = drv.rng();
                drv.decode_and_check(all, 3, GQLA_PATH_GQA, &st, &o_gqa);
                REQUIRE(st == GQLA_OK);
                drv.rng() = saved;
                drv.decode_and_check(all, 3, GQLA_PATH_ABSORB, &st, &o_abs);
                REQUIRE(st == GQLA_OK);
                std::vector<float> gf(o_gqa.begin(), o_gqa.end());
                const double cross = gqla::ref::rel_l2(gf.data(), o_abs.data(), o_abs.size());
                INFO("gqa vs absorb rel_l2=" << cross);
                INFO(drv.replay_hint());
                CHECK(cross <= 1e-5);
            }
            REQUIRE(drv.vt()->set_expanded(drv.ctx(), 0) == GQLA_OK);
            int64_t mem[4];
            drv.vt()->memory_usage(drv.ctx(), mem);
            CHECK(mem[1] == 0);
        }
}

}  // namespace

TEST_CASE("cpu backend: GQLA absorb and GQA paths match the reference and each other (f32 cache)") {
    gqla_paths_match(GQLA_DTYPE_F32);
}
TEST_CASE("cpu backend: GQLA absorb and GQA paths match the reference and each other (f16 cache)") {
    gqla_paths_match(GQLA_DTYPE_F16);
}
TEST_CASE("cpu backend: GQLA absorb and GQA paths match the reference and each other (bf16 cache)") {
    gqla_paths_match(GQLA_DTYPE_BF16);
}

TEST_CASE("cpu backend: 16-bit io tensors, one thread, many sequences in one call") {
    for (gqla_dtype io : {GQLA_DTYPE_F16, GQLA_DTYPE_BF16})
        for (int threads : {1, 2}) {
            gqla_backend_desc d = gqla_desc(GQLA_DTYPE_BF16, 3);
            d.io_dtype = io;
            d.num_threads = threads;
            d.max_batch = 12;
            d.page_size = 7;
            d.num_pages = 1200;
            Driver drv(d);
            REQUIRE(drv.status() == GQLA_OK);
            REQUIRE(!drv.set_random_weights(GQLA_DTYPE_F32).empty());
            REQUIRE(drv.vt()->set_expanded(drv.ctx(), 1) == GQLA_OK);
            std::vector<int> idx;
            std::vector<int64_t> counts;
            for (int i = 0; i < 12; ++i) {
                drv.add_sequence();
                idx.push_back(i);
                counts.push_back(1 + (i * 397) % 700);
            }
            REQUIRE(drv.append(idx, counts, 1) == GQLA_OK);
            INFO("io=" << std::string(gqla::dtype_name(io)) << " threads=" << threads);
            // io rounding of q and o adds its own error on top of the cache's.
            check_all_q_lens(drv, GQLA_PATH_GQA, 1e-2, "gqa path");
            check_all_q_lens(drv, GQLA_PATH_ABSORB, 1e-2, "absorb");
        }
}

TEST_CASE("cpu backend: copied pages decode like the originals") {
    gqla_backend_desc d = gqa_desc(GQLA_DTYPE_F16, 2);
    Driver drv(d);
    REQUIRE(drv.status() == GQLA_OK);
    drv.add_sequence();
    REQUIRE(drv.append({0}, {100}, 0) == GQLA_OK);
    // A second sequence whose pages are copies of the first one's.
    Sequence& copy = drv.add_sequence();
    const Sequence& orig = drv.sequences()[0];
    std::vector<int32_t> src = orig.pages, dst;
    for (size_t i = 0; i < src.size(); ++i) dst.push_back(drv.take_page());
    REQUIRE(drv.vt()->copy_pages(drv.ctx(), static_cast<int32_t>(src.size()), src.data(), dst.data()) == GQLA_OK);
    copy.pages = dst;
    copy.length = orig.length;
    copy.a = orig.a;
    copy.b = orig.b;
    gqla_status st;
    Errors e = drv.decode_and_check({1}, 2, GQLA_PATH_GQA, &st);
    INFO(drv.replay_hint());
    REQUIRE(st == GQLA_OK);
    CHECK(e.out <= tolerance(GQLA_DTYPE_F16));
    CHECK(e.lse <= tolerance(GQLA_DTYPE_F16));
}

TEST_CASE("cpu backend: memory accounting and failed weight uploads") {
    gqla_backend_desc d = gqla_desc(GQLA_DTYPE_BF16, 2);
    Driver drv(d);
    REQUIRE(drv.status() == GQLA_OK);
    int64_t mem[4];
    drv.vt()->memory_usage(drv.ctx(), mem);
    const int64_t kept = int64_t(d.num_layers) * d.num_pages * d.page_size * (d.latent_dim + d.rope_dim) * 2;
    CHECK(mem[0] == kept);
    CHECK(mem[1] == 0);
    CHECK(mem[2] == 0);
    CHECK(mem[3] > 0);
    REQUIRE(!drv.set_random_weights(GQLA_DTYPE_F16).empty());
    REQUIRE(drv.vt()->set_expanded(drv.ctx(), 1) == GQLA_OK);
    drv.vt()->memory_usage(drv.ctx(), mem);
    CHECK(mem[1] ==
          int64_t(d.num_layers) * d.num_pages * d.page_size * d.num_kv_heads * (d.nope_dim + d.value_dim) * 2);
    CHECK(mem[2] > 0);

    // A wrong shape is rejected and the old weights still serve decode.
    HostTensor bad(GQLA_DTYPE_F32, {5, d.latent_dim});
    CHECK(drv.vt()->set_weights(drv.ctx(), 0, &bad.view) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(drv.vt()->error_message(drv.ctx())).size() > 0);
    drv.add_sequence();
    REQUIRE(drv.append({0}, {70}, 1) == GQLA_OK);
    gqla_status st;
    Errors e = drv.decode_and_check({0}, 1, GQLA_PATH_ABSORB, &st);
    INFO(drv.replay_hint());
    REQUIRE(st == GQLA_OK);
    CHECK(e.out <= tolerance(GQLA_DTYPE_BF16));
    CHECK(e.lse <= tolerance(GQLA_DTYPE_BF16));

    // The backend refuses to decode a layer without weights.
    Driver fresh(d);
    fresh.add_sequence();
    CHECK(fresh.append({0}, {4}, 0) == GQLA_OK);
    Errors e2 = fresh.decode_and_check({0}, 1, GQLA_PATH_ABSORB, &st);
    (void)e2;
    CHECK(st == GQLA_ERR_INVALID_STATE);
}

TEST_CASE("cpu backend: bf16 weight copies only for bf16 weights or weights past 1 MiB") {
    // The absorb projections of a bf16 cache read bf16 copies of W where
    // rounding W costs nothing (bf16 weights) or pays (large weights); small
    // f32 weights stay f32, as rounding them took fuzzed bf16 decodes past
    // the error bound. memory_usage's weight bytes tell which copies exist.
    for (int G : {2, 6}) {
        const gqla_backend_desc d = gqla_desc(GQLA_DTYPE_BF16, G);
        const int64_t rows = int64_t(G) * (d.nope_dim + d.value_dim), r = d.latent_dim;
        const int64_t f32_bytes = rows * r * 4;  // one f32 copy of one layer
        const int64_t bf16_bytes = rows * r * 2 + int64_t(G) * r * d.value_dim * 2;
        const bool large = f32_bytes > int64_t(1) << 20;
        INFO("G=" << G << " f32 weights " << f32_bytes << " bytes per layer");
        CHECK(large == (G == 6));
        for (gqla_dtype wdt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
            Driver drv(d);
            REQUIRE(drv.status() == GQLA_OK);
            REQUIRE(!drv.set_random_weights(wdt).empty());
            int64_t mem[4];
            drv.vt()->memory_usage(drv.ctx(), mem);
            const bool copies = wdt == GQLA_DTYPE_BF16 || large;
            // With copies: one f32 copy (the expansion's) and the bf16 ones;
            // without: W and its transpose in f32.
            CHECK(mem[2] == d.num_layers * (copies ? f32_bytes + bf16_bytes : 2 * f32_bytes));
            drv.add_sequence();
            REQUIRE(drv.append({0}, {1}, 0) == GQLA_OK);
            REQUIRE(drv.append({0}, {29}, 0) == GQLA_OK);
            check_all_q_lens(drv, GQLA_PATH_ABSORB, tolerance(GQLA_DTYPE_BF16), "absorb");
        }
    }
}

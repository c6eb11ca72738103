// SPDX-License-Identifier: Apache-2.0
// Cache management through the C ABI: path switching, batched appends,
// fork with copy-on-write, capacity exhaustion and recovery.
#include <doctest/doctest.h>

#include "harness.hpp"

using abi::active_path;
using abi::Harness;
using abi::require_ok;

namespace {

// Append given f32 rows to one sequence through gqla_append and mirror them.
void append_rows(Harness& h, gqla_seq_id seq, const std::vector<double>& av, const std::vector<double>& bv) {
    const int64_t n = static_cast<int64_t>(av.size()) / h.a_cols();
    abi::Buffer a = abi::make_poisoned(GQLA_DTYPE_F32, av.size()), b = abi::make_poisoned(GQLA_DTYPE_F32, bv.size());
    for (size_t k = 0; k < av.size(); ++k) a.set(k, av[k]);
    for (size_t k = 0; k < bv.size(); ++k) b.set(k, bv[k]);
    gqla_tensor ta = abi::view(a, h.a_shape(n)), tb = abi::view(b, h.b_shape(n));
    require_ok(gqla_append(h.session(), 0, seq, &ta, &tb), "gqla_append");
    h.record(seq, 0, abi::values_of(a), abi::values_of(b));
}

}  // namespace

TEST_CASE("switching paths mid-sequence keeps decode correct and moves the expanded cache") {
    gqla_config cfg = abi::odd_gqla_config(3);
    cfg.num_layers = 2;
    cfg.path = GQLA_PATH_ABSORB;
    Harness h(cfg);
    gqla_seq_id a = h.add(), b = h.add();
    h.append_ok(a, 0, 20);
    h.append_ok(b, 0, 7);
    h.append_ok(a, 1, 9);
    CHECK(active_path(h.session()) == GQLA_PATH_ABSORB);
    CHECK(h.stats().expanded_bytes == 0);
    CHECK_DECODE_MATCHES(h.decode(0, {a, b}, 1), 1e-5);

    require_ok(gqla_select_path(h.session(), GQLA_PATH_GQA), "gqla_select_path");
    CHECK(active_path(h.session()) == GQLA_PATH_GQA);
    CHECK(h.stats().path == GQLA_PATH_GQA);
    CHECK(h.stats().expanded_bytes > 0);
    CHECK_DECODE_MATCHES(h.decode(0, {a, b}, 2), 1e-5);
    CHECK_DECODE_MATCHES(h.decode(1, {a}, 1), 1e-5);

    // Tokens appended while on the GQA path are expanded as they arrive.
    h.append_ok(a, 0, 13);
    h.append_ok(b, 0, 1);
    CHECK_DECODE_MATCHES(h.decode(0, {b, a}, 1), 1e-5);

    require_ok(gqla_select_path(h.session(), GQLA_PATH_ABSORB), "gqla_select_path");
    CHECK(active_path(h.session()) == GQLA_PATH_ABSORB);
    CHECK(h.stats().expanded_bytes == 0);
    h.append_ok(b, 0, 30);
    CHECK_DECODE_MATCHES(h.decode(0, {a, b}, 3), 1e-5);

    // And back once more, now with tokens appended on absorb since the last expansion.
    require_ok(gqla_select_path(h.session(), GQLA_PATH_GQA), "gqla_select_path");
    CHECK(h.stats().expanded_bytes > 0);
    CHECK_DECODE_MATCHES(h.decode(0, {a, b}, 1), 1e-5);
    CHECK_DECODE_MATCHES(h.decode(1, {a}, 2), 1e-5);
}

TEST_CASE("replacing weights on the GQA path re-expands the cache") {
    gqla_config cfg = abi::odd_gqla_config(2);
    cfg.path = GQLA_PATH_GQA;
    Harness h(cfg);
    gqla_seq_id s = h.add();
    h.append_ok(s, 0, 21);
    CHECK_DECODE_MATCHES(h.decode(0, {s}, 1), 1e-5);
    h.set_weights(0);
    CHECK_DECODE_MATCHES(h.decode(0, {s}, 1), 1e-5);
}

TEST_CASE("append_batch gives the same outputs as per-sequence appends of the same rows") {
    for (int kind_path = 0; kind_path < 3; ++kind_path) {
        gqla_config cfg = kind_path == 0 ? abi::odd_gqa_config(2) : abi::odd_gqla_config(2);
        if (kind_path) cfg.path = kind_path == 1 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        CAPTURE(kind_path);
        Harness h(cfg);
        // Pairs of sequences with identical prefixes (of different lengths,
        // some mid-page), then the same rows through the two entry points.
        const std::vector<int64_t> prefix{1, 15, 4, 16}, counts{3, 17, 0, 5};
        std::vector<gqla_seq_id> batched, separate;
        for (size_t i = 0; i < counts.size(); ++i) {
            batched.push_back(h.add());
            separate.push_back(h.add());
            auto ap = h.rng().normal(static_cast<size_t>(prefix[i] * h.a_cols()));
            auto bp = h.rng().normal(static_cast<size_t>(prefix[i] * h.b_cols()));
            append_rows(h, batched.back(), ap, bp);
            append_rows(h, separate.back(), ap, bp);
        }
        int64_t total = 0;
        for (int64_t c : counts) total += c;
        abi::Buffer a = abi::make_input(h.rng(), GQLA_DTYPE_F32, static_cast<size_t>(total * h.a_cols()));
        abi::Buffer b = abi::make_input(h.rng(), GQLA_DTYPE_F32, static_cast<size_t>(total * h.b_cols()));
        gqla_tensor ta = abi::view(a, h.a_shape(total)), tb = abi::view(b, h.b_shape(total));
        require_ok(gqla_append_batch(h.session(), 0, static_cast<int32_t>(batched.size()), batched.data(),
                                     counts.data(), &ta, &tb),
                   "gqla_append_batch");
        const auto av = abi::values_of(a), bv = abi::values_of(b);
        int64_t row = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
            std::vector<double> ai(av.begin() + row * h.a_cols(), av.begin() + (row + counts[i]) * h.a_cols());
            std::vector<double> bi(bv.begin() + row * h.b_cols(), bv.begin() + (row + counts[i]) * h.b_cols());
            h.record(batched[i], 0, ai, bi);
            if (counts[i] > 0) append_rows(h, separate[i], ai, bi);
            row += counts[i];
            CHECK(h.length(batched[i], 0) == prefix[i] + counts[i]);
        }
        abi::Buffer q = h.random_q(static_cast<int32_t>(counts.size()), 1);
        auto r1 = h.decode_with(0, batched, 1, q, abi::Layout::Contiguous, true);
        auto r2 = h.decode_with(0, separate, 1, q, abi::Layout::Contiguous, true);
        CHECK_DECODE_MATCHES(r1, 1e-5);
        CHECK_DECODE_MATCHES(r2, 1e-5);
        REQUIRE(r1.o.size() == r2.o.size());
        INFO(abi::replay_hint(h.rng().seed()));
        for (size_t i = 0; i < r1.o.size(); ++i) CHECK(r1.o[i] == doctest::Approx(r2.o[i]).epsilon(1e-6));
    }
}

TEST_CASE("fork shares pages and copies on write") {
    for (int kind_path = 0; kind_path < 3; ++kind_path) {
        gqla_config cfg = kind_path == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        if (kind_path) cfg.path = kind_path == 1 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        cfg.num_layers = 2;
        CAPTURE(kind_path);
        Harness h(cfg);
        gqla_seq_id parent = h.add();
        h.append_ok(parent, 0, 2 * 16 + 5);  // two full pages and a partial one
        h.append_ok(parent, 1, 16);
        const gqla_stats before = h.stats();
        gqla_seq_id child = h.fork(parent);
        const gqla_stats shared = h.stats();
        CHECK(shared.pages_used == before.pages_used);  // nothing copied yet
        CHECK(shared.sequences == before.sequences + 1);
        CHECK(h.length(child, 0) == 37);
        CHECK(h.length(child, 1) == 16);
        CHECK_DECODE_MATCHES(h.decode(0, {parent, child}, 1), h.tol());

        // Writing into the shared partial page copies it for the writer only.
        h.append_ok(child, 0, 3);
        CHECK(h.stats().pages_used > shared.pages_used);
        CHECK(h.length(parent, 0) == 37);
        CHECK_DECODE_MATCHES(h.decode(0, {parent}, 2), h.tol());
        CHECK_DECODE_MATCHES(h.decode(0, {child}, 2), h.tol());

        h.append_ok(parent, 0, 20);
        h.append_ok(parent, 1, 1);
        CHECK(h.length(child, 0) == 40);
        CHECK(h.length(child, 1) == 16);
        CHECK_DECODE_MATCHES(h.decode(0, {child, parent}, 1), h.tol());
        CHECK_DECODE_MATCHES(h.decode(1, {child, parent}, 1), h.tol());

        // Releasing the parent leaves the child intact; releasing both frees all.
        h.release(parent);
        CHECK_DECODE_MATCHES(h.decode(0, {child}, 3), h.tol());
        CHECK_DECODE_MATCHES(h.decode(1, {child}, 1), h.tol());
        h.release(child);
        CHECK(h.stats().pages_used == 0);
        CHECK(h.stats().sequences == 0);
    }
}

TEST_CASE("capacity exhaustion fails exactly, changes nothing and recovers after release") {
    for (int kind = 0; kind < 2; ++kind) {
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        cfg.page_size = 16;
        cfg.max_tokens = 4 * 16;
        CAPTURE(kind);
        Harness h(cfg);
        gqla_seq_id a = h.add(), b = h.add();
        h.append_ok(a, 0, 40);  // 3 pages
        h.append_ok(b, 0, 10);  // 1 page: pool full
        const gqla_stats full = h.stats();
        CHECK(full.pages_free == 0);
        CHECK(full.token_capacity_left == 0);

        // b's page has 6 free slots: 7 tokens need a new page.
        CHECK(h.append(b, 0, 7) == GQLA_ERR_CAPACITY);
        CHECK(h.append(a, 0, 9) == GQLA_ERR_CAPACITY);
        // A batch where the first part fits and the second does not: nothing at all.
        CHECK(h.append_batch(0, {b, a}, {6, 9}) == GQLA_ERR_CAPACITY);
        // A fork shares b's partial page; writing into it needs a copy: no page left.
        gqla_seq_id child = h.fork(b);
        CHECK(h.append(child, 0, 1) == GQLA_ERR_CAPACITY);
        CHECK(h.append(b, 0, 1) == GQLA_ERR_CAPACITY);
        h.release(child);
        const gqla_stats after = h.stats();
        CHECK(after.pages_used == full.pages_used);
        CHECK(after.tokens_cached == full.tokens_cached);
        CHECK(after.token_capacity_left == full.token_capacity_left);
        CHECK(h.length(a, 0) == 40);
        CHECK(h.length(b, 0) == 10);
        CHECK_DECODE_MATCHES(h.decode(0, {a, b}, 1), h.tol());

        // Exactly filling the last page still works.
        h.append_ok(b, 0, 6);
        CHECK(h.append(b, 0, 1) == GQLA_ERR_CAPACITY);

        h.release(a);
        CHECK(h.stats().pages_free == 3);
        gqla_seq_id c = h.add();
        h.append_ok(c, 0, 48);
        CHECK_DECODE_MATCHES(h.decode(0, {b, c}, 2), h.tol());
    }
}

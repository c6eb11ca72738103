// SPDX-License-Identifier: Apache-2.0
// Group-sharded sessions (config.group_begin / group_count / keep_latent):
// the shards' outputs and lse, gathered over heads, are the full session's
// and the float64 reference's, on every path and call form; the weights may
// come whole or as the shard's rows; a session without the latent accounts
// for and refuses what it cannot do, changing nothing; bad shard configs are
// refused naming the field; exported sequences stay in their shard.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"
#include "harness.hpp"
#include "shard_fixture.hpp"

namespace {

using shards::Fixture;
using shards::Options;
using shards::Output;
using shards::Shard;

using shards::kF32Tol;
using shards::message_has;
using shards::ok;
using shards::stats_of;

// Sequences of several pages and lengths, with a few tokens in layer 1 too.
std::vector<int> fill(Fixture& f) {
    std::vector<int> seqs;
    for (int64_t len : {13, 30, 7}) {
        const int s = f.add();
        f.append(s, 0, len - 3);
        f.append(s, 0, 3);
        if (f.config().num_layers > 1) f.append(s, 1, 5);
        seqs.push_back(s);
    }
    return seqs;
}

// Uneven shards too: group_count need not be equal across ranks.
const std::vector<Shard> kUneven = {{0, 1}, {1, 2}, {3, 1}};

}  // namespace

TEST_CASE("shards: GQLA outputs gathered over heads equal the full session and the reference on both paths") {
    for (gqla_path path : {GQLA_PATH_GQA, GQLA_PATH_ABSORB}) {
        for (const std::vector<Shard>& parts : {shards::even_shards(4, 4), kUneven}) {
            gqla_config c = shards::gqla_layer(GQLA_DTYPE_F32, 2);
            c.path = path;
            Fixture f(c, Options{parts});
            const std::vector<int> seqs = fill(f);
            for (int32_t s_q : {1, 3}) f.check_call(0, seqs, s_q, {}, path, kF32Tol);
            f.check_call(1, seqs, 2, {}, path, kF32Tol);
            for (gqla_session* s : f.ranks()) {
                gqla_path active = GQLA_PATH_AUTO;
                ok(gqla_get_path(s, &active, nullptr));
                CHECK(active == path);
            }
        }
    }
}

TEST_CASE("shards: ragged gqla_attention calls of every form, with and without the latent") {
    const std::vector<int32_t> q_lens = {1, 4, 2};
    {
        Fixture f(shards::gqla_layer(GQLA_DTYPE_F32), Options{kUneven});
        const std::vector<int> seqs = fill(f);
        for (gqla_path path : {GQLA_PATH_AUTO, GQLA_PATH_GQA, GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT})
            f.check_call(0, seqs, 0, q_lens, path, kF32Tol);
    }
    {
        Options opt{shards::even_shards(4, 2)};
        opt.keep_latent = 0;
        Fixture f(shards::gqla_layer(GQLA_DTYPE_F32), opt);
        const std::vector<int> seqs = fill(f);
        for (gqla_path path : {GQLA_PATH_AUTO, GQLA_PATH_GQA}) f.check_call(0, seqs, 0, q_lens, path, kF32Tol);
        f.check_call(0, seqs, 3, {}, GQLA_PATH_GQA, kF32Tol);
    }
}

TEST_CASE("shards: a bf16 cache without the latent stays within the bf16 bound") {
    Options opt{shards::even_shards(4, 4)};
    opt.keep_latent = 0;
    Fixture f(shards::gqla_layer(GQLA_DTYPE_BF16), opt);
    const std::vector<int> seqs = fill(f);
    const double tol = abi::tolerance(GQLA_DTYPE_BF16, GQLA_DTYPE_F32);
    f.check_call(0, seqs, 1, {}, GQLA_PATH_GQA, tol);
    f.check_call(0, seqs, 0, {2, 1, 3}, GQLA_PATH_AUTO, tol);
}

TEST_CASE("shards: GQA kind, each shard fed its KV heads' slice") {
    Fixture f(shards::gqa_layer(GQLA_DTYPE_F32), Options{kUneven});
    const std::vector<int> seqs = fill(f);
    f.check_call(0, seqs, 1, {}, GQLA_PATH_GQA, kF32Tol);
    f.check_call(0, seqs, 4, {}, GQLA_PATH_GQA, kF32Tol);
    f.check_call(0, seqs, 0, {3, 1, 2}, GQLA_PATH_AUTO, kF32Tol);
}

TEST_CASE("shards: forks and path switches of shards that keep the latent") {
    Fixture f(shards::gqla_layer(GQLA_DTYPE_F32), Options{shards::even_shards(4, 2)});
    std::vector<int> seqs = fill(f);
    const int child = f.fork(seqs[0]);
    f.append(child, 0, 6);  // copy-on-write of the shared partial page
    f.append(seqs[0], 0, 2);
    seqs.push_back(child);
    for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA, GQLA_PATH_ABSORB}) {
        ok(gqla_select_path(f.full(), path));
        for (gqla_session* s : f.ranks()) ok(gqla_select_path(s, path));
        f.check_call(0, seqs, 2, {}, path, kF32Tol);
    }
    Options opt{shards::even_shards(4, 4)};
    opt.keep_latent = 0;
    Fixture g(shards::gqla_layer(GQLA_DTYPE_F32), opt);
    std::vector<int> more = fill(g);
    const int kid = g.fork(more[1]);
    g.append(kid, 0, 5);
    more.push_back(kid);
    g.check_call(0, more, 1, {}, GQLA_PATH_GQA, kF32Tol);
}

TEST_CASE("shards: full W_UKV and the shard's rows give identical results; other row counts are refused") {
    Options whole{kUneven};
    Options rows{kUneven};
    rows.shard_rows_weights = true;
    whole.seed = rows.seed = abi::test_seed() | 1u;  // the same weights, tokens and queries in both
    Fixture a(shards::gqla_layer(GQLA_DTYPE_F32), whole);
    Fixture b(shards::gqla_layer(GQLA_DTYPE_F32), rows);
    const std::vector<int> sa = fill(a), sb = fill(b);
    for (gqla_path path : {GQLA_PATH_GQA, GQLA_PATH_ABSORB}) {
        for (Fixture* f : {&a, &b})
            for (gqla_session* s : f->ranks()) ok(gqla_select_path(s, path));
        const std::vector<float> qa = a.queries({2, 2, 2}), qb = b.queries({2, 2, 2});
        REQUIRE(qa == qb);
        Output oa, ob;
        ok(a.run_shards(0, sa, 2, {}, qa, path, oa));
        ok(b.run_shards(0, sb, 2, {}, qb, path, ob));
        INFO(abi::replay_hint(a.seed()));
        CHECK(std::memcmp(oa.o.data(), ob.o.data(), oa.o.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(oa.lse.data(), ob.lse.data(), oa.lse.size() * sizeof(float)) == 0);
        std::vector<double> ref_o, ref_lse;
        a.reference(0, sa, {2, 2, 2}, qa, ref_o, ref_lse);
        CHECK(gqla::ref::rel_l2(ob.o.data(), ref_o.data(), ref_o.size()) <= kF32Tol);
    }

    // Neither the full rows nor the shard's rows: refused, naming both.
    std::vector<float> w(3 * 28 * 40, 1.0f);
    gqla_tensor t;
    const int64_t shape[2] = {3 * 28, 40};
    ok(gqla_tensor_init(&t, w.data(), GQLA_DTYPE_F32, 2, shape));
    const gqla_stats before = stats_of(a.ranks()[0]);
    CHECK(gqla_set_weights(a.ranks()[0], 0, &t) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(message_has("w_ukv"));
    CHECK(message_has("expected 112"));  // all groups: 4 x 28
    CHECK(message_has("or 28"));         // this shard's group: 1 x 28
    CHECK(stats_of(a.ranks()[0]).weight_bytes == before.weight_bytes);
    // The refused upload changed nothing: the shards still give a's results.
    const std::vector<float> q = a.queries({1, 1, 1});
    Output o1;
    ok(a.run_shards(0, sa, 1, {}, q, GQLA_PATH_AUTO, o1));
    std::vector<double> ref_o, ref_lse;
    a.reference(0, sa, {1, 1, 1}, q, ref_o, ref_lse);
    CHECK(gqla::ref::rel_l2(o1.o.data(), ref_o.data(), ref_o.size()) <= kF32Tol);
}

// SPDX-License-Identifier: Apache-2.0
// Group-sharded sessions, the state side: memory accounting per token of a
// shard with and without the latent, the refusals of a session without it
// (each leaving the session as it was), bad shard configs, exported
// sequences that stay in their shard, and the cost of a shard priced as the
// layer it serves.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/reference/reference.hpp"
#include "harness.hpp"
#include "shard_fixture.hpp"

namespace {

using shards::Fixture;
using shards::Options;
using shards::Output;

using shards::kF32Tol;
using shards::message_has;
using shards::ok;
using shards::stats_of;

void check_same_stats(const gqla_stats& a, const gqla_stats& b) {
    CHECK(a.path == b.path);
    CHECK(a.pages_used == b.pages_used);
    CHECK(a.sequences == b.sequences);
    CHECK(a.tokens_cached == b.tokens_cached);
    CHECK(a.latent_bytes == b.latent_bytes);
    CHECK(a.expanded_bytes == b.expanded_bytes);
    CHECK(a.weight_bytes == b.weight_bytes);
}

// LLaMA-3-8B-GQLA (bench preset llama3-8b-gqla): H=32, G=8, r=512, d_c=64,
// d_r=64, d_v=128, bf16 cache.
gqla_config llama3_gqla(int32_t begin, int32_t count, int32_t keep_latent, gqla_path path) {
    gqla_config c;
    ok(gqla_config_default(&c, GQLA_KIND_GQLA));
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.latent_dim = 512;
    c.nope_dim = 64;
    c.rope_dim = 64;
    c.value_dim = 128;
    c.device = shards::test_device();
    c.num_threads = 1;
    c.max_tokens = 256;
    c.max_sequences = 4;
    c.max_batch = 4;
    c.group_begin = begin;
    c.group_count = count;
    c.keep_latent = keep_latent;
    c.path = path;
    return c;
}

}  // namespace

TEST_CASE("shard accounting: LLaMA-3-8B-GQLA on 8 ranks keeps 256 elements per token without the latent") {
    struct Case {
        int32_t keep_latent;
        gqla_path path;
        int64_t kept, expanded_allocated;  // elements per token and layer (bf16: 2 bytes each)
    };
    // Without the latent: kr (64) kept, the group's KC+VE (192) resident.
    // With it: the replica c+kr (576), plus 192 while on the GQA path.
    for (const Case& k :
         {Case{0, GQLA_PATH_AUTO, 64, 192}, Case{1, GQLA_PATH_GQA, 576, 192}, Case{1, GQLA_PATH_ABSORB, 576, 0}}) {
        for (int32_t rank : {0, 5, 7}) {
            const gqla_config c = llama3_gqla(rank, 1, k.keep_latent, k.path);
            gqla_session* s = nullptr;
            ok(gqla_session_create(&c, &s));
            const gqla_stats st = stats_of(s);
            CHECK(st.kept_bytes_per_token == 2 * k.kept);
            CHECK(st.expanded_bytes_per_token == 2 * 192);
            CHECK(st.latent_bytes == st.pages_total * st.page_size * 2 * k.kept);
            CHECK(st.expanded_bytes == st.pages_total * st.page_size * 2 * k.expanded_allocated);
            gqla_config got;
            got.struct_size = sizeof(got);
            ok(gqla_session_get_config(s, &got));
            CHECK(got.num_heads == 32);
            CHECK(got.num_kv_heads == 8);
            CHECK(got.group_begin == rank);
            CHECK(got.group_count == 1);
            CHECK(got.keep_latent == k.keep_latent);
            gqla_session_destroy(s);
        }
    }
    // The full layer, for scale: 8 x 192 + 64 expanded elements per token.
    gqla_config full = llama3_gqla(0, 0, 1, GQLA_PATH_GQA);
    gqla_session* s = nullptr;
    ok(gqla_session_create(&full, &s));
    CHECK(stats_of(s).expanded_bytes_per_token == 2 * 8 * 192);
    gqla_config got;
    got.struct_size = sizeof(got);
    ok(gqla_session_get_config(s, &got));
    CHECK(got.group_count == 8);  // 0 resolves to all groups
    gqla_session_destroy(s);
}

TEST_CASE("keep_latent = 0: absorb, transient, export and late weights are refused and change nothing") {
    Options opt{shards::even_shards(4, 2)};
    opt.keep_latent = 0;
    Fixture f(shards::gqla_layer(GQLA_DTYPE_F32, 2), opt);
    std::vector<int> seqs;
    for (int64_t len : {11, 6}) {
        seqs.push_back(f.add());
        f.append(seqs.back(), 0, len);
    }
    gqla_session* s = f.ranks()[1];
    const gqla_stats before = stats_of(s);
    gqla_path active = GQLA_PATH_AUTO, requested = GQLA_PATH_GQA;
    ok(gqla_get_path(s, &active, &requested));
    CHECK(active == GQLA_PATH_GQA);
    CHECK(requested == GQLA_PATH_AUTO);

    CHECK(gqla_select_path(s, GQLA_PATH_ABSORB) == GQLA_ERR_INVALID_STATE);
    CHECK(message_has("keep_latent = 0"));
    ok(gqla_get_path(s, &active, &requested));
    CHECK(active == GQLA_PATH_GQA);
    CHECK(requested == GQLA_PATH_AUTO);

    for (gqla_path path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT}) {
        Output out;
        const std::vector<float> q = f.queries({1, 2});
        CHECK(f.run_shards(0, seqs, 0, {1, 2}, q, path, out) == GQLA_ERR_INVALID_STATE);
        CHECK(message_has(path == GQLA_PATH_ABSORB ? "GQLA_PATH_ABSORB" : "GQLA_PATH_GQA_TRANSIENT"));
        CHECK(message_has("latent"));
        for (float x : out.o) CHECK(std::isnan(x));  // nothing written
    }

    size_t needed = 7;
    gqla_seq_id id = 0;
    ok(gqla_sequence_add(s, &id));  // an empty sequence: still no latent to export
    CHECK(gqla_sequence_export(s, id, nullptr, 0, &needed) == GQLA_ERR_INVALID_STATE);
    CHECK(message_has("sequence_export"));
    ok(gqla_sequence_release(s, id));

    std::vector<float>& w = f.weights(0);
    gqla_tensor t;
    const int64_t shape[2] = {4 * 28, 40};
    std::vector<float> other(w.size(), 0.5f);
    ok(gqla_tensor_init(&t, other.data(), GQLA_DTYPE_F32, 2, shape));
    CHECK(gqla_set_weights(s, 0, &t) == GQLA_ERR_INVALID_STATE);
    CHECK(message_has("layer 0 holds tokens"));
    ok(gqla_set_weights(s, 1, &t));  // layer 1 holds none: replacing is fine
    ok(gqla_tensor_init(&t, f.weights(1).data(), GQLA_DTYPE_F32, 2, shape));
    ok(gqla_set_weights(s, 1, &t));  // back to the fixture's weights

    check_same_stats(before, stats_of(s));
    ok(gqla_select_path(s, GQLA_PATH_GQA));
    ok(gqla_select_path(s, GQLA_PATH_AUTO));
    check_same_stats(before, stats_of(s));
    // Still right, in both layers (layer 1 appended after its weights came back).
    f.check_call(0, seqs, 2, {}, GQLA_PATH_GQA, kF32Tol);
    f.append(seqs[0], 1, 4);
    f.append(seqs[1], 1, 3);
    f.check_call(1, seqs, 0, {3, 1}, GQLA_PATH_AUTO, kF32Tol);

    // Every layer's weights must be set before its first append (as always).
    gqla_config c = shards::gqla_layer(GQLA_DTYPE_F32);
    c.keep_latent = 0;
    gqla_session* bare = nullptr;
    ok(gqla_session_create(&c, &bare));
    ok(gqla_sequence_add(bare, &id));
    std::vector<float> rows(40 + 8, 1.0f);
    gqla_tensor ct, krt;
    const int64_t cs[2] = {1, 40}, ks[2] = {1, 8};
    ok(gqla_tensor_init(&ct, rows.data(), GQLA_DTYPE_F32, 2, cs));
    ok(gqla_tensor_init(&krt, rows.data() + 40, GQLA_DTYPE_F32, 2, ks));
    CHECK(gqla_append(bare, 0, id, &ct, &krt) == GQLA_ERR_INVALID_STATE);
    gqla_session_destroy(bare);
}

TEST_CASE("shard configs: out-of-range groups and latent-free GQA or absorb configs are refused naming the field") {
    struct Bad {
        gqla_kind kind;
        int32_t begin, count, keep_latent;
        gqla_path path;
        const char* field;
    };
    const Bad cases[] = {
        {GQLA_KIND_GQLA, 0, -1, 1, GQLA_PATH_AUTO, "config.group_count"},
        {GQLA_KIND_GQLA, 0, 5, 1, GQLA_PATH_AUTO, "config.group_count"},
        {GQLA_KIND_GQA, 0, 5, 1, GQLA_PATH_AUTO, "config.group_count"},
        {GQLA_KIND_GQLA, 3, 2, 1, GQLA_PATH_AUTO, "config.group_begin"},
        {GQLA_KIND_GQLA, -1, 1, 1, GQLA_PATH_AUTO, "config.group_begin"},
        {GQLA_KIND_GQA, 4, 0, 1, GQLA_PATH_AUTO, "config.group_begin"},
        {GQLA_KIND_GQA, 0, 2, 0, GQLA_PATH_AUTO, "config.keep_latent"},
        {GQLA_KIND_GQLA, 0, 2, 2, GQLA_PATH_AUTO, "config.keep_latent"},
        {GQLA_KIND_GQLA, 0, 2, 0, GQLA_PATH_ABSORB, "config.path"},
    };
    for (const Bad& b : cases) {
        gqla_config c =
            b.kind == GQLA_KIND_GQLA ? shards::gqla_layer(GQLA_DTYPE_F32) : shards::gqa_layer(GQLA_DTYPE_F32);
        c.group_begin = b.begin;
        c.group_count = b.count;
        c.keep_latent = b.keep_latent;
        c.path = b.path;
        INFO(b.field << " begin " << b.begin << " count " << b.count << " keep_latent " << b.keep_latent);
        CHECK(gqla_config_validate(&c) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(message_has(b.field));
        gqla_session* s = reinterpret_cast<gqla_session*>(&c);
        CHECK(gqla_session_create(&c, &s) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(s == nullptr);
    }
    // An 8-bit cache without the latent: the CPU backend takes it
    // (tests/abi/test_fp8_cache.cpp); the CUDA backend reads an 8-bit GQLA
    // cache through the latent only (docs/fp8-cache.md) and refuses it at
    // create.
    gqla_config fp8 = shards::gqla_layer(GQLA_DTYPE_FP8_E4M3);
    fp8.keep_latent = 0;
    ok(gqla_config_validate(&fp8));
    gqla_session* fp8_session = nullptr;
    if (shards::test_device() == GQLA_DEVICE_CUDA) {
        fp8_session = reinterpret_cast<gqla_session*>(&fp8);
        CHECK(gqla_session_create(&fp8, &fp8_session) == GQLA_ERR_UNSUPPORTED);
        CHECK(message_has("keep_latent"));
        CHECK(fp8_session == nullptr);
    } else {
        ok(gqla_session_create(&fp8, &fp8_session));
        gqla_session_destroy(fp8_session);
    }
    gqla_config fine = shards::gqla_layer(GQLA_DTYPE_F32);
    fine.group_begin = 3;
    fine.group_count = 1;
    fine.keep_latent = 0;
    fine.path = GQLA_PATH_GQA;
    ok(gqla_config_validate(&fine));
}

TEST_CASE("shard sequences: exported with their groups, imported only into the same shard") {
    for (gqla_kind kind : {GQLA_KIND_GQLA, GQLA_KIND_GQA}) {
        const gqla_config base =
            kind == GQLA_KIND_GQLA ? shards::gqla_layer(GQLA_DTYPE_BF16) : shards::gqa_layer(GQLA_DTYPE_BF16);
        Options opt{{{0, 2}, {2, 2}}};
        Fixture f(base, opt);
        const int seq = f.add();
        f.append(seq, 0, 10);
        std::vector<std::vector<unsigned char>> bytes;
        for (size_t r = 0; r < f.ranks().size(); ++r) {
            gqla_session* s = f.ranks()[r];
            const gqla_seq_id id = f.id_of(seq, r + 1);
            size_t needed = 0;
            ok(gqla_sequence_export(s, id, nullptr, 0, &needed));
            const size_t row = kind == GQLA_KIND_GQLA ? 40 + 8 : 2 * (24 + 16);
            CHECK(needed == 72 + 8 + 10 * row * 2 + 8);  // 72-byte header: a shard's
            bytes.emplace_back(needed);
            ok(gqla_sequence_export(s, id, bytes.back().data(), needed, &needed));
        }
        size_t full_needed = 0;
        ok(gqla_sequence_export(f.full(), f.id_of(seq, 0), nullptr, 0, &full_needed));
        std::vector<unsigned char> full_bytes(full_needed);
        ok(gqla_sequence_export(f.full(), f.id_of(seq, 0), full_bytes.data(), full_needed, &full_needed));

        // Into the same shard of another session: accepted, and it decodes alike.
        for (size_t i = 0; i < 2; ++i) {
            gqla_config c = base;
            c.group_begin = opt.shards[i].begin;
            c.group_count = opt.shards[i].count;
            gqla_session* t = nullptr;
            ok(gqla_session_create(&c, &t));
            if (kind == GQLA_KIND_GQLA) {
                gqla_tensor w;
                const int64_t shape[2] = {4 * 28, 40};
                ok(gqla_tensor_init(&w, f.weights(0).data(), GQLA_DTYPE_F32, 2, shape));
                ok(gqla_set_weights(t, 0, &w));
            }
            const gqla_stats before = stats_of(t);
            gqla_seq_id out = 0;
            const std::vector<unsigned char>& other = bytes[1 - i];
            CHECK(gqla_sequence_import(t, other.data(), other.size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
            CHECK(message_has("groups"));
            CHECK(gqla_sequence_import(t, full_bytes.data(), full_bytes.size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
            CHECK(message_has("groups [0, 4)"));
            check_same_stats(before, stats_of(t));
            ok(gqla_sequence_import(t, bytes[i].data(), bytes[i].size(), &out));
            size_t again = 0;
            ok(gqla_sequence_export(t, out, nullptr, 0, &again));
            std::vector<unsigned char> round(again);
            ok(gqla_sequence_export(t, out, round.data(), again, &again));
            CHECK(round == bytes[i]);
            gqla_session_destroy(t);
        }
        // Every single-byte change of a shard's buffer is refused, the
        // 72-byte header included.
        {
            gqla_session* same = f.ranks()[0];
            const gqla_stats before = stats_of(same);
            std::vector<unsigned char> damaged = bytes[0];
            for (size_t i = 0; i < damaged.size(); ++i) {
                damaged[i] ^= 0x01;
                gqla_seq_id out = -7;
                if (gqla_sequence_import(same, damaged.data(), damaged.size(), &out) != GQLA_ERR_INVALID_ARGUMENT)
                    FAIL("byte " << i << " ^ 1 was accepted");
                damaged[i] ^= 0x01;
            }
            check_same_stats(before, stats_of(same));
        }
        // The full session refuses a shard's buffer.
        gqla_seq_id out = 0;
        CHECK(gqla_sequence_import(f.full(), bytes[0].data(), bytes[0].size(), &out) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(message_has("groups [0, 2)"));
    }
}

TEST_CASE("keep_latent = 0: a shard imports a latent-keeping shard's export and decodes it right") {
    Fixture f(shards::gqla_layer(GQLA_DTYPE_F32), Options{{{1, 2}}});
    const int seq = f.add();
    f.append(seq, 0, 17);
    size_t needed = 0;
    ok(gqla_sequence_export(f.ranks()[0], f.id_of(seq, 1), nullptr, 0, &needed));
    std::vector<unsigned char> bytes(needed);
    ok(gqla_sequence_export(f.ranks()[0], f.id_of(seq, 1), bytes.data(), needed, &needed));

    gqla_config c = shards::gqla_layer(GQLA_DTYPE_F32);
    c.group_begin = 1;
    c.group_count = 2;
    c.keep_latent = 0;
    gqla_session* t = nullptr;
    ok(gqla_session_create(&c, &t));
    gqla_tensor w;
    const int64_t shape[2] = {4 * 28, 40};
    ok(gqla_tensor_init(&w, f.weights(0).data(), GQLA_DTYPE_F32, 2, shape));
    ok(gqla_set_weights(t, 0, &w));
    gqla_seq_id id = 0;
    ok(gqla_sequence_import(t, bytes.data(), bytes.size(), &id));

    const std::vector<float> q = f.queries({3});
    std::vector<float> o(3 * 8 * 12, NAN);
    gqla_tensor qt, ot;
    const int64_t qs[4] = {1, 3, 4, 24}, os[4] = {1, 3, 4, 12};
    // This shard's heads 2..5 of the fixture's 8.
    ok(gqla_tensor_init(&qt, const_cast<float*>(q.data()) + 2 * 24, GQLA_DTYPE_F32, 4, qs));
    qt.strides[0] = 3 * 8 * 24;
    qt.strides[1] = 8 * 24;
    ok(gqla_tensor_init(&ot, o.data() + 2 * 12, GQLA_DTYPE_F32, 4, os));
    ot.strides[0] = 3 * 8 * 12;
    ot.strides[1] = 8 * 12;
    ok(gqla_decode(t, 0, 1, &id, &qt, &ot, nullptr));
    std::vector<double> ref_o, ref_lse;
    f.reference(0, {seq}, {3}, q, ref_o, ref_lse);
    std::vector<double> got, want;
    for (int64_t row = 0; row < 3; ++row)
        for (int64_t h = 2; h < 6; ++h)
            for (int64_t e = 0; e < 12; ++e) {
                got.push_back(o[static_cast<size_t>((row * 8 + h) * 12 + e)]);
                want.push_back(ref_o[static_cast<size_t>((row * 8 + h) * 12 + e)]);
            }
    INFO(abi::replay_hint(f.seed()));
    CHECK(gqla::ref::rel_l2(got.data(), want.data(), want.size()) <= kF32Tol);
    gqla_session_destroy(t);
}

TEST_CASE("gqla_predict_cost prices a shard as the layer it serves") {
    gqla_probe_info probe;
    std::memset(&probe, 0, sizeof(probe));
    probe.struct_size = sizeof(probe);
    probe.device = GQLA_DEVICE_CPU;
    probe.read_gbps = 100;
    probe.peak_gflops_f32 = 1000;
    probe.peak_gflops_bf16 = 1000;
    gqla_workload w;
    std::memset(&w, 0, sizeof(w));
    w.struct_size = sizeof(w);
    w.batch = 8;
    w.context = 4096;
    w.q_len = 1;
    auto cost = [&](const gqla_config& c) {
        gqla_cost_report r;
        std::memset(&r, 0, sizeof(r));
        r.struct_size = sizeof(r);
        ok(gqla_predict_cost(&c, &probe, &w, &r));
        return r;
    };
    const gqla_config shard = llama3_gqla(6, 2, 1, GQLA_PATH_AUTO);
    gqla_config layer = llama3_gqla(0, 0, 1, GQLA_PATH_AUTO);
    layer.num_heads = 8;
    layer.num_kv_heads = 2;
    const gqla_cost_report a = cost(shard), b = cost(layer), whole = cost(llama3_gqla(0, 0, 1, GQLA_PATH_AUTO));
    CHECK(a.gqa.bytes == b.gqa.bytes);
    CHECK(a.gqa.flops == b.gqa.flops);
    CHECK(a.absorb.bytes == b.absorb.bytes);
    CHECK(a.absorb.flops == b.absorb.flops);
    CHECK(a.expand_flops == b.expand_flops);
    // The absorb path reads the whole latent on every rank: its cache bytes
    // do not shrink with the shard, the GQA path's do.
    const double tokens = 8.0 * 4096;
    CHECK(a.gqa.bytes == doctest::Approx(tokens * (2 * 192 + 64) * 2 + 8 * 8 * (128 + 128) * 4));
    CHECK(a.absorb.bytes > tokens * 576 * 2);
    CHECK(whole.gqa.bytes > 3 * a.gqa.bytes);
    // Without the latent the GQA path is the only form, whatever the prices:
    // half the groups (4 x 192 + 64 elements per token against 576) on a
    // bandwidth-starved probe, where absorb is cheaper.
    probe.read_gbps = 10;
    probe.peak_gflops_f32 = probe.peak_gflops_bf16 = 1e6;
    const gqla_cost_report kept = cost(llama3_gqla(4, 4, 1, GQLA_PATH_AUTO));
    CHECK(kept.chosen == GQLA_PATH_ABSORB);
    const gqla_cost_report dropped = cost(llama3_gqla(4, 4, 0, GQLA_PATH_AUTO));
    CHECK(dropped.chosen == GQLA_PATH_GQA);
    CHECK(dropped.call_chosen == GQLA_PATH_GQA);
    CHECK(dropped.gqa.bytes == kept.gqa.bytes);
}

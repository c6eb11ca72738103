// SPDX-License-Identifier: Apache-2.0
// Sparse (top-k) attention through gqla_attention's `indices`: every form
// (GQA kind, GQLA absorb, GQLA GQA path over the kept expanded cache,
// GQA_TRANSIENT), every cache dtype and every CPU kernel table the host has,
// against the float64 sparse reference; and the refusals of bad index
// tensors, which leave the session as it was.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "nonfinite_support.hpp"
#include "sparse_support.hpp"

using sparse_test::CallCheck;
using sparse_test::Fixture;
using sparse_test::Form;

namespace {

gqla_config config_for(Form f, gqla_dtype cache) {
    gqla_config cfg = f == Form::Gqa ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
    cfg.cache_dtype = cache;
    cfg.num_threads = 2;
    return cfg;
}

#define CHECK_SPARSE(fx, res)                                                          \
    do {                                                                               \
        const CallCheck& r_ = (res);                                                   \
        INFO("gqla_attention: " << std::string(gqla_last_error_message()));            \
        INFO(abi::replay_hint((fx).rng().seed()));                                     \
        REQUIRE(r_.status == GQLA_OK);                                                 \
        const double tol_ = abi::tolerance((fx).config().cache_dtype, GQLA_DTYPE_F32); \
        CHECK(r_.o_err <= tol_);                                                       \
        CHECK(r_.lse_err <= tol_);                                                     \
        CHECK(r_.empty_rows_ok);                                                       \
    } while (0)

gqla_path expected_form(Form f) {
    switch (f) {
        case Form::Absorb:
            return GQLA_PATH_ABSORB;
        case Form::Transient:
            return GQLA_PATH_GQA_TRANSIENT;
        default:
            return GQLA_PATH_GQA;
    }
}

// Every case of one session: uniform calls at s_q 1..8, ragged calls mixing
// query counts, lists longer than the visible prefix, and a query without a
// visible entry.
void run_cases(Form form, gqla_dtype cache) {
    Fixture fx(config_for(form, cache), form);
    const int64_t P = fx.config().page_size;
    for (int64_t len : {int64_t(1), P - 1, P, P + 1, 3 * P + 5, int64_t(300)}) fx.add(len);
    const int last = static_cast<int>(fx.seqs().size()) - 1;
    for (int32_t s_q : {1, 2, 3, 5, 8}) {
        CAPTURE(s_q);
        std::vector<int> which;
        std::vector<int32_t> q_lens, idx;
        const int32_t topk = 37;           // more than most of these sequences show a query
        for (int i = last; i >= 0; --i) {  // not in creation order
            if (fx.seqs()[static_cast<size_t>(i)].length < s_q) continue;
            which.push_back(i);
            q_lens.push_back(s_q);
            const int32_t empty = i == last ? s_q - 1 : -1;
            const std::vector<int32_t> l = fx.lists(fx.seqs()[static_cast<size_t>(i)], s_q, topk, empty);
            idx.insert(idx.end(), l.begin(), l.end());
        }
        const CallCheck r = fx.call(which, q_lens, topk, idx, false, s_q % 2 == 1);
        CHECK_SPARSE(fx, r);
        CHECK(r.empty_rows >= fx.config().num_heads);
        CHECK(r.taken == expected_form(form));
    }
    // Ragged: decoding sequences beside a short chunk, one long list.
    std::vector<int> which;
    std::vector<int32_t> q_lens, idx;
    const int32_t topk = 400;
    const int32_t counts[] = {1, 8, 1, 3, 1, 1};
    for (int i = 0; i <= last; ++i) {
        const int32_t n =
            static_cast<int32_t>(std::min<int64_t>(counts[i % 6], fx.seqs()[static_cast<size_t>(i)].length));
        which.push_back(i);
        q_lens.push_back(n);
        const std::vector<int32_t> l = fx.lists(fx.seqs()[static_cast<size_t>(i)], n, topk, i == 2 ? 0 : -1);
        idx.insert(idx.end(), l.begin(), l.end());
    }
    CHECK_SPARSE(fx, fx.call(which, q_lens, topk, idx, true));
}

// One test case per form (each takes tens of seconds under the sanitizers:
// split, they spread over the test command's parallel jobs).
void run_every_isa_and_dtype(Form form) {
    nonfinite::for_each_isa([&](const char*) {
        for (gqla_dtype cache : {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16}) {
            CAPTURE(sparse_test::form_label(form));
            CAPTURE(abi::dtype_label(cache));
            run_cases(form, cache);
        }
    });
}

}  // namespace

TEST_CASE("sparse attention matches the float64 sparse reference on every dtype and kernel table: GQA kind") {
    run_every_isa_and_dtype(Form::Gqa);
}
TEST_CASE("sparse attention matches the float64 sparse reference on every dtype and kernel table: absorb") {
    run_every_isa_and_dtype(Form::Absorb);
}
TEST_CASE("sparse attention matches the float64 sparse reference on every dtype and kernel table: kept GQA path") {
    run_every_isa_and_dtype(Form::GqlaGqaKept);
}
TEST_CASE("sparse attention matches the float64 sparse reference on every dtype and kernel table: transient") {
    run_every_isa_and_dtype(Form::Transient);
}

TEST_CASE("sparse attention over long lists splits them across threads and merges") {
    for (Form form : {Form::Absorb, Form::GqlaGqaKept, Form::Transient, Form::Gqa}) {
        CAPTURE(sparse_test::form_label(form));
        Fixture fx(config_for(form, GQLA_DTYPE_F32), form);
        const sparse_test::Seq& s = fx.add(3000);
        const int32_t topk = 2500;  // one query, long list: cut into pieces
        std::vector<int32_t> idx = fx.lists(s, 1, topk);
        CHECK_SPARSE(fx, fx.call({0}, {1}, topk, idx, false));
        idx = fx.lists(s, 2, topk, 1);
        CHECK_SPARSE(fx, fx.call({0}, {2}, topk, idx, true));
    }
}

TEST_CASE("sparse attention in the GQA form splits one short list's KV groups across threads") {
    // One query whose list is too short to cut into pieces (2 threads), or
    // cut into fewer pieces than threads (5): each piece's groups are split
    // between threads, which write disjoint heads of its output or partial.
    for (Form form : {Form::Gqa, Form::GqlaGqaKept, Form::Transient})
        for (int threads : {2, 5}) {
            CAPTURE(sparse_test::form_label(form));
            CAPTURE(threads);
            gqla_config cfg = config_for(form, GQLA_DTYPE_BF16);
            cfg.num_threads = threads;
            Fixture fx(cfg, form);
            const sparse_test::Seq& s = fx.add(900);
            for (int32_t topk : {100, 600}) {
                CAPTURE(topk);
                std::vector<int32_t> idx = fx.lists(s, 1, topk);
                CHECK_SPARSE(fx, fx.call({0}, {1}, topk, idx, false));
                idx = fx.lists(s, 1, topk, 0);  // no visible entry
                const CallCheck r = fx.call({0}, {1}, topk, idx, true);
                CHECK_SPARSE(fx, r);
                CHECK(r.empty_rows == fx.config().num_heads);
            }
        }
}

TEST_CASE("sparse attention over more query rows than one chunk, the last chunk split across threads") {
    for (Form form : {Form::Absorb, Form::Transient}) {
        CAPTURE(sparse_test::form_label(form));
        gqla_config cfg = config_for(form, GQLA_DTYPE_BF16);
        cfg.max_q_len = 400;
        cfg.max_q_tokens = 400;
        Fixture fx(cfg, form);
        const sparse_test::Seq& s = fx.add(420);
        // 2048 rows of 6 heads hold 341 queries: 343 leave a chunk of 2,
        // whose lists of 1100 entries are cut into pieces.
        const int32_t n = 343, topk = 1100;
        std::vector<int32_t> idx = fx.lists(s, n, topk, 7);
        CHECK_SPARSE(fx, fx.call({0}, {n}, topk, idx, true));
    }
}

TEST_CASE("sparse attention refuses bad index tensors and leaves the session unchanged") {
    Fixture fx(config_for(Form::Absorb, GQLA_DTYPE_F32), Form::Absorb);
    const sparse_test::Seq& s = fx.add(40);
    gqla_session* ses = fx.session();
    const int32_t H = fx.config().num_heads, Dq = fx.config().nope_dim + fx.config().rope_dim;
    const int32_t Dv = fx.config().value_dim;
    std::vector<float> q(static_cast<size_t>(2 * H * Dq), 0.5f);
    std::vector<float> o(static_cast<size_t>(2 * H * Dv), std::numeric_limits<float>::quiet_NaN());
    std::vector<int32_t> idx(2 * 8, 3);
    int64_t qs[4] = {1, 2, H, Dq}, os[4] = {1, 2, H, Dv};
    gqla_tensor qt, ot;
    REQUIRE(gqla_tensor_init(&qt, q.data(), GQLA_DTYPE_F32, 4, qs) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&ot, o.data(), GQLA_DTYPE_F32, 4, os) == GQLA_OK);
    gqla_attention_args args;
    REQUIRE(gqla_attention_args_default(&args) == GQLA_OK);
    args.batch = 1;
    args.seqs = &s.id;
    args.q = &qt;
    args.o = &ot;
    args.path = GQLA_PATH_AUTO;
    gqla_path before = abi::active_path(ses);

    auto refused = [&](gqla_tensor t, const char* what) {
        CAPTURE(what);
        args.indices = &t;
        abi::plant_marker_message();
        const gqla_status st = gqla_attention(ses, &args);
        const std::string msg = gqla_last_error_message();
        CAPTURE(msg);
        CHECK(st == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(abi::names_argument(msg, {"indices"}));
        CHECK(std::isnan(o[0]));  // nothing written
    };
    auto good = [&](std::vector<int64_t> shape) {
        gqla_tensor t;
        REQUIRE(gqla_tensor_init(&t, idx.data(), GQLA_DTYPE_I32, static_cast<int32_t>(shape.size()), shape.data()) ==
                GQLA_OK);
        return t;
    };
    gqla_tensor t = good({2, 8});
    t.dtype = GQLA_DTYPE_F32;
    refused(t, "f32 dtype");
    t = good({2, 8});
    t.dtype = GQLA_DTYPE_BF16;
    refused(t, "bf16 dtype");
    refused(good({3, 8}), "wrong row count");
    refused(good({2, 8, 1}), "3 dims with a wrong shape");
    refused(good({1, 2, 4, 2}), "4 dims");
    refused(good({16}), "1 dim");
    t = good({2, 8});
    t.shape[1] = 0;
    refused(t, "topk 0");
    t = good({2, 8});
    t.strides[1] = 2;
    t.shape[1] = 4;
    refused(t, "innermost stride 2");
    t = good({2, 8});
    t.data = nullptr;
    refused(t, "NULL data");
    t = good({2, 8});
    t.device = GQLA_DEVICE_CUDA;
    refused(t, "CUDA tensor on a CPU session");
    t = good({1, 2, 8});
    t.strides[0] = 5;  // (b, i) cannot collapse: fine with batch 1
    args.indices = &t;
    CHECK(gqla_attention(ses, &args) == GQLA_OK);
    // Ragged calls take only [N, topk].
    int32_t q_lens[1] = {2};
    int64_t qr[3] = {2, H, Dq}, orr[3] = {2, H, Dv};
    REQUIRE(gqla_tensor_init(&qt, q.data(), GQLA_DTYPE_F32, 3, qr) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&ot, o.data(), GQLA_DTYPE_F32, 3, orr) == GQLA_OK);
    std::fill(o.begin(), o.end(), std::numeric_limits<float>::quiet_NaN());
    args.q_lens = q_lens;
    refused(good({1, 2, 8}), "3 dims on a ragged call");
    // The session is as it was: same path and length, and it still decodes.
    CHECK(abi::active_path(ses) == before);
    int64_t len = 0;
    REQUIRE(gqla_sequence_length(ses, s.id, 0, &len) == GQLA_OK);
    CHECK(len == 40);
    std::vector<int32_t> lists = fx.lists(s, 2, 8);
    CHECK_SPARSE(fx, fx.call({0}, {2}, 8, lists, true));
}

TEST_CASE("sparse attention: an older gqla_attention_args without indices is a dense call") {
    Fixture fx(config_for(Form::Gqa, GQLA_DTYPE_F32), Form::Gqa);
    const sparse_test::Seq& s = fx.add(20);
    const int32_t H = fx.config().num_heads, Dq = fx.config().head_dim, Dv = fx.config().value_dim;
    std::vector<float> q(static_cast<size_t>(H * Dq), 0.25f), o(static_cast<size_t>(H * Dv), 0.0f);
    int64_t qs[4] = {1, 1, H, Dq}, os[4] = {1, 1, H, Dv};
    gqla_tensor qt, ot, bad;
    REQUIRE(gqla_tensor_init(&qt, q.data(), GQLA_DTYPE_F32, 4, qs) == GQLA_OK);
    REQUIRE(gqla_tensor_init(&ot, o.data(), GQLA_DTYPE_F32, 4, os) == GQLA_OK);
    bad = qt;  // an f32 tensor: refused if it were read as indices
    gqla_attention_args args;
    REQUIRE(gqla_attention_args_default(&args) == GQLA_OK);
    args.struct_size = offsetof(gqla_attention_args, indices);  // a 1.1 caller
    args.batch = 1;
    args.seqs = &s.id;
    args.q = &qt;
    args.o = &ot;
    args.indices = &bad;
    INFO(std::string(gqla_last_error_message()));
    CHECK(gqla_attention(fx.session(), &args) == GQLA_OK);
}

TEST_CASE("sparse attention over an fp8 cache: every form on the CPU, the GQA kind on CUDA") {
    // Against the reference on the rows as the 8-bit cache stores them
    // (scales rebuilt from docs/fp8-cache.md; the kept expanded cache
    // quantized per (token, group)): the bf16 bound. Every CPU kernel table
    // the host has (the rows are widened by the table's fp8_rows); on CUDA
    // the GQA kind (its odd widths: the per-warp kernel), since CUDA
    // sessions of the GQLA kind take an 8-bit cache only at the latent
    // kernel's widths (tests/cuda/cuda_sparse_main.cpp).
    nonfinite::for_each_isa([&](const char*) {
        for (Form form : {Form::Gqa, Form::Absorb, Form::GqlaGqaKept, Form::Transient}) {
            CAPTURE(sparse_test::form_label(form));
            gqla_config cfg = config_for(form, GQLA_DTYPE_FP8_E4M3);
            cfg.device = sparse_test::device();
            if (cfg.device != GQLA_DEVICE_CPU && form != Form::Gqa) continue;
            gqla_session* probe = nullptr;
            INFO(std::string(gqla_last_error_message()));
            REQUIRE(gqla_session_create(&cfg, &probe) == GQLA_OK);
            gqla_session_destroy(probe);
            Fixture fx(cfg, form);
            const int64_t P = fx.config().page_size;
            fx.add(3 * P + 5);
            fx.add(300);
            const sparse_test::Seq& s = fx.seqs()[0];
            const sparse_test::Seq& t = fx.seqs()[1];
            // Query 1 of s sees no entry; t's query lists more than one block.
            std::vector<int32_t> idx = fx.lists(s, 3, 290, 1), more = fx.lists(t, 1, 290);
            idx.insert(idx.end(), more.begin(), more.end());
            const CallCheck r = fx.call({0, 1}, {3, 1}, 290, idx, true);
            CHECK_SPARSE(fx, r);
            CHECK(r.empty_rows == fx.config().num_heads);
            CHECK(r.taken == expected_form(form));
            std::vector<int32_t> one = fx.lists(t, 2, 37);
            CHECK_SPARSE(fx, fx.call({1}, {2}, 37, one, false));
        }
    });
}

TEST_CASE("sparse attention over narrow 8-bit rows reads the stored values exactly") {
    // Rows too narrow for the fp8 kernel's gathered reads (head_dim +
    // value_dim < 32) are widened into f32 staging: e4m3 x scale exactly,
    // so an f32 call over them is as accurate as over an f32 cache (widening
    // them to bf16 instead put narrow, sharp softmaxes past the bf16 bound).
    if (sparse_test::device() != GQLA_DEVICE_CPU) return;
    nonfinite::for_each_isa([&](const char*) {
        for (int32_t width : {1, 5, 8}) {
            CAPTURE(width);
            gqla_config cfg = config_for(Form::Gqa, GQLA_DTYPE_FP8_E4M3);
            cfg.num_heads = 8;
            cfg.num_kv_heads = 2;
            cfg.head_dim = width;
            cfg.value_dim = width == 5 ? 3 : width;
            Fixture fx(cfg, Form::Gqa);
            const int64_t P = fx.config().page_size;
            fx.add(2 * P + 3);
            const std::vector<int32_t> idx = fx.lists(fx.seqs()[0], 3, 29);
            const CallCheck r = fx.call({0}, {3}, 29, idx, false);
            INFO(abi::replay_hint(fx.rng().seed()));
            REQUIRE(r.status == GQLA_OK);
            CHECK(r.o_err <= 1e-5);
            CHECK(r.lse_err <= 1e-5);
        }
    });
}

TEST_CASE("the cost model prices a sparse step at min(topk, visible) positions per query plus its indices") {
    gqla_config cfg = config_for(Form::Absorb, GQLA_DTYPE_BF16);
    gqla_probe_info probe{};
    probe.struct_size = sizeof probe;
    probe.device = GQLA_DEVICE_CPU;
    probe.read_gbps = 50.0;
    probe.peak_gflops_f32 = 200.0;
    auto price = [&](int64_t context, int32_t s_q, int32_t topk) {
        gqla_workload w{};
        w.struct_size = sizeof w;
        w.batch = 3;
        w.context = context;
        w.q_len = s_q;
        w.topk = topk;
        gqla_cost_report r{};
        r.struct_size = sizeof r;
        INFO(std::string(gqla_last_error_message()));
        REQUIRE(gqla_predict_cost(&cfg, &probe, &w, &r) == GQLA_OK);
        return r;
    };
    // One query per sequence: K of T positions costs what T = K costs, plus
    // 4 bytes per index; the kept-cache expansion still covers all T tokens.
    const gqla_cost_report sparse = price(65536, 1, 2048), dense = price(2048, 1, 0), full = price(65536, 1, 0);
    const double index_bytes = 3.0 * 2048 * 4;
    CHECK(sparse.absorb.flops == doctest::Approx(dense.absorb.flops));
    CHECK(sparse.absorb.bytes == doctest::Approx(dense.absorb.bytes + index_bytes));
    CHECK(sparse.gqa.bytes == doctest::Approx(dense.gqa.bytes + index_bytes));
    CHECK(sparse.transient.flops == doctest::Approx(dense.transient.flops));
    CHECK(sparse.expand_bytes == doctest::Approx(full.expand_bytes));
    CHECK(sparse.absorb.time_s < full.absorb.time_s);
    // s_q queries read their own rows: s_q times the positions of one.
    const gqla_cost_report four = price(65536, 4, 2048);
    CHECK(four.absorb.flops == doctest::Approx(4 * sparse.absorb.flops));
    CHECK(four.gqa.bytes > 3.9 * (sparse.gqa.bytes - index_bytes));
    // topk beyond the visible prefix prices the prefix.
    CHECK(price(100, 1, 2048).absorb.flops == doctest::Approx(price(100, 1, 0).absorb.flops));
    // A 1.1 workload (no topk) is dense; topk outside 0..2^20 is refused.
    gqla_workload old{};
    old.struct_size = offsetof(gqla_workload, topk);
    old.batch = 3;
    old.context = 65536;
    old.q_len = 1;
    old.topk = 7;  // beyond its struct_size: never read
    gqla_cost_report r{};
    r.struct_size = sizeof r;
    REQUIRE(gqla_predict_cost(&cfg, &probe, &old, &r) == GQLA_OK);
    CHECK(r.absorb.flops == doctest::Approx(full.absorb.flops));
    for (int32_t bad : {-1, (1 << 20) + 1}) {
        gqla_workload w{sizeof(gqla_workload), 1, 100, 1, bad};
        CHECK(gqla_predict_cost(&cfg, &probe, &w, &r) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(std::string(gqla_last_error_message()).find("topk") != std::string::npos);
    }
}

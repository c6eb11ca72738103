// SPDX-License-Identifier: Apache-2.0
// gqla_attention's arguments: their defaults, bad inputs refused with the
// exact status and a message naming the argument (nothing written, the
// session unchanged and still correct), GQLA layers without weights, and the
// max_q_tokens config field that bounds a call's query rows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attention_support.hpp"

using abi::Harness;
using abi::path_label;
using abi::plant_marker_message;
using abi::require_ok;
using attention::attend;
using attention::Ids;
using attention::kUnwritten;
using attention::random_rows;
using attention::Request;

namespace {

bool same_stats(const gqla_stats& a, const gqla_stats& b) {
    return a.device == b.device && a.path == b.path && a.page_size == b.page_size && a.pages_total == b.pages_total &&
           a.pages_used == b.pages_used && a.pages_free == b.pages_free && a.sequences == b.sequences &&
           a.tokens_cached == b.tokens_cached && a.token_capacity_left == b.token_capacity_left &&
           a.latent_bytes == b.latent_bytes && a.expanded_bytes == b.expanded_bytes &&
           a.weight_bytes == b.weight_bytes && a.workspace_bytes == b.workspace_bytes;
}

// Valid ragged arguments over packed tensors, to be broken one field at a time.
struct Call {
    std::vector<gqla_seq_id> seqs;
    std::vector<int32_t> q_lens;
    abi::Buffer q, o, lse;
    gqla_tensor tq, to, tl;
    gqla_path taken = kUnwritten;
    gqla_attention_args args;

    Call(Harness& h, std::vector<gqla_seq_id> ids, std::vector<int32_t> lens, int64_t extra_rows = 0)
        : seqs(std::move(ids)), q_lens(std::move(lens)) {
        int64_t n = extra_rows;
        for (int32_t x : q_lens) n += x;
        n = std::max<int64_t>(n, 1);
        const int64_t H = h.config().num_heads;
        q = random_rows(h, n);
        o = abi::make_poisoned(h.config().io_dtype, static_cast<size_t>(n * H * h.out_dim()));
        lse = abi::make_poisoned(GQLA_DTYPE_F32, static_cast<size_t>(n * H));
        tq = abi::view(q, {n, H, h.q_dim()});
        to = abi::view(o, {n, H, h.out_dim()});
        tl = abi::view(lse, {n, H});
        REQUIRE(gqla_attention_args_default(&args) == GQLA_OK);
        args.batch = static_cast<int32_t>(seqs.size());
        args.seqs = seqs.data();
        args.q_lens = q_lens.data();
        args.q = &tq;
        args.o = &to;
        args.lse = &tl;
        args.path_taken = &taken;
    }
    // Nothing written: o and lse still all NaN, path_taken untouched.
    bool untouched() const {
        for (size_t i = 0; i < o.size(); ++i)
            if (!std::isnan(o.get(i))) return false;
        for (size_t i = 0; i < lse.size(); ++i)
            if (!std::isnan(lse.get(i))) return false;
        return taken == kUnwritten;
    }
};

gqla_config resolved_config(gqla_session* s) {
    gqla_config c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    require_ok(gqla_session_get_config(s, &c), "gqla_session_get_config");
    return c;
}

}  // namespace

// EXPECT_ATTENTION_ERROR(session, call, expected status, {accepted argument names}):
// the status, a fresh message naming the argument, no output written and
// the session's stats unchanged.
#define EXPECT_ATTENTION_ERROR(h, c, expected, ...)                                               \
    do {                                                                                          \
        const gqla_stats before_ = (h).stats();                                                   \
        const std::string marker_ = plant_marker_message();                                       \
        const gqla_status got_ = gqla_attention((h).session(), &(c).args);                        \
        const std::string msg_ = gqla_last_error_message();                                       \
        abi::expect_refusal(__FILE__, __LINE__, #c, got_, (expected), marker_, msg_,              \
                            std::vector<std::string> __VA_ARGS__,                                 \
                            {{"the output was written", (c).untouched()},                         \
                             {"the session's stats changed", same_stats(before_, (h).stats())}}); \
    } while (0)

TEST_CASE("attention args defaults") {
    gqla_attention_args a;
    std::memset(&a, 0xab, sizeof a);
    require_ok(gqla_attention_args_default(&a), "gqla_attention_args_default");
    CHECK(a.struct_size == sizeof(gqla_attention_args));
    CHECK(a.path == GQLA_PATH_AUTO);
    CHECK(a.layer == 0);
    CHECK(a.batch == 0);
    CHECK(a.seqs == nullptr);
    CHECK(a.q_lens == nullptr);
    CHECK(a.q == nullptr);
    CHECK(a.o == nullptr);
    CHECK(a.lse == nullptr);
    CHECK(a.path_taken == nullptr);
    CHECK(gqla_attention_args_default(nullptr) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(abi::names_argument(gqla_last_error_message(), {"args"}));
}

TEST_CASE("attention rejects bad inputs precisely and leaves the session unchanged") {
    for (int kind = 0; kind < 2; ++kind) {
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        cfg.num_layers = 2;
        cfg.max_batch = 4;
        cfg.max_q_len = 6;
        cfg.max_q_tokens = 10;
        cfg.path = kind == 0 ? GQLA_PATH_AUTO : GQLA_PATH_ABSORB;
        CAPTURE(kind);
        Harness h(cfg);
        const gqla_seq_id s = h.add(), t = h.add(), u = h.add();
        h.append_ok(s, 0, 5);
        h.append_ok(t, 0, 9);
        h.append_ok(u, 0, 9);
        {  // valid: sum(q_lens) == max_q_tokens, entries up to max_q_len and the length
            Call ok(h, {s, t}, {4, 6});
            INFO(std::string(gqla_last_error_message()));
            CHECK(gqla_attention(h.session(), &ok.args) == GQLA_OK);
            CHECK(ok.taken != kUnwritten);
        }
        {
            Call c(h, {s, t}, {0, 2});
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens"});
        }
        {
            Call c(h, {s, t}, {2, -1}, 3);
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens"});
        }
        {  // 6 <= max_q_len but > length 5
            Call c(h, {t, s}, {1, 6});
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens"});
        }
        {  // 7 <= length 9 but > max_q_len 6
            Call c(h, {s, t}, {1, 7});
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens", "max_q_len"});
        }
        {  // every entry valid, the sum 11 > max_q_tokens 10
            Call c(h, {s, t}, {5, 6});
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens", "max_q_tokens"});
        }
        {  // layer 1 holds no tokens: q_lens 1 > length 0
            Call c(h, {s}, {1});
            c.args.layer = 1;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q_lens"});
        }
        {  // q / o / lse rows not matching sum(q_lens)
            Call c(h, {s, t}, {2, 3}, 1);
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q"});
            Call d(h, {s, t}, {2, 3});
            d.to.shape[0] += 1;
            EXPECT_ATTENTION_ERROR(h, d, GQLA_ERR_INVALID_ARGUMENT, {"o"});
            Call e(h, {s, t}, {2, 3});
            e.tl.shape[0] -= 1;
            EXPECT_ATTENTION_ERROR(h, e, GQLA_ERR_INVALID_ARGUMENT, {"lse"});
            Call f(h, {s, t}, {2, 3});
            f.tq.shape[1] += 1;  // heads
            EXPECT_ATTENTION_ERROR(h, f, GQLA_ERR_INVALID_ARGUMENT, {"q"});
        }
        {  // 4-d q with q_lens set; 3-d q without
            Call c(h, {s, t}, {2, 3});
            const int64_t H = cfg.num_heads;
            c.tq = abi::view(c.q, {1, 5, H, h.q_dim()});
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q", "q_lens"});
            Call d(h, {s, t}, {2, 2});
            d.args.q_lens = nullptr;  // uniform: q must be [B, s_q, H, Dq]
            EXPECT_ATTENTION_ERROR(h, d, GQLA_ERR_INVALID_ARGUMENT, {"q", "q_lens"});
            Call e(h, {s, t}, {2, 3});
            e.to = abi::view(e.o, {1, 5, H, h.out_dim()});
            EXPECT_ATTENTION_ERROR(h, e, GQLA_ERR_INVALID_ARGUMENT, {"o"});
            Call f(h, {s, t}, {2, 3});
            f.tl = abi::view(f.lse, {1, 5, H});
            EXPECT_ATTENTION_ERROR(h, f, GQLA_ERR_INVALID_ARGUMENT, {"lse"});
        }
        {  // path values
            Call c(h, {s, t}, {2, 3});
            c.args.path = static_cast<gqla_path>(7);
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"path"});
            c.args.path = static_cast<gqla_path>(-1);
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"path"});
            if (kind == 0) {  // GQA kind accepts AUTO and GQA only
                c.args.path = GQLA_PATH_ABSORB;
                EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"path"});
                c.args.path = GQLA_PATH_GQA_TRANSIENT;
                EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"path"});
            }
        }
        {  // struct_size, NULL pointers
            Call c(h, {s, t}, {2, 3});
            c.args.struct_size = 0;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"struct_size", "args"});
            c.args.struct_size = offsetof(gqla_attention_args, path_taken);
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"struct_size", "args"});
            c.args.struct_size = sizeof(gqla_attention_args);
            c.args.seqs = nullptr;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"seqs"});
            c.args.seqs = c.seqs.data();
            c.args.q = nullptr;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q"});
            c.args.q = &c.tq;
            c.args.o = nullptr;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"o"});
            c.args.o = &c.to;

            const gqla_stats before = h.stats();
            const std::string marker = plant_marker_message();
            CHECK(gqla_attention(h.session(), nullptr) == GQLA_ERR_INVALID_ARGUMENT);
            CHECK(abi::names_argument(gqla_last_error_message(), {"args"}));
            plant_marker_message();
            CHECK(gqla_attention(nullptr, &c.args) == GQLA_ERR_INVALID_ARGUMENT);
            CHECK(abi::names_argument(gqla_last_error_message(), {"session"}));
            CHECK(c.untouched());
            CHECK(same_stats(before, h.stats()));
        }
        {  // uniform calls count B * s_q against max_q_tokens too (gqla_decode and q_lens NULL)
            Call c(h, {t, u}, {6, 6});
            const int64_t H = cfg.num_heads;
            c.tq = abi::view(c.q, {2, 6, H, h.q_dim()});
            c.to = abi::view(c.o, {2, 6, H, h.out_dim()});
            c.tl = abi::view(c.lse, {2, 6, H});
            c.args.q_lens = nullptr;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"q", "max_q_tokens", "s_q", "batch"});
            const gqla_stats before = h.stats();
            const std::string marker = plant_marker_message();
            const gqla_status st = gqla_decode(h.session(), 0, 2, c.seqs.data(), &c.tq, &c.to, &c.tl);
            const std::string msg = gqla_last_error_message();
            INFO("gqla_decode: " << std::string(gqla_status_string(st)) << " \"" << msg << "\"");
            CHECK(st == GQLA_ERR_INVALID_ARGUMENT);
            CHECK(msg != marker);
            CHECK(abi::names_argument(msg, {"q", "max_q_tokens", "s_q", "batch"}));
            CHECK(c.untouched());
            CHECK(same_stats(before, h.stats()));
        }
        {  // batch, layer, sequence ids
            Call c(h, {s, t}, {2, 3});
            c.args.batch = 0;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"batch"});
            c.args.batch = -2;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"batch"});
            c.args.batch = 2;
            c.args.layer = 2;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"layer"});
            c.args.layer = -1;
            EXPECT_ATTENTION_ERROR(h, c, GQLA_ERR_INVALID_ARGUMENT, {"layer"});
            Call r(h, {t, s, t}, {1, 1, 1});
            EXPECT_ATTENTION_ERROR(h, r, GQLA_ERR_INVALID_ARGUMENT, {"seqs"});
            Call many(h, {s, t, u, s, t}, {1, 1, 1, 1, 1});  // 5 > max_batch 4
            EXPECT_ATTENTION_ERROR(h, many, GQLA_ERR_INVALID_ARGUMENT, {"batch", "max_batch"});
            Call unknown(h, {s, 987654321}, {1, 1});
            EXPECT_ATTENTION_ERROR(h, unknown, GQLA_ERR_NOT_FOUND, {"seqs", "seq"});
        }

        // The session still works and still matches the reference.
        Request rq;
        rq.seqs = Ids{u, s};
        rq.q_lens = {6, 4};
        rq.path = kind == 0 ? GQLA_PATH_GQA : GQLA_PATH_GQA_TRANSIENT;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
    }
}

TEST_CASE("GQLA layers without weights are refused with INVALID_STATE") {
    gqla_config cfg = abi::odd_gqla_config(3);
    cfg.num_layers = 2;
    Harness h(cfg, false);
    h.set_weights(0);
    const gqla_seq_id s = h.add();
    h.append_ok(s, 0, 5);
    // Layer 1 has neither weights nor tokens; either complaint is right, but
    // an attention over it may not run.
    for (gqla_path p : {GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_AUTO}) {
        CAPTURE(path_label(p));
        Call c(h, {s}, {1});
        c.args.layer = 1;
        c.args.path = p;
        const gqla_status st = gqla_attention(h.session(), &c.args);
        INFO(std::string(gqla_last_error_message()));
        CHECK((st == GQLA_ERR_INVALID_STATE || st == GQLA_ERR_INVALID_ARGUMENT));
        CHECK(c.untouched());
    }
}

TEST_CASE("config.max_q_tokens: range, default and 1.0-sized configs") {
    gqla_config cfg = abi::odd_gqa_config(3);
    for (int64_t bad : {int64_t(-1), int64_t(-4096), (int64_t(1) << 22) + 1, int64_t(1) << 40}) {
        CAPTURE(bad);
        cfg.max_q_tokens = bad;
        CHECK(gqla_config_validate(&cfg) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(abi::names_argument(gqla_last_error_message(), {"max_q_tokens"}));
        gqla_session* s = reinterpret_cast<gqla_session*>(&cfg);
        CHECK(gqla_session_create(&cfg, &s) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(s == nullptr);
        CHECK(abi::names_argument(gqla_last_error_message(), {"max_q_tokens"}));
    }
    cfg.max_q_tokens = int64_t(1) << 22;
    CHECK(gqla_config_validate(&cfg) == GQLA_OK);
    cfg.max_q_tokens = 1;
    CHECK(gqla_config_validate(&cfg) == GQLA_OK);

    {  // default: max_batch * max_q_len
        cfg.max_q_tokens = 0;
        cfg.max_batch = 5;
        cfg.max_q_len = 7;
        Harness h(cfg);
        CHECK(resolved_config(h.session()).max_q_tokens == 35);
    }
    {  // an explicit value is kept, and bounds a call
        cfg.max_q_tokens = 12;
        Harness h(cfg);
        CHECK(resolved_config(h.session()).max_q_tokens == 12);
    }
    {  // default capped at 2^22; max_q_len 16384 accepted
        gqla_config big = cfg;
        big.max_q_tokens = 0;
        big.max_sequences = 512;
        big.max_batch = 512;
        big.max_q_len = 16384;
        big.num_threads = 2;
        Harness h(big);
        const gqla_config r = resolved_config(h.session());
        CHECK(r.max_q_len == 16384);
        CHECK(r.max_q_tokens == (int64_t(1) << 22));
    }
    {  // the default follows max_batch as resolved (capped at max_sequences)
        gqla_config c = cfg;
        c.max_q_tokens = 0;
        c.max_sequences = 3;
        c.max_batch = 10;
        c.max_q_len = 4;
        Harness h(c);
        const gqla_config r = resolved_config(h.session());
        CHECK(r.max_q_tokens == int64_t(r.max_batch) * 4);
    }
    {  // a caller built against 1.0 passes the 1.0 size: accepted, max_q_tokens defaulted
        gqla_config old = cfg;
        old.max_batch = 6;
        old.max_q_len = 3;
        old.max_q_tokens = 999;  // past the caller's struct: must not be read
        old.struct_size = offsetof(gqla_config, max_q_tokens);
        gqla_session* s = nullptr;
        require_ok(gqla_session_create(&old, &s), "gqla_session_create (1.0 config)");
        CHECK(resolved_config(s).max_q_tokens == 18);
        gqla_session_destroy(s);
    }
    {  // max_q_len bounds: 65536 accepted, 65537 refused
        gqla_config c = cfg;
        c.max_q_tokens = 0;
        c.max_q_len = 65536;
        CHECK(gqla_config_validate(&c) == GQLA_OK);
        c.max_q_len = 65537;
        CHECK(gqla_config_validate(&c) == GQLA_ERR_INVALID_ARGUMENT);
        CHECK(abi::names_argument(gqla_last_error_message(), {"max_q_len"}));
    }
}

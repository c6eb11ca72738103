// SPDX-License-Identifier: Apache-2.0
// Bad inputs at every entry point: the exact status, a message that names the
// offending argument, and a session that still works (and still matches the
// reference) afterwards.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "harness.hpp"

using abi::Harness;
using abi::plant_marker_message;

// EXPECT_GQLA_ERROR(call, expected status, {accepted argument names})
#define EXPECT_GQLA_ERROR(call, expected, ...)                                          \
    do {                                                                                \
        const std::string marker_ = plant_marker_message();                             \
        const gqla_status got_ = (call);                                                \
        const std::string msg_ = gqla_last_error_message();                             \
        abi::expect_refusal(__FILE__, __LINE__, #call, got_, (expected), marker_, msg_, \
                            std::vector<std::string> __VA_ARGS__);                      \
    } while (0)

namespace {

// Valid decode/append tensors of a harness, to be broken one field at a time.
struct Inputs {
    abi::Buffer q, o, lse, a, b;
    gqla_tensor tq, to, tl, ta, tb;
    Inputs(Harness& h, int32_t batch, int32_t s_q, int64_t n) {
        const int64_t H = h.config().num_heads;
        q = h.random_q(batch, s_q);
        o = abi::make_poisoned(h.config().io_dtype, static_cast<size_t>(batch * s_q * H * h.out_dim()));
        lse = abi::make_poisoned(GQLA_DTYPE_F32, static_cast<size_t>(batch * s_q * H));
        a = abi::make_input(h.rng(), h.config().io_dtype, static_cast<size_t>(n * h.a_cols()));
        b = abi::make_input(h.rng(), h.config().io_dtype, static_cast<size_t>(n * h.b_cols()));
        tq = abi::view(q, {batch, s_q, H, h.q_dim()});
        to = abi::view(o, {batch, s_q, H, h.out_dim()});
        tl = abi::view(lse, {batch, s_q, H});
        ta = abi::view(a, h.a_shape(n));
        tb = abi::view(b, h.b_shape(n));
    }
};

// Everything the session must still show after the bad calls.
struct Snapshot {
    gqla_stats stats;
    std::vector<int64_t> lengths;
};
Snapshot snapshot(Harness& h, const std::vector<gqla_seq_id>& seqs) {
    Snapshot s{h.stats(), {}};
    for (gqla_seq_id id : seqs)
        for (int32_t layer = 0; layer < h.config().num_layers; ++layer) s.lengths.push_back(h.length(id, layer));
    return s;
}
void check_unchanged(const Snapshot& before, const Snapshot& after) {
    CHECK(after.lengths == before.lengths);
    CHECK(after.stats.pages_used == before.stats.pages_used);
    CHECK(after.stats.sequences == before.stats.sequences);
    CHECK(after.stats.tokens_cached == before.stats.tokens_cached);
    CHECK(after.stats.expanded_bytes == before.stats.expanded_bytes);
    CHECK(after.stats.path == before.stats.path);
}

}  // namespace

TEST_CASE("decode rejects bad inputs precisely and the session survives") {
    for (int kind = 0; kind < 2; ++kind) {
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        cfg.num_layers = 2;
        cfg.max_batch = 4;
        cfg.max_q_len = 6;
        CAPTURE(kind);
        Harness h(cfg);
        gqla_seq_id s = h.add(), t = h.add();
        h.append_ok(s, 0, 5);
        h.append_ok(t, 0, 9);
        const Snapshot before = snapshot(h, {s, t});
        gqla_session* ss = h.session();
        Inputs in(h, 1, 1, 2);
        const gqla_seq_id one[1] = {s};

        EXPECT_GQLA_ERROR(gqla_decode(nullptr, 0, 1, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT,
                          {"session"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, nullptr, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"seqs"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, nullptr, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, nullptr, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, -1, 1, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 2, 1, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 0, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"batch"});
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, -3, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"batch"});

        const gqla_seq_id unknown[1] = {987654321};
        EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, unknown, &in.tq, &in.to, &in.tl), GQLA_ERR_NOT_FOUND, {"seqs", "seq"});

        {  // dtype, ndim, shape, stride, struct_size of each tensor
            const gqla_dtype other = h.config().io_dtype == GQLA_DTYPE_F32 ? GQLA_DTYPE_F16 : GQLA_DTYPE_F32;
            gqla_tensor bad = in.tq;
            bad.dtype = other;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.dtype = static_cast<gqla_dtype>(42);
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.ndim = 3;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.shape[2] += 1;  // heads
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.shape[3] -= 1;  // query dim
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.shape[0] = 2;  // batch 1 but q holds 2
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.strides[3] = 2;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.struct_size = 0;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.data = nullptr;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
            bad = in.tq;
            bad.strides[0] = std::numeric_limits<int64_t>::max() / 2;  // offsets overflow
            bad.shape[0] = 1;
            bad.strides[1] = std::numeric_limits<int64_t>::max();
            bad.shape[1] = 1;
            bad.strides[2] = std::numeric_limits<int64_t>::max() / 3;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &bad, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});

            bad = in.to;
            bad.dtype = other;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &bad, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
            bad = in.to;
            bad.shape[3] += 1;  // value dim
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &bad, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
            bad = in.to;
            bad.strides[3] = 3;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &bad, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
            bad = in.to;
            bad.struct_size = 0;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &bad, &in.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});

            bad = in.tl;
            bad.dtype = GQLA_DTYPE_F16;  // lse is always f32
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &in.to, &bad), GQLA_ERR_INVALID_ARGUMENT, {"lse"});
            bad = in.tl;
            bad.shape[2] = 1;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &in.to, &bad), GQLA_ERR_INVALID_ARGUMENT, {"lse"});
            bad = in.tl;
            bad.ndim = 4;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &in.tq, &in.to, &bad), GQLA_ERR_INVALID_ARGUMENT, {"lse"});
        }
        {  // overlapping strides: two indices on one element (an output would be written twice)
            const gqla_seq_id pair[2] = {s, t};
            Inputs b2(h, 2, 1, 1);
            gqla_tensor bad = b2.to;
            bad.strides[2] = bad.shape[3] / 2;  // heads half a row apart
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, pair, &b2.tq, &bad, &b2.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
            bad = b2.to;
            bad.strides[0] = bad.strides[2];  // both sequences on the same rows
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, pair, &b2.tq, &bad, &b2.tl), GQLA_ERR_INVALID_ARGUMENT, {"o"});
            bad = b2.tl;
            bad.strides[0] = 1;  // batch stride inside the heads
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, pair, &b2.tq, &b2.to, &bad), GQLA_ERR_INVALID_ARGUMENT, {"lse"});
            bad = b2.tq;
            bad.strides[2] = 1;
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, pair, &bad, &b2.to, &b2.tl), GQLA_ERR_INVALID_ARGUMENT, {"q"});
        }
        {  // s_q larger than a sequence, than max_q_len; batch over max_batch; repeated ids
            Inputs q6(h, 1, 6, 1);
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &q6.tq, &q6.to, &q6.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"s_q", "q", "seqs"});
            const gqla_seq_id seq_t[1] = {t};
            Inputs q7(h, 1, 7, 1);
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, seq_t, &q7.tq, &q7.to, &q7.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"s_q", "q", "max_q_len"});
            // Layer 1 holds no tokens: s_q = 1 > length 0.
            EXPECT_GQLA_ERROR(gqla_decode(ss, 1, 1, one, &in.tq, &in.to, &in.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"s_q", "q", "seqs"});
            Inputs b5(h, 5, 1, 1);
            const gqla_seq_id five[5] = {s, t, s, t, s};
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 5, five, &b5.tq, &b5.to, &b5.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"batch", "max_batch"});
            Inputs b2(h, 2, 1, 1);
            const gqla_seq_id twice[2] = {t, t};
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, twice, &b2.tq, &b2.to, &b2.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"seqs"});
            const gqla_seq_id half_unknown[2] = {t, 55555};
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 2, half_unknown, &b2.tq, &b2.to, &b2.tl), GQLA_ERR_NOT_FOUND,
                              {"seqs", "seq"});
        }
        {  // inputs of the other kind
            gqla_config other_cfg = kind == 0 ? abi::odd_gqla_config(3) : abi::odd_gqa_config(3);
            Harness other(other_cfg);
            Inputs wrong(other, 1, 1, 2);
            EXPECT_GQLA_ERROR(gqla_decode(ss, 0, 1, one, &wrong.tq, &wrong.to, &wrong.tl), GQLA_ERR_INVALID_ARGUMENT,
                              {"q"});
        }

        check_unchanged(before, snapshot(h, {s, t}));
        CHECK_DECODE_MATCHES(h.decode(0, {s, t}, 2), h.tol());

        // Permuted but disjoint strides are accepted: o stored as [H, B, Dv].
        const gqla_seq_id pair[2] = {s, t};
        Inputs b2(h, 2, 1, 1);
        gqla_tensor permuted = b2.to;
        permuted.strides[0] = permuted.shape[3];
        permuted.strides[2] = permuted.shape[0] * permuted.shape[3];
        CHECK(gqla_decode(ss, 0, 2, pair, &b2.tq, &permuted, &b2.tl) == GQLA_OK);
    }
}

TEST_CASE("append and append_batch reject bad inputs and append nothing") {
    for (int kind = 0; kind < 2; ++kind) {
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        cfg.num_layers = 2;
        CAPTURE(kind);
        Harness h(cfg, /*set_all_weights=*/false);
        if (kind == 1) h.set_weights(0);  // layer 1 of the GQLA session stays without weights
        gqla_seq_id s = h.add(), t = h.add();
        h.append_ok(s, 0, 5);
        h.append_ok(t, 0, 3);
        const Snapshot before = snapshot(h, {s, t});
        gqla_session* ss = h.session();
        Inputs in(h, 1, 1, 4);
        const std::vector<std::string> a_names{"a", "k", "c"}, b_names{"b", "v", "kr"};

        EXPECT_GQLA_ERROR(gqla_append(nullptr, 0, s, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, nullptr, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
        EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &in.ta, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"b", "v", "kr"});
        EXPECT_GQLA_ERROR(gqla_append(ss, 0, 424242, &in.ta, &in.tb), GQLA_ERR_NOT_FOUND, {"seq"});
        EXPECT_GQLA_ERROR(gqla_append(ss, -1, s, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        EXPECT_GQLA_ERROR(gqla_append(ss, 2, s, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        if (kind == 1)
            EXPECT_GQLA_ERROR(gqla_append(ss, 1, s, &in.ta, &in.tb), GQLA_ERR_INVALID_STATE,
                              {"weights", "w_ukv", "layer", "gqla_set_weights"});
        {
            gqla_tensor bad = in.ta;
            bad.dtype = GQLA_DTYPE_BF16;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.ta;
            bad.ndim = kind == 0 ? 2 : 3;
            bad.shape[2] = 1;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.ta;
            bad.shape[bad.ndim - 1] += 1;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.ta;
            bad.strides[bad.ndim - 1] = 2;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.ta;
            bad.struct_size = 0;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.ta;
            bad.shape[0] = -1;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &bad, &in.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
            bad = in.tb;
            bad.shape[0] = 3;  // rows of b differ from rows of a
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &in.ta, &bad), GQLA_ERR_INVALID_ARGUMENT, {"b", "v", "kr"});
            bad = in.tb;
            bad.shape[bad.ndim - 1] -= 1;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &in.ta, &bad), GQLA_ERR_INVALID_ARGUMENT, {"b", "v", "kr"});
            // zero tokens: n >= 1 is required
            gqla_tensor a0 = in.ta, b0 = in.tb;
            a0.shape[0] = 0;
            b0.shape[0] = 0;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &a0, &b0), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c", "n"});
            // overflowing row count
            gqla_tensor ah = in.ta, bh = in.tb;
            ah.shape[0] = bh.shape[0] = std::numeric_limits<int64_t>::max() / 4;
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &ah, &bh), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
        }
        {  // tensors of the other kind
            gqla_config other_cfg = kind == 0 ? abi::odd_gqla_config(3) : abi::odd_gqa_config(3);
            Harness other(other_cfg);
            Inputs wrong(other, 1, 1, 4);
            EXPECT_GQLA_ERROR(gqla_append(ss, 0, s, &wrong.ta, &wrong.tb), GQLA_ERR_INVALID_ARGUMENT, {"a", "k", "c"});
        }
        {  // append_batch
            const gqla_seq_id two[2] = {s, t};
            const int64_t counts[2] = {1, 3};
            EXPECT_GQLA_ERROR(gqla_append_batch(nullptr, 0, 2, two, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"session"});
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, nullptr, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"seqs"});
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, two, nullptr, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"counts"});
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, -1, two, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"num_seqs"});
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 5, 2, two, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"layer"});
            const int64_t short_counts[2] = {1, 2};  // 3 rows described, 4 given
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, two, short_counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"counts", "a", "k", "c"});
            const int64_t negative[2] = {5, -1};
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, two, negative, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"counts"});
            const int64_t overflowing[2] = {std::numeric_limits<int64_t>::max(), 5};  // wraps to 4
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, two, overflowing, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"counts"});
            const gqla_seq_id repeated[2] = {t, t};
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, repeated, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_ARGUMENT,
                              {"seqs"});
            const gqla_seq_id with_unknown[2] = {s, 31337};
            EXPECT_GQLA_ERROR(gqla_append_batch(ss, 0, 2, with_unknown, counts, &in.ta, &in.tb), GQLA_ERR_NOT_FOUND,
                              {"seqs", "seq"});
            if (kind == 1)
                EXPECT_GQLA_ERROR(gqla_append_batch(ss, 1, 2, two, counts, &in.ta, &in.tb), GQLA_ERR_INVALID_STATE,
                                  {"weights", "w_ukv", "layer", "gqla_set_weights"});
        }

        check_unchanged(before, snapshot(h, {s, t}));
        h.append_ok(s, 0, 2);
        CHECK_DECODE_MATCHES(h.decode(0, {s, t}, 1), h.tol());
    }
}

TEST_CASE("weights, sequences, paths, stats and stream calls reject bad inputs") {
    for (int kind = 0; kind < 2; ++kind) {
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        cfg.num_layers = 2;
        CAPTURE(kind);
        Harness h(cfg);
        gqla_seq_id s = h.add();
        h.append_ok(s, 0, 18);
        const Snapshot before = snapshot(h, {s});
        gqla_session* ss = h.session();

        // set_weights
        const int64_t rows = static_cast<int64_t>(cfg.num_kv_heads) * (cfg.nope_dim + cfg.value_dim);
        abi::Buffer w = abi::make_input(h.rng(), GQLA_DTYPE_F32, static_cast<size_t>(std::max<int64_t>(rows, 1) * 384));
        gqla_tensor tw = abi::view(w, {std::max<int64_t>(rows, 1), 384});
        if (kind == 0) {
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &tw), GQLA_ERR_INVALID_STATE,
                              {"session", "kind", "GQA", "weights"});
        } else {
            EXPECT_GQLA_ERROR(gqla_set_weights(nullptr, 0, &tw), GQLA_ERR_INVALID_ARGUMENT, {"session"});
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 2, &tw), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, -1, &tw), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
            gqla_tensor bad = tw;
            bad.shape[0] -= 1;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            bad = tw;
            bad.shape[1] = 383;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            bad = tw;
            bad.strides[1] = 2;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            bad = tw;
            bad.ndim = 3;
            bad.shape[2] = 1;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            bad = tw;
            bad.struct_size = 0;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
            bad = tw;
            bad.data = nullptr;
            EXPECT_GQLA_ERROR(gqla_set_weights(ss, 0, &bad), GQLA_ERR_INVALID_ARGUMENT, {"w_ukv"});
        }

        // sequences
        gqla_seq_id out = 0;
        int64_t len = 0;
        EXPECT_GQLA_ERROR(gqla_sequence_add(nullptr, &out), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_sequence_add(ss, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
        EXPECT_GQLA_ERROR(gqla_sequence_release(nullptr, s), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_sequence_release(ss, 777777), GQLA_ERR_NOT_FOUND, {"seq"});
        EXPECT_GQLA_ERROR(gqla_sequence_release(ss, -1), GQLA_ERR_NOT_FOUND, {"seq"});
        EXPECT_GQLA_ERROR(gqla_sequence_fork(ss, 777777, &out), GQLA_ERR_NOT_FOUND, {"parent"});
        EXPECT_GQLA_ERROR(gqla_sequence_fork(ss, s, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"child"});
        EXPECT_GQLA_ERROR(gqla_sequence_fork(nullptr, s, &out), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_sequence_length(ss, 777777, 0, &len), GQLA_ERR_NOT_FOUND, {"seq"});
        EXPECT_GQLA_ERROR(gqla_sequence_length(ss, s, 2, &len), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        EXPECT_GQLA_ERROR(gqla_sequence_length(ss, s, -1, &len), GQLA_ERR_INVALID_ARGUMENT, {"layer"});
        EXPECT_GQLA_ERROR(gqla_sequence_length(ss, s, 0, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out_length"});
        EXPECT_GQLA_ERROR(gqla_sequence_length(nullptr, s, 0, &len), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        {  // a released id is gone for good
            gqla_seq_id tmp = h.add();
            h.release(tmp);
            EXPECT_GQLA_ERROR(gqla_sequence_release(ss, tmp), GQLA_ERR_NOT_FOUND, {"seq"});
            EXPECT_GQLA_ERROR(gqla_sequence_length(ss, tmp, 0, &len), GQLA_ERR_NOT_FOUND, {"seq"});
        }

        // paths
        gqla_path active = GQLA_PATH_AUTO;
        EXPECT_GQLA_ERROR(gqla_select_path(nullptr, GQLA_PATH_GQA), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_select_path(ss, static_cast<gqla_path>(9)), GQLA_ERR_INVALID_ARGUMENT, {"path"});
        if (kind == 0) {
            EXPECT_GQLA_ERROR(gqla_select_path(ss, GQLA_PATH_ABSORB), GQLA_ERR_INVALID_ARGUMENT, {"path"});
            CHECK(gqla_select_path(ss, GQLA_PATH_GQA) == GQLA_OK);
            CHECK(gqla_select_path(ss, GQLA_PATH_AUTO) == GQLA_OK);
        }
        EXPECT_GQLA_ERROR(gqla_get_path(nullptr, &active, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_get_path(ss, nullptr, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"active"});

        // stats, config, stream
        gqla_stats st;
        std::memset(&st, 0, sizeof st);
        EXPECT_GQLA_ERROR(gqla_session_stats(ss, &st), GQLA_ERR_INVALID_ARGUMENT, {"out", "struct_size"});
        EXPECT_GQLA_ERROR(gqla_session_stats(ss, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
        EXPECT_GQLA_ERROR(gqla_session_stats(nullptr, &st), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        gqla_config got;
        EXPECT_GQLA_ERROR(gqla_session_get_config(ss, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
        EXPECT_GQLA_ERROR(gqla_session_get_config(nullptr, &got), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_session_set_stream(nullptr, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        EXPECT_GQLA_ERROR(gqla_session_synchronize(nullptr), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        CHECK(gqla_session_set_stream(ss, nullptr) == GQLA_OK);
        CHECK(gqla_session_synchronize(ss) == GQLA_OK);

        // session cost
        gqla_workload wl{sizeof(gqla_workload), 4, 1000, 1, 0};
        gqla_cost_report rep;
        rep.struct_size = sizeof rep;
        EXPECT_GQLA_ERROR(gqla_session_predict_cost(ss, nullptr, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w"});
        EXPECT_GQLA_ERROR(gqla_session_predict_cost(ss, &wl, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
        EXPECT_GQLA_ERROR(gqla_session_predict_cost(nullptr, &wl, &rep), GQLA_ERR_INVALID_ARGUMENT, {"session"});
        gqla_workload w0 = wl;
        w0.struct_size = 0;
        EXPECT_GQLA_ERROR(gqla_session_predict_cost(ss, &w0, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w"});
        w0 = wl;
        w0.batch = 0;
        EXPECT_GQLA_ERROR(gqla_session_predict_cost(ss, &w0, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w", "batch"});

        check_unchanged(before, snapshot(h, {s}));
        CHECK_DECODE_MATCHES(h.decode(0, {s}, 3), h.tol());
    }
}

TEST_CASE("session-less entry points reject bad inputs") {
    gqla_tensor t;
    int64_t shape[2] = {2, 3};
    float data[6] = {1, 2, 3, 4, 5, 6};
    EXPECT_GQLA_ERROR(gqla_tensor_init(nullptr, data, GQLA_DTYPE_F32, 2, shape), GQLA_ERR_INVALID_ARGUMENT, {"t"});
    EXPECT_GQLA_ERROR(gqla_tensor_init(&t, data, GQLA_DTYPE_F32, 2, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"shape"});
    EXPECT_GQLA_ERROR(gqla_tensor_init(&t, data, GQLA_DTYPE_F32, 0, shape), GQLA_ERR_INVALID_ARGUMENT, {"ndim"});
    EXPECT_GQLA_ERROR(gqla_tensor_init(&t, data, GQLA_DTYPE_F32, GQLA_MAX_DIMS + 1, shape), GQLA_ERR_INVALID_ARGUMENT,
                      {"ndim"});
    EXPECT_GQLA_ERROR(gqla_tensor_init(&t, data, static_cast<gqla_dtype>(0), 2, shape), GQLA_ERR_INVALID_ARGUMENT,
                      {"dtype"});
    int64_t negative[2] = {2, -3};
    EXPECT_GQLA_ERROR(gqla_tensor_init(&t, data, GQLA_DTYPE_F32, 2, negative), GQLA_ERR_INVALID_ARGUMENT, {"shape"});

    gqla_config cfg;
    EXPECT_GQLA_ERROR(gqla_config_default(&cfg, static_cast<gqla_kind>(7)), GQLA_ERR_INVALID_ARGUMENT, {"kind"});
    EXPECT_GQLA_ERROR(gqla_config_validate(nullptr), GQLA_ERR_INVALID_ARGUMENT, {"cfg"});
    gqla_session* s = reinterpret_cast<gqla_session*>(0x1);
    EXPECT_GQLA_ERROR(gqla_session_create(nullptr, &s), GQLA_ERR_INVALID_ARGUMENT, {"cfg"});
    CHECK(s == nullptr);
    gqla_config good = abi::odd_gqla_config(3);
    EXPECT_GQLA_ERROR(gqla_session_create(&good, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
    gqla_config zero_size = good;
    zero_size.struct_size = 0;
    s = reinterpret_cast<gqla_session*>(0x1);
    EXPECT_GQLA_ERROR(gqla_session_create(&zero_size, &s), GQLA_ERR_INVALID_ARGUMENT, {"cfg", "struct_size"});
    CHECK(s == nullptr);
    EXPECT_GQLA_ERROR(gqla_config_validate(&zero_size), GQLA_ERR_INVALID_ARGUMENT, {"cfg", "struct_size"});
    gqla_session_destroy(nullptr);  // NULL-safe

    int32_t count = 0;
    EXPECT_GQLA_ERROR(gqla_device_count(GQLA_DEVICE_CPU, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out_count"});
    EXPECT_GQLA_ERROR(gqla_device_count(static_cast<gqla_device_type>(9), &count), GQLA_ERR_INVALID_ARGUMENT,
                      {"device"});
    gqla_probe_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    EXPECT_GQLA_ERROR(gqla_probe(GQLA_DEVICE_CPU, 0, 0, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
    EXPECT_GQLA_ERROR(gqla_probe(static_cast<gqla_device_type>(9), 0, 0, &info), GQLA_ERR_INVALID_ARGUMENT, {"device"});
    gqla_probe_info zero_info;
    std::memset(&zero_info, 0, sizeof zero_info);
    EXPECT_GQLA_ERROR(gqla_probe(GQLA_DEVICE_CPU, 0, 0, &zero_info), GQLA_ERR_INVALID_ARGUMENT, {"out", "struct_size"});

    gqla_workload w{sizeof(gqla_workload), 1, 100, 1, 0};
    gqla_cost_report rep;
    rep.struct_size = sizeof rep;
    EXPECT_GQLA_ERROR(gqla_predict_cost(nullptr, nullptr, &w, &rep), GQLA_ERR_INVALID_ARGUMENT, {"cfg"});
    EXPECT_GQLA_ERROR(gqla_predict_cost(&good, nullptr, nullptr, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w"});
    EXPECT_GQLA_ERROR(gqla_predict_cost(&good, nullptr, &w, nullptr), GQLA_ERR_INVALID_ARGUMENT, {"out"});
    gqla_workload neg = w;
    neg.context = -5;
    EXPECT_GQLA_ERROR(gqla_predict_cost(&good, nullptr, &neg, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w", "context"});
    neg = w;
    neg.q_len = 0;
    EXPECT_GQLA_ERROR(gqla_predict_cost(&good, nullptr, &neg, &rep), GQLA_ERR_INVALID_ARGUMENT, {"w", "q_len"});
}

TEST_CASE("cost prediction of the largest workloads stays finite and positive") {
    // batch * context passes int64: priced in double, never wrapped.
    for (int kind = 0; kind < 2; ++kind) {
        CAPTURE(kind);
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(3);
        Harness h(cfg);
        for (const gqla_workload& w : {gqla_workload{sizeof(gqla_workload), 2, INT64_MAX, 1, 0},
                                       gqla_workload{sizeof(gqla_workload), INT32_MAX, INT64_MAX, INT32_MAX, 0}}) {
            CAPTURE(w.batch);
            gqla_cost_report free_standing{}, of_session{};
            free_standing.struct_size = of_session.struct_size = sizeof(gqla_cost_report);
            REQUIRE(gqla_predict_cost(&cfg, nullptr, &w, &free_standing) == GQLA_OK);
            REQUIRE(gqla_session_predict_cost(h.session(), &w, &of_session) == GQLA_OK);
            for (const gqla_cost_report& r : {free_standing, of_session}) {
                CHECK(std::isfinite(r.gqa.time_s));
                CHECK(r.gqa.bytes > 0);
                CHECK(r.gqa.flops > 0);
                CHECK(r.gqa.time_s > 0);
                if (kind == 1) {
                    CHECK(std::isfinite(r.absorb.time_s));
                    CHECK(r.absorb.time_s > 0);
                    CHECK(std::isfinite(r.expand_s));
                    CHECK(r.expand_bytes > 0);
                    CHECK(r.expand_flops > 0);
                    CHECK(r.expand_s > 0);
                }
            }
        }
    }
}

TEST_CASE("configs whose page bookkeeping would not fit are refused before allocating it") {
    // Pages of one token up to the int32 page ids: 8 bytes of bookkeeping
    // each (16 GiB) used to be built before the pool allocation failed.
    gqla_config by_tokens = abi::odd_gqa_config(3);
    by_tokens.page_size = 1;
    by_tokens.max_tokens = INT32_MAX;
    gqla_config by_budget = abi::odd_gqa_config(3);
    by_budget.max_tokens = 0;
    by_budget.memory_budget_bytes = INT64_MAX;
    for (const auto& named : {std::pair{by_tokens, "max_tokens"}, std::pair{by_budget, "memory_budget_bytes"}}) {
        const gqla_config& cfg = named.first;
        const char* field = named.second;  // not a structured binding: CAPTURE's lambda cannot take one in C++17
        CAPTURE(field);
        const auto start = std::chrono::steady_clock::now();
        EXPECT_GQLA_ERROR(gqla_config_validate(&cfg), GQLA_ERR_INVALID_ARGUMENT, {field});
        gqla_session* s = reinterpret_cast<gqla_session*>(0x1);
        EXPECT_GQLA_ERROR(gqla_session_create(&cfg, &s), GQLA_ERR_INVALID_ARGUMENT, {field});
        CHECK(s == nullptr);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        CHECK(seconds < 1.0);  // no gigabytes built and freed
        CHECK(std::string(gqla_last_error_message()).find("limit of 16777216 pages") != std::string::npos);
    }
}

// SPDX-License-Identifier: Apache-2.0
// gqla_attention with ragged and uniform query counts against the float64
// reference: decoding sequences beside prefill chunks, chunks that start and
// end on page edges, prompts attended whole (one of more than 4096 tokens),
// strided views, forks sharing pages; the uniform call against gqla_decode
// and a ragged call against one call per sequence.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_support.hpp"
#include "tests/reference/reference.hpp"

using abi::Harness;
using abi::path_label;
using abi::require_ok;
using abi::sequences_of_lengths;
using attention::attend;
using attention::Ids;
using attention::light_gqla_config;
using attention::random_rows;
using attention::Request;
using attention::Result;

namespace {

// gqla_decode on contiguous tensors with the given queries: o and lse as returned.
struct Decoded {
    std::vector<double> o, lse;
};
Decoded decode_raw(Harness& h, int32_t layer, const std::vector<gqla_seq_id>& seqs, int32_t s_q, abi::Buffer& q_dense) {
    const int64_t B = static_cast<int64_t>(seqs.size()), H = h.config().num_heads;
    abi::Buffer o = abi::make_poisoned(h.config().io_dtype, static_cast<size_t>(B * s_q * H * h.out_dim()));
    abi::Buffer lse = abi::make_poisoned(GQLA_DTYPE_F32, static_cast<size_t>(B * s_q * H));
    gqla_tensor tq = abi::view(q_dense, {B, s_q, H, h.q_dim()}), to = abi::view(o, {B, s_q, H, h.out_dim()}),
                tl = abi::view(lse, {B, s_q, H});
    require_ok(gqla_decode(h.session(), layer, static_cast<int32_t>(B), seqs.data(), &tq, &to, &tl), "gqla_decode");
    return {abi::values_of(o), abi::values_of(lse)};
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// rel-L2 of a against b over the rows [row0, row0 + n) of width w.
double rel_rows(const std::vector<double>& a, size_t a_row0, const std::vector<double>& b, size_t b_row0, size_t n,
                size_t w) {
    return gqla::ref::rel_l2(a.data() + a_row0 * w, b.data() + b_row0 * w, n * w);
}

}  // namespace

// Page sizes 1, 5, 16 and 64; per page size P two batches. A mix: q_lens
// {1, 7, 1, 65} over lengths {5P+2, 2P+7, 1, 65} (a decoding sequence, a
// chunk starting on a page edge, and two prompts attended whole, q_len ==
// length). Page edges, attended in an order other than their creation order:
// chunks that all start on a page edge and end on one (a whole page, a whole
// one-page prompt), one token before one (two pages less a token) or one
// token past one (a page and a token). GQA kind through AUTO and GQA; GQLA
// through each of its three forms.
TEST_CASE("ragged query counts match the reference at every page size, kind and cache dtype") {
    for (int32_t P : {1, 5, 16, 64}) {
        for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
            for (gqla_kind kind : {GQLA_KIND_GQA, GQLA_KIND_GQLA}) {
                gqla_config cfg = kind == GQLA_KIND_GQA ? abi::odd_gqa_config(2) : light_gqla_config(3);
                cfg.page_size = P;
                cfg.cache_dtype = dt;
                cfg.max_q_len = 128;
                cfg.max_batch = 8;
                if (kind == GQLA_KIND_GQLA) cfg.path = GQLA_PATH_ABSORB;
                CAPTURE(P);
                CAPTURE(abi::dtype_label(dt));
                CAPTURE(kind);
                Harness h(cfg);
                const auto mix = sequences_of_lengths(h, {5 * P + 2, 2 * P + 7, 1, 65});
                const auto edges = sequences_of_lengths(h, {2 * P, 3 * P + 1, P, 4 * P - 1});
                Request a, b;
                a.seqs = Ids(mix);
                a.q_lens = {1, 7, 1, 65};
                b.seqs = Ids{edges[2], edges[0], edges[3], edges[1]};
                b.q_lens = {P, P, 2 * P - 1, P + 1};

                // (form asked for, form expected to run, select_path before)
                struct Form {
                    gqla_path ask, expect, select;
                };
                std::vector<Form> forms;
                if (kind == GQLA_KIND_GQA)
                    forms = {{GQLA_PATH_AUTO, GQLA_PATH_GQA, GQLA_PATH_AUTO},
                             {GQLA_PATH_GQA, GQLA_PATH_GQA, GQLA_PATH_AUTO}};
                else
                    forms = {{GQLA_PATH_ABSORB, GQLA_PATH_ABSORB, GQLA_PATH_ABSORB},
                             {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_ABSORB},
                             {GQLA_PATH_GQA, GQLA_PATH_GQA, GQLA_PATH_GQA}};
                for (const Form& f : forms) {
                    CAPTURE(path_label(f.ask));
                    if (kind == GQLA_KIND_GQLA) require_ok(gqla_select_path(h.session(), f.select), "gqla_select_path");
                    for (Request* rq : {&a, &b}) {
                        rq->path = f.ask;
                        const Result r = attend(h, *rq);
                        CHECK_ATTENTION_MATCHES(r, h.tol());
                        CHECK(path_label(r.taken) == std::string(path_label(f.expect)));
                    }
                }
            }
        }
    }
}

// Packed rows addressed through strides (gaps left alone, q's gaps NaN), in
// f32 and in the narrower f16 io dtype, without lse, on layer 1.
TEST_CASE("ragged calls with strided views, f16 io, without lse, on another layer") {
    for (int variant = 0; variant < 4; ++variant) {
        const int kind = variant % 2;
        gqla_config cfg = kind == 0 ? abi::odd_gqa_config(3) : abi::odd_gqla_config(2);
        cfg.num_layers = 2;
        cfg.max_q_len = 40;
        if (variant >= 2) {
            cfg.io_dtype = GQLA_DTYPE_F16;
            cfg.cache_dtype = GQLA_DTYPE_F16;
        }
        CAPTURE(kind);
        CAPTURE(abi::dtype_label(cfg.io_dtype));
        Harness h(cfg);
        const auto seqs = sequences_of_lengths(h, {33, 4, 50}, 1);
        Request rq;
        rq.layer = 1;
        rq.seqs = Ids(seqs);
        rq.q_lens = {33, 1, 17};
        rq.path = kind == 0 ? GQLA_PATH_GQA : GQLA_PATH_GQA_TRANSIENT;
        rq.padded = true;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.with_lse = false;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.padded = false;
        rq.path = kind == 0 ? GQLA_PATH_AUTO : GQLA_PATH_ABSORB;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());

        // path_taken NULL is allowed.
        abi::Buffer q = random_rows(h, 51);
        abi::Buffer o = abi::make_poisoned(cfg.io_dtype, static_cast<size_t>(51 * 6 * h.out_dim()));
        gqla_tensor tq = abi::view(q, {51, 6, h.q_dim()}), to = abi::view(o, {51, 6, h.out_dim()});
        gqla_attention_args args;
        require_ok(gqla_attention_args_default(&args), "gqla_attention_args_default");
        args.layer = 1;
        args.batch = 3;
        args.seqs = seqs.data();
        args.q_lens = rq.q_lens.data();
        args.q = &tq;
        args.o = &to;
        require_ok(gqla_attention(h.session(), &args), "gqla_attention with path_taken NULL");
        bool written = true;
        for (size_t i = 0; i < o.size(); ++i) written &= std::isfinite(o.get(i));
        CHECK(written);
    }
}

// gqla_decode is documented as gqla_attention with uniform queries on the
// session's path: the same backend call on the same inputs, so the results
// are identical bit for bit (the CPU planner is deterministic for a given
// batch shape; the 600-token sequence is split over threads and merged).
TEST_CASE("a uniform call with q_lens NULL equals gqla_decode bit for bit") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        for (int kind_path = 0; kind_path < 3; ++kind_path) {
            gqla_config cfg = kind_path == 0 ? abi::odd_gqa_config(3) : light_gqla_config(3);
            cfg.cache_dtype = dt;
            if (kind_path) cfg.path = kind_path == 1 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
            CAPTURE(abi::dtype_label(dt));
            CAPTURE(kind_path);
            Harness h(cfg);
            const auto seqs = sequences_of_lengths(h, {3, 17, 600, 40});
            for (int32_t s_q : {1, 3}) {
                CAPTURE(s_q);
                abi::Buffer q = random_rows(h, 4 * s_q);
                const Decoded d = decode_raw(h, 0, seqs, s_q, q);
                std::vector<gqla_path> asks{cfg.path == GQLA_PATH_AUTO ? GQLA_PATH_GQA : cfg.path};
                if (kind_path == 0) asks.push_back(GQLA_PATH_AUTO);
                for (gqla_path ask : asks) {
                    CAPTURE(path_label(ask));
                    Request rq;
                    rq.seqs = Ids(seqs);
                    rq.s_q = s_q;
                    rq.path = ask;
                    const Result r = attend(h, rq, q);
                    CHECK_ATTENTION_MATCHES(r, h.tol());
                    CHECK(r.taken == (kind_path == 0 ? GQLA_PATH_GQA : cfg.path));
                    CHECK(same_bits(r.o, d.o));
                    CHECK(same_bits(r.lse, d.lse));
                }
            }
        }
    }
}

// Not bit for bit: the CPU planner sizes its split-KV pieces from the
// batch's total work, so the 700-token sequence is cut at other points (and
// its pieces merged in another order) beside the 1300-token one than alone.
// The difference is rounding only, so the two agree within the cache dtype's
// bound, and each matches the reference.
TEST_CASE("a ragged call equals the same sequences attended one call each") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        for (int kind_form = 0; kind_form < 4; ++kind_form) {
            gqla_config cfg = kind_form == 0 ? abi::odd_gqa_config(2) : light_gqla_config(2);
            cfg.cache_dtype = dt;
            cfg.max_q_len = 70;
            const gqla_path forms[] = {GQLA_PATH_GQA, GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
            if (kind_form) cfg.path = kind_form == 3 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
            CAPTURE(abi::dtype_label(dt));
            CAPTURE(path_label(forms[kind_form]));
            Harness h(cfg);
            const auto seqs = sequences_of_lengths(h, {700, 9, 65, 1300});
            Request all;
            all.seqs = Ids(seqs);
            all.q_lens = {5, 9, 65, 1};
            all.path = forms[kind_form];
            abi::Buffer q = random_rows(h, all.total_rows());
            const Result together = attend(h, all, q);
            CHECK_ATTENTION_MATCHES(together, h.tol());
            const int64_t H = cfg.num_heads, Dq = h.q_dim();
            int64_t row = 0;
            for (size_t i = 0; i < seqs.size(); ++i) {
                const int32_t n = all.q_lens[i];
                CAPTURE(i);
                Request one;
                one.seqs = Ids{seqs[i]};
                one.q_lens = {n};
                one.path = all.path;
                abi::Buffer qi = abi::make_poisoned(cfg.io_dtype, static_cast<size_t>(n * H * Dq));
                for (size_t k = 0; k < qi.size(); ++k) qi.set(k, q.get(static_cast<size_t>(row * H * Dq) + k));
                const Result alone = attend(h, one, qi);
                CHECK_ATTENTION_MATCHES(alone, h.tol());
                CHECK(alone.taken == together.taken);
                CHECK(rel_rows(together.o, static_cast<size_t>(row * H), alone.o, 0, static_cast<size_t>(n * H),
                               static_cast<size_t>(h.out_dim())) <= h.tol());
                CHECK(abi::lse_error(together.lse.data() + row * H, alone.lse.data(), static_cast<size_t>(n * H)) <=
                      h.tol());
                row += n;
            }
        }
    }
}

// Forks share their parent's pages (a partly filled last page copied on the
// first append): both attended in one ragged call, with chunks reaching into
// the shared prefix.
TEST_CASE("forked sequences sharing pages attended in one ragged call") {
    for (int kind_form = 0; kind_form < 4; ++kind_form) {
        const gqla_path forms[] = {GQLA_PATH_AUTO, GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
        gqla_config cfg = kind_form == 0 ? abi::odd_gqa_config(3) : light_gqla_config(2);
        cfg.max_q_len = 40;
        cfg.path = kind_form == 0 ? GQLA_PATH_AUTO : kind_form == 3 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        CAPTURE(path_label(forms[kind_form]));
        Harness h(cfg);
        const gqla_seq_id parent = sequences_of_lengths(h, {40})[0];
        const gqla_seq_id child = h.fork(parent), sibling = h.fork(parent);
        h.append_ok(child, 0, 5);
        h.append_ok(parent, 0, 1);
        Request rq;
        rq.seqs = Ids{child, parent, sibling};
        rq.q_lens = {30, 8, 1};
        rq.path = forms[kind_form];
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
    }
}

// A whole prompt longer than 4096 tokens attended as one chunk beside a
// decoding sequence, on every form, in a small shape (the reference of the
// whole chunk would cost seconds): its first rows are checked against a twin
// sequence holding only the chunk's first tokens (query i of the chunk sees
// positions 0..i, as the twin's own queries do), its last rows against the
// reference with s_q = those rows, and every row must be finite.
TEST_CASE("a prompt of more than 4096 tokens attended as one chunk") {
    for (int kind_form = 0; kind_form < 3; ++kind_form) {
        gqla_config cfg = kind_form == 0 ? abi::odd_gqa_config(1) : abi::odd_gqla_config(1);
        cfg.num_heads = 2;
        if (kind_form == 0) {
            cfg.head_dim = 24;
            cfg.value_dim = 16;
        } else {
            cfg.latent_dim = 40;
            cfg.nope_dim = 24;
            cfg.rope_dim = 8;
            cfg.value_dim = 24;
        }
        cfg.max_q_len = 16384;
        cfg.max_q_tokens = 5000;
        cfg.max_batch = 2;
        cfg.page_size = 64;
        cfg.path = kind_form == 0 ? GQLA_PATH_AUTO : GQLA_PATH_ABSORB;
        const gqla_path form = kind_form == 0   ? GQLA_PATH_GQA
                               : kind_form == 1 ? GQLA_PATH_ABSORB
                                                : GQLA_PATH_GQA_TRANSIENT;
        CAPTURE(path_label(form));
        Harness h(cfg);
        const int64_t L = 4200, head = 37;
        const gqla_seq_id prompt = h.add(), twin = h.add(), other = h.add();
        {  // the same first `head` tokens in both
            abi::Buffer a = abi::make_input(h.rng(), cfg.io_dtype, static_cast<size_t>(head * h.a_cols()));
            abi::Buffer b = abi::make_input(h.rng(), cfg.io_dtype, static_cast<size_t>(head * h.b_cols()));
            gqla_tensor ta = abi::view(a, h.a_shape(head)), tb = abi::view(b, h.b_shape(head));
            for (gqla_seq_id s : {prompt, twin}) {
                require_ok(gqla_append(h.session(), 0, s, &ta, &tb), "gqla_append");
                h.record(s, 0, abi::values_of(a), abi::values_of(b));
            }
        }
        h.append_ok(prompt, 0, 2000);
        h.append_ok(prompt, 0, L - head - 2000);
        h.append_ok(other, 0, 20);
        REQUIRE(h.length(prompt, 0) == L);

        Request rq;
        rq.seqs = Ids{other, prompt};
        rq.q_lens = {1, static_cast<int32_t>(L)};
        rq.path = form;
        rq.check = false;  // rows checked below
        abi::Buffer q = random_rows(h, rq.total_rows());
        const Result r = attend(h, rq, q);
        INFO("gqla_attention: " << std::string(gqla_last_error_message()));
        INFO(abi::replay_hint(r.seed));
        REQUIRE(r.status == GQLA_OK);
        CHECK(r.taken == form);
        CHECK(r.gaps_untouched);
        bool finite = true;
        for (double x : r.o) finite &= std::isfinite(x);
        for (double x : r.lse) finite &= std::isfinite(x);
        CHECK(finite);

        const int64_t H = cfg.num_heads, Dq = h.q_dim(), Dv = h.out_dim();
        // rows of `seq` in the packed output: [row0, row0 + n), queries from q at the same rows
        auto check_rows = [&](gqla_seq_id ref_seq, int64_t row0, int32_t n) {
            std::vector<double> qv(static_cast<size_t>(n * H * Dq)), ro(static_cast<size_t>(n * H * Dv)),
                rl(static_cast<size_t>(n * H));
            for (size_t i = 0; i < qv.size(); ++i) qv[i] = q.get(static_cast<size_t>(row0 * H * Dq) + i);
            h.reference(ref_seq, 0, n, qv.data(), ro.data(), rl.data());
            CHECK(gqla::ref::rel_l2(r.o.data() + row0 * H * Dv, ro.data(), ro.size()) <= h.tol());
            CHECK(abi::lse_error(r.lse.data() + row0 * H, rl.data(), rl.size()) <= h.tol());
        };
        check_rows(other, 0, 1);
        check_rows(twin, 1, static_cast<int32_t>(head));  // the chunk's first rows
        check_rows(prompt, 1 + L - 50, 50);               // its last rows
    }
}

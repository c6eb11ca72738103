// SPDX-License-Identifier: Apache-2.0
// gqla_attention through the C ABI: ragged query counts (decoding sequences
// beside prefill chunks, chunks that start and end on page edges, prompts
// attended whole, forks sharing pages) against the float64 reference; the
// three forms of a GQLA session (absorb, the kept expanded cache, the
// per-call transient expansion); the uniform call against gqla_decode; a
// ragged call against one call per sequence; the per-call path leaving the
// session's path and kept cache alone; NaN in a chunk's causal tail; the cost
// report's transient form; bad inputs; and the max_q_tokens config field.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/reference.hpp"
#include "harness.hpp"
#include "nonfinite_support.hpp"

using abi::Harness;
using abi::offsets_of;
using abi::path_label;
using abi::sequences_of_lengths;
using abi::span_of;

namespace {

// Sequence ids are assigned as Ids(...) temporaries (moved): copy-assigning a
// vector<int64_t> trips a false -Wnonnull warning of GCC 12 at -O3.
using Ids = std::vector<gqla_seq_id>;

// path_taken is preset to AUTO, which gqla_attention never reports (it names
// the form that ran), so it shows whether the call wrote it. (An out-of-range
// value would be undefined behaviour to load.)
const gqla_path kUnwritten = GQLA_PATH_AUTO;
constexpr double kGapSentinel = 7.0;  // exactly representable in every dtype

void require_ok(gqla_status st, const char* what) {
    INFO(what << ": " << gqla_last_error_message());
    REQUIRE(st == GQLA_OK);
}



// One gqla_attention call as a test states it.
struct Request {
    int32_t layer = 0;
    std::vector<gqla_seq_id> seqs;
    std::vector<int32_t> q_lens;  // empty: q_lens NULL, s_q queries per sequence (4-d q)
    int32_t s_q = 0;
    gqla_path path = GQLA_PATH_AUTO;
    bool with_lse = true;
    bool padded = false;  // every outer stride has a gap that must stay untouched
    bool check = true;    // compare every sequence with the reference

    int32_t rows_of(size_t i) const { return q_lens.empty() ? s_q : q_lens[i]; }
    int64_t total_rows() const {
        int64_t n = 0;
        for (size_t i = 0; i < seqs.size(); ++i) n += rows_of(i);
        return n;
    }
};

struct Result {
    gqla_status status = GQLA_ERR_INTERNAL;
    gqla_path taken = kUnwritten;
    uint64_t seed = 0;
    // Worst over the sequences, against the reference on the inputs as the
    // cache stores them (o_err, lse_err) and as given (the *_given ones,
    // bounded by given_tol).
    double o_err = 0, lse_err = 0, o_err_given = 0, lse_err_given = 0, given_tol = 0;
    bool gaps_untouched = true;
    std::vector<double> o, lse;  // packed rows as returned: [N, H, Dv], [N, H]
};

// Row-major strides of `shape`, with a gap after every outer row when padded.
std::vector<int64_t> strides_of(const std::vector<int64_t>& shape, bool padded) {
    const size_t n = shape.size();
    std::vector<int64_t> s(n, 1);
    for (size_t i = n - 1; i-- > 0;)
        s[i] = s[i + 1] * shape[i + 1] + (padded ? static_cast<int64_t>(2 * (n - i) + 1) : 0);
    return s;
}


// Queries for a request: [N, H, Dq] values in the io dtype.
abi::Buffer random_rows(Harness& h, int64_t rows) {
    return abi::make_input(h.rng(), h.config().io_dtype, static_cast<size_t>(rows * h.config().num_heads * h.q_dim()));
}

// Runs the request with queries q_dense ([N, H, Dq] in packed order) and
// compares every sequence with the reference.
Result attend(Harness& h, const Request& rq, abi::Buffer& q_dense) {
    const int64_t B = static_cast<int64_t>(rq.seqs.size()), H = h.config().num_heads, N = rq.total_rows();
    const int64_t Dq = h.q_dim(), Dv = h.out_dim();
    const bool uniform = rq.q_lens.empty();
    using Shape = std::vector<int64_t>;
    const Shape q_shape = uniform ? Shape{B, rq.s_q, H, Dq} : Shape{N, H, Dq};
    const Shape o_shape = uniform ? Shape{B, rq.s_q, H, Dv} : Shape{N, H, Dv};
    const Shape l_shape = uniform ? Shape{B, rq.s_q, H} : Shape{N, H};
    const auto q_str = strides_of(q_shape, rq.padded), o_str = strides_of(o_shape, rq.padded),
               l_str = strides_of(l_shape, rq.padded);
    const auto q_off = offsets_of(q_shape, q_str), o_off = offsets_of(o_shape, o_str),
               l_off = offsets_of(l_shape, l_str);
    REQUIRE(q_off.size() == q_dense.size());
    const gqla_dtype io = h.config().io_dtype;

    // q: gaps NaN (reading them would poison the result); o/lse: NaN where
    // written, a sentinel in the gaps.
    abi::Buffer q = abi::make_poisoned(io, span_of(q_shape, q_str));
    for (size_t i = 0; i < q_off.size(); ++i) q.set(q_off[i], q_dense.get(i));
    abi::Buffer o = abi::make_poisoned(io, span_of(o_shape, o_str));
    abi::Buffer lse = abi::make_poisoned(GQLA_DTYPE_F32, span_of(l_shape, l_str));
    for (size_t i = 0; i < o.size(); ++i) o.set(i, kGapSentinel);
    for (size_t off : o_off) o.set(off, std::nan(""));
    for (size_t i = 0; i < lse.size(); ++i) lse.set(i, kGapSentinel);
    for (size_t off : l_off) lse.set(off, std::nan(""));
    gqla_tensor tq = abi::view(q, q_shape, q_str), to = abi::view(o, o_shape, o_str),
                tl = abi::view(lse, l_shape, l_str);

    gqla_attention_args args;
    require_ok(gqla_attention_args_default(&args), "gqla_attention_args_default");
    args.layer = rq.layer;
    args.batch = static_cast<int32_t>(B);
    args.seqs = rq.seqs.data();
    args.q_lens = uniform ? nullptr : rq.q_lens.data();
    args.q = &tq;
    args.o = &to;
    args.lse = rq.with_lse ? &tl : nullptr;
    args.path = rq.path;
    Result res;
    args.path_taken = &res.taken;
    res.seed = h.rng().seed();
    res.given_tol = abi::quantization_tolerance(h.config().cache_dtype, io);
    res.status = gqla_attention(h.session(), &args);
    if (res.status != GQLA_OK) return res;

    std::vector<char> is_o(o.size(), 0), is_l(lse.size(), 0);
    for (size_t off : o_off) is_o[off] = 1;
    for (size_t off : l_off) is_l[off] = 1;
    for (size_t i = 0; i < o.size(); ++i)
        if (!is_o[i] && o.get(i) != kGapSentinel) res.gaps_untouched = false;
    for (size_t i = 0; i < lse.size(); ++i)
        if (!is_l[i] && lse.get(i) != kGapSentinel) res.gaps_untouched = false;
    if (!rq.with_lse)  // lse NULL: nothing may be written there
        for (size_t off : l_off)
            if (!std::isnan(lse.get(off))) res.gaps_untouched = false;

    res.o.resize(o_off.size());
    for (size_t i = 0; i < o_off.size(); ++i) res.o[i] = o.get(o_off[i]);
    if (rq.with_lse) {
        res.lse.resize(l_off.size());
        for (size_t i = 0; i < l_off.size(); ++i) res.lse[i] = lse.get(l_off[i]);
    }

    int64_t row = 0;
    for (size_t b = 0; b < rq.seqs.size() && rq.check; ++b) {
        const int32_t n = rq.rows_of(b);
        const size_t nq = static_cast<size_t>(n * H * Dq), no = static_cast<size_t>(n * H * Dv),
                     nl = static_cast<size_t>(n * H);
        std::vector<double> qv(nq), ref_o(no), ref_l(nl);
        for (size_t i = 0; i < nq; ++i) qv[i] = q_dense.get(static_cast<size_t>(row * H * Dq) + i);
        const double* got_o = res.o.data() + row * H * Dv;
        auto compare = [&](bool stored, double& o_err, double& lse_err) {
            h.reference(rq.seqs[b], rq.layer, n, qv.data(), ref_o.data(), ref_l.data(), stored);
            o_err = std::max(o_err, gqla::ref::rel_l2(got_o, ref_o.data(), no));
            if (rq.with_lse) lse_err = std::max(lse_err, abi::lse_error(res.lse.data() + row * H, ref_l.data(), nl));
        };
        compare(true, res.o_err, res.lse_err);
        if (h.cache_rounds_inputs()) compare(false, res.o_err_given, res.lse_err_given);
        row += n;
    }
    if (!h.cache_rounds_inputs()) {
        res.o_err_given = res.o_err;
        res.lse_err_given = res.lse_err;
    }
    return res;
}

Result attend(Harness& h, const Request& rq) {
    abi::Buffer q = random_rows(h, rq.total_rows());
    return attend(h, rq, q);
}

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

gqla_path active_path(gqla_session* s, gqla_path* requested = nullptr) {
    gqla_path active = GQLA_PATH_AUTO, req = GQLA_PATH_AUTO;
    require_ok(gqla_get_path(s, &active, &req), "gqla_get_path");
    if (requested) *requested = req;
    return active;
}

// The odd GQLA shape with a smaller latent (still nothing a power of two or a
// multiple of 64): the float64 reference re-expands every cached token per
// call, which dominates these tests' time at r = 384.
gqla_config light_gqla_config(int32_t groups) {
    gqla_config cfg = abi::odd_gqla_config(groups);
    cfg.latent_dim = 136;
    cfg.nope_dim = 40;
    cfg.rope_dim = 24;
    cfg.value_dim = 56;
    return cfg;
}

gqla_config resolved_config(gqla_session* s) {
    gqla_config c;
    std::memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    require_ok(gqla_session_get_config(s, &c), "gqla_session_get_config");
    return c;
}

}  // namespace

// Assert an attention call succeeded and matched the reference on the stored
// inputs within `tol` (and the one on the given inputs within the looser bound).
#define CHECK_ATTENTION_MATCHES(result, tol)                       \
    do {                                                           \
        const Result& r_ = (result);                               \
        INFO("gqla_attention: " << gqla_last_error_message());     \
        INFO(::abi::replay_hint(r_.seed));                         \
        REQUIRE(r_.status == GQLA_OK);                             \
        CHECK(r_.o_err <= (tol));                                  \
        CHECK(r_.lse_err <= (tol));                                \
        CHECK(r_.o_err_given <= r_.given_tol);                     \
        CHECK(r_.lse_err_given <= r_.given_tol);                   \
        CHECK(r_.gaps_untouched);                                  \
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

// Absorb, the GQA path over the kept expanded cache, and the transient
// expansion compute the same attention: each against the reference, and on
// f32 inputs with an f32 cache within 1e-5 of each other. The transient form
// and GQA without a kept cache leave the session on absorb with no expanded
// cache; absorb and the transient form beside a kept cache leave it kept.
TEST_CASE("the three forms of a GQLA session agree with the reference and report what ran") {
    for (gqla_dtype dt : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        for (int32_t G : {2, 6}) {  // G == H: MLA
            gqla_config cfg = abi::odd_gqla_config(G);
            cfg.cache_dtype = dt;
            cfg.max_q_len = 40;
            cfg.path = GQLA_PATH_ABSORB;
            CAPTURE(abi::dtype_label(dt));
            CAPTURE(G);
            Harness h(cfg);
            Request rq;
            rq.seqs = sequences_of_lengths(h, {40, 7, 130, 17});
            rq.q_lens = {1, 7, 33, 16};
            abi::Buffer q = random_rows(h, rq.total_rows());
            REQUIRE(h.stats().expanded_bytes == 0);

            auto run = [&](gqla_path ask, gqla_path expect) {
                CAPTURE(path_label(ask));
                rq.path = ask;
                Result r = attend(h, rq, q);
                CHECK_ATTENTION_MATCHES(r, h.tol());
                CHECK(path_label(r.taken) == std::string(path_label(expect)));
                return r;
            };
            // Session on absorb: no expanded cache is kept, and none appears.
            const Result absorb = run(GQLA_PATH_ABSORB, GQLA_PATH_ABSORB);
            const Result transient = run(GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT);
            CHECK(h.stats().expanded_bytes == 0);
            const Result gqa_without_cache = run(GQLA_PATH_GQA, GQLA_PATH_GQA_TRANSIENT);
            CHECK(h.stats().expanded_bytes == 0);
            gqla_path requested = GQLA_PATH_AUTO;
            CHECK(active_path(h.session(), &requested) == GQLA_PATH_ABSORB);
            CHECK(requested == GQLA_PATH_ABSORB);

            // Session on the GQA path: the kept cache is used by GQA, left alone by the others.
            require_ok(gqla_select_path(h.session(), GQLA_PATH_GQA), "gqla_select_path(GQA)");
            const int64_t kept = h.stats().expanded_bytes;
            CHECK(kept > 0);
            const Result expanded = run(GQLA_PATH_GQA, GQLA_PATH_GQA);
            const Result transient_beside = run(GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT);
            const Result absorb_beside = run(GQLA_PATH_ABSORB, GQLA_PATH_ABSORB);
            CHECK(h.stats().expanded_bytes == kept);
            CHECK(active_path(h.session(), &requested) == GQLA_PATH_GQA);
            CHECK(requested == GQLA_PATH_GQA);

            if (dt == GQLA_DTYPE_F32) {  // path against path (docs/numerics.md)
                const Result* all[] = {&absorb,   &transient,        &gqa_without_cache,
                                       &expanded, &transient_beside, &absorb_beside};
                for (const Result* x : all) {
                    REQUIRE(x->o.size() == expanded.o.size());
                    CHECK(gqla::ref::rel_l2(x->o.data(), expanded.o.data(), x->o.size()) <= 1e-5);
                    CHECK(abi::lse_error(x->lse.data(), expanded.lse.data(), x->lse.size()) <= 1e-5);
                }
            }
        }
    }
}

// Nothing of an earlier call may be reused stale: the transient form (and
// the others) between calls that append (into a partly filled page and
// onto new pages), replace a layer's weights, or attend another layer.
TEST_CASE("every form sees appends, new weights and other layers between calls") {
    for (gqla_path form : {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        gqla_config cfg = light_gqla_config(3);
        cfg.num_layers = 2;
        cfg.max_q_len = 20;
        cfg.path = form == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
        CAPTURE(path_label(form));
        Harness h(cfg);
        const auto seqs = sequences_of_lengths(h, {37, 10});
        for (gqla_seq_id s : seqs) h.append_ok(s, 1, 21);
        Request rq;
        rq.seqs = Ids(seqs);
        rq.q_lens = {5, 10};
        rq.path = form;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        h.append_ok(seqs[0], 0, 3);   // into the partly filled third page
        h.append_ok(seqs[1], 0, 20);  // onto new pages
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        h.set_weights(0);  // re-expands a kept cache; a transient one is built per call anyway
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.layer = 1;
        rq.q_lens = {20, 1};
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
        rq.layer = 0;
        CHECK_ATTENTION_MATCHES(attend(h, rq), h.tol());
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

// A call's AUTO picks a form for that call only: with the session's path
// chosen explicitly, neither a large prefill chunk nor a one-query decode
// changes gqla_get_path or the kept expanded cache. For a uniform batch the
// form AUTO runs is the one gqla_session_predict_cost names for that
// workload (call_chosen, with no expanded cache kept).
TEST_CASE("AUTO per call does not change the session's path or kept cache") {
    for (gqla_path session_path : {GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        gqla_config cfg = light_gqla_config(3);
        cfg.max_q_len = 320;
        cfg.path = session_path;
        CAPTURE(path_label(session_path));
        Harness h(cfg);
        const auto seqs = sequences_of_lengths(h, {400, 31, 70, 2});
        const int64_t kept = h.stats().expanded_bytes;
        CHECK((kept > 0) == (session_path == GQLA_PATH_GQA));
        auto unchanged = [&] {
            gqla_path requested = GQLA_PATH_AUTO;
            CHECK(active_path(h.session(), &requested) == session_path);
            CHECK(requested == session_path);
            CHECK(h.stats().expanded_bytes == kept);
            CHECK(h.stats().path == session_path);
        };
        auto allowed = [&](gqla_path taken) {
            return taken == GQLA_PATH_ABSORB || taken == GQLA_PATH_GQA_TRANSIENT ||
                   (taken == GQLA_PATH_GQA && session_path == GQLA_PATH_GQA);
        };

        Request chunk;  // a prefill chunk beside a decoding sequence
        chunk.seqs = Ids{seqs[0], seqs[1]};
        chunk.q_lens = {300, 1};
        chunk.path = GQLA_PATH_AUTO;
        Result r = attend(h, chunk);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();

        Request step;  // one query per sequence
        step.seqs = Ids(seqs);
        step.s_q = 1;
        step.path = GQLA_PATH_AUTO;
        r = attend(h, step);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();
        step.q_lens = {1, 1, 1, 1};
        r = attend(h, step);
        CHECK_ATTENTION_MATCHES(r, h.tol());
        CHECK(allowed(r.taken));
        unchanged();

        if (session_path == GQLA_PATH_ABSORB) {
            // Uniform calls of one sequence: AUTO runs what the cost report
            // predicts for that exact workload.
            for (int32_t s_q : {1, 300}) {
                CAPTURE(s_q);
                Request one;
                one.seqs = Ids{seqs[0]};
                one.s_q = s_q;
                one.path = GQLA_PATH_AUTO;
                r = attend(h, one);
                CHECK_ATTENTION_MATCHES(r, h.tol());
                gqla_workload w{sizeof(gqla_workload), 1, 400, s_q};
                gqla_cost_report rep;
                std::memset(&rep, 0, sizeof rep);
                rep.struct_size = sizeof rep;
                require_ok(gqla_session_predict_cost(h.session(), &w, &rep), "gqla_session_predict_cost");
                CHECK(path_label(r.taken) == std::string(path_label(rep.call_chosen)));
                unchanged();
            }
        }
    }
}

namespace {

bool all_zero(const gqla_path_cost& c) {
    gqla_path_cost zero;
    std::memset(&zero, 0, sizeof zero);
    return std::memcmp(&c, &zero, sizeof zero) == 0;
}

bool filled(const gqla_path_cost& c) {
    return c.bytes > 0 && c.flops > 0 && c.time_s > 0 && std::isfinite(c.time_s) &&
           (c.bound == GQLA_BOUND_MEMORY || c.bound == GQLA_BOUND_COMPUTE);
}

gqla_cost_report session_cost(gqla_session* s, int32_t batch, int64_t context, int32_t q_len) {
    gqla_workload w{sizeof(gqla_workload), batch, context, q_len};
    gqla_cost_report rep;
    std::memset(&rep, 0xcd, sizeof rep);  // nothing may be left unwritten
    rep.struct_size = sizeof rep;
    require_ok(gqla_session_predict_cost(s, &w, &rep), "gqla_session_predict_cost");
    return rep;
}

// DeepSeek-V3's attention shape (128 heads, MLA), a small pool.
gqla_config v3_config() {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, GQLA_KIND_GQLA) == GQLA_OK);
    cfg.num_heads = 128;
    cfg.num_kv_heads = 128;
    cfg.latent_dim = 512;
    cfg.nope_dim = 128;
    cfg.rope_dim = 64;
    cfg.value_dim = 128;
    cfg.cache_dtype = GQLA_DTYPE_BF16;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.max_tokens = 4096;
    cfg.max_sequences = 8;
    cfg.max_batch = 8;
    cfg.max_q_len = 4;
    cfg.path = GQLA_PATH_ABSORB;
    return cfg;
}

}  // namespace

TEST_CASE("session cost reports fill the transient form and the call's choice") {
    {  // GQLA: a transient cost, and call_chosen the faster of absorb and transient
        gqla_config cfg = v3_config();
        gqla_session* s = nullptr;
        require_ok(gqla_session_create(&cfg, &s), "gqla_session_create");
        struct Shape {
            int32_t batch;
            int64_t context;
            int32_t q_len;
        };
        for (Shape w : {Shape{1, 4096, 4096}, Shape{64, 4096, 1}, Shape{1, 300, 7}, Shape{4, 2000, 64}}) {
            CAPTURE(w.batch);
            CAPTURE(w.context);
            CAPTURE(w.q_len);
            const gqla_cost_report rep = session_cost(s, w.batch, w.context, w.q_len);
            CHECK(filled(rep.absorb));
            CHECK(filled(rep.transient));
            CHECK((rep.call_chosen == GQLA_PATH_ABSORB || rep.call_chosen == GQLA_PATH_GQA_TRANSIENT));
            // "The fastest form the cost model predicts" (clear winners only).
            const double a = rep.absorb.time_s, t = rep.transient.time_s;
            if (a < 0.99 * t) CHECK(rep.call_chosen == GQLA_PATH_ABSORB);
            if (t < 0.99 * a) CHECK(rep.call_chosen == GQLA_PATH_GQA_TRANSIENT);
        }
        // A whole 4096-token prompt: about 3x fewer FLOPs than absorb (gqla.h).
        const gqla_cost_report prefill = session_cost(s, 1, 4096, 4096);
        CHECK(prefill.transient.flops * 2 < prefill.absorb.flops);
        // Decoding 64 sequences: the transient form up-projects every cached
        // token of every sequence for one query each, absorb reads the latent.
        const gqla_cost_report decode = session_cost(s, 64, 4096, 1);
        CHECK(decode.transient.time_s > decode.absorb.time_s);
        CHECK(decode.call_chosen == GQLA_PATH_ABSORB);

        // gqla_predict_cost (no session) fills them too.
        gqla_workload w{sizeof(gqla_workload), 1, 4096, 4096};
        gqla_cost_report pure;
        std::memset(&pure, 0xcd, sizeof pure);
        pure.struct_size = sizeof pure;
        require_ok(gqla_predict_cost(&cfg, nullptr, &w, &pure), "gqla_predict_cost");
        CHECK(filled(pure.transient));
        CHECK((pure.call_chosen == GQLA_PATH_ABSORB || pure.call_chosen == GQLA_PATH_GQA_TRANSIENT));

        // A caller built against 1.0 passes the 1.0 size: accepted, and
        // nothing past it is written.
        gqla_cost_report old;
        std::memset(&old, 0xcd, sizeof old);
        old.struct_size = offsetof(gqla_cost_report, transient);
        {
            INFO(gqla_last_error_message());
            CHECK(gqla_session_predict_cost(s, &w, &old) == GQLA_OK);
        }
        CHECK(old.struct_size == offsetof(gqla_cost_report, transient));
        CHECK(old.absorb.time_s > 0);
        const unsigned char* tail =
            reinterpret_cast<const unsigned char*>(&old) + offsetof(gqla_cost_report, transient);
        bool untouched = true;
        for (size_t i = 0; i < sizeof old - offsetof(gqla_cost_report, transient); ++i) untouched &= tail[i] == 0xcd;
        CHECK(untouched);
        gqla_session_destroy(s);
    }
    {  // GQA kind: no transient form, and the call runs GQA
        gqla_config cfg = abi::odd_gqa_config(3);
        Harness h(cfg);
        const gqla_cost_report rep = session_cost(h.session(), 8, 1000, 16);
        CHECK(filled(rep.gqa));
        CHECK(all_zero(rep.transient));
        CHECK(rep.call_chosen == GQLA_PATH_GQA);
    }
}

// Each sequence of a ragged call has its own causal limit: a NaN key (GQA: k
// of every KV head; GQLA: the latent c, a key and a value of every head) at
// position 17 of a 20-token sequence attended with 6 queries (positions
// 14..19) reaches queries 3..5 only, never queries 0..2 (which may not see
// it, so it must not be multiplied in even with a zero weight) nor the
// decoding sequence beside it. The reference follows the same rule, so
// outputs must be NaN exactly where it has NaN and match it elsewhere. On
// every CPU kernel table the host has (the masking is the kernels').
TEST_CASE("a NaN in a chunk's causal tail reaches only the queries that see it") {
    const gqla_path forms[] = {GQLA_PATH_GQA, GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
    nonfinite::for_each_isa([&](const char*) {
        for (int kind_form = 0; kind_form < 4; ++kind_form) {
            gqla_config cfg = kind_form == 0 ? abi::odd_gqa_config(3) : light_gqla_config(3);
            cfg.path = kind_form == 0 ? GQLA_PATH_AUTO : kind_form == 3 ? GQLA_PATH_GQA : GQLA_PATH_ABSORB;
            CAPTURE(path_label(forms[kind_form]));
            Harness h(cfg);
            const gqla_seq_id s = h.add(), t = h.add();
            h.append_ok(s, 0, 17);
            {
                std::vector<double> a = h.rng().normal(static_cast<size_t>(h.a_cols()));
                std::vector<double> b = h.rng().normal(static_cast<size_t>(h.b_cols()));
                for (double& x : a) x = static_cast<float>(x);
                for (double& x : b) x = static_cast<float>(x);
                a[static_cast<size_t>(h.a_cols()) / 2] = std::nan("");
                abi::Buffer ab = abi::make_poisoned(GQLA_DTYPE_F32, a.size());
                abi::Buffer bb = abi::make_poisoned(GQLA_DTYPE_F32, b.size());
                for (size_t i = 0; i < a.size(); ++i) ab.set(i, a[i]);
                for (size_t i = 0; i < b.size(); ++i) bb.set(i, b[i]);
                if (kind_form == 0)  // a NaN in the key of every KV head
                    for (int64_t g = 0; g < cfg.num_kv_heads; ++g)
                        ab.set(static_cast<size_t>(g * cfg.head_dim), std::nan(""));
                gqla_tensor ta = abi::view(ab, h.a_shape(1)), tb = abi::view(bb, h.b_shape(1));
                require_ok(gqla_append(h.session(), 0, s, &ta, &tb), "gqla_append (NaN row)");
                h.record(s, 0, abi::values_of(ab), abi::values_of(bb));
            }
            h.append_ok(s, 0, 2);
            h.append_ok(t, 0, 9);

            Request rq;
            rq.seqs = Ids{t, s};
            rq.q_lens = {1, 6};
            rq.path = forms[kind_form];
            rq.check = false;  // compared below, NaN by NaN
            abi::Buffer q = random_rows(h, 7);
            const Result r = attend(h, rq, q);
            INFO("gqla_attention: " << gqla_last_error_message());
            INFO(abi::replay_hint(r.seed));
            REQUIRE(r.status == GQLA_OK);

            const int64_t H = cfg.num_heads, Dq = h.q_dim(), Dv = h.out_dim();
            std::vector<double> qv(static_cast<size_t>(7 * H * Dq)), ro(static_cast<size_t>(7 * H * Dv)),
                rl(static_cast<size_t>(7 * H));
            for (size_t i = 0; i < qv.size(); ++i) qv[i] = q.get(i);
            h.reference(t, 0, 1, qv.data(), ro.data(), rl.data());
            h.reference(s, 0, 6, qv.data() + H * Dq, ro.data() + H * Dv, rl.data() + H);
            // Per (query row, head): NaN exactly where the reference is, close elsewhere.
            std::vector<double> got_f, ref_f;
            int nan_rows = 0, pattern_mismatch = 0;
            for (int64_t row = 0; row < 7 * H; ++row) {
                const bool ref_nan = std::isnan(rl[static_cast<size_t>(row)]);
                nan_rows += ref_nan;
                bool got_nan = std::isnan(r.lse[static_cast<size_t>(row)]);
                for (int64_t k = 0; k < Dv; ++k) {
                    const double g = r.o[static_cast<size_t>(row * Dv + k)], e = ro[static_cast<size_t>(row * Dv + k)];
                    got_nan = got_nan && std::isnan(g);
                    if (!ref_nan) {
                        got_f.push_back(g);
                        ref_f.push_back(e);
                    }
                }
                if (got_nan != ref_nan) ++pattern_mismatch;
            }
            CHECK(nan_rows == 3 * H);  // queries 3..5 of the chunk, every head
            CHECK(pattern_mismatch == 0);
            CHECK(gqla::ref::rel_l2(got_f.data(), ref_f.data(), got_f.size()) <= h.tol());
        }
    });
}

// ---------------------------------------------------------------- bad input

namespace {

// Leave a known message behind so that a call which fails without setting its
// own message cannot pass on a stale one.
std::string plant_marker_message() {
    gqla_config_default(nullptr, GQLA_KIND_GQA);
    return gqla_last_error_message();
}

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

}  // namespace

// EXPECT_ATTENTION_ERROR(session, call, expected status, {accepted argument names}):
// the status, a fresh message naming the argument, no output written and
// the session's stats unchanged.
#define EXPECT_ATTENTION_ERROR(h, c, expected, ...)                                                   \
    do {                                                                                              \
        const gqla_stats before_ = (h).stats();                                                       \
        const std::string marker_ = plant_marker_message();                                           \
        const gqla_status got_ = gqla_attention((h).session(), &(c).args);                            \
        const std::string msg_ = gqla_last_error_message();                                           \
        INFO("-> " << gqla_status_string(got_) << "\n  message: \"" << msg_ << "\"");                \
        CHECK(got_ == (expected));                                                                    \
        CHECK(msg_ != marker_);                                                                       \
        CHECK(abi::names_argument(msg_, std::vector<std::string> __VA_ARGS__));                       \
        CHECK((c).untouched());                                                                       \
        CHECK(same_stats(before_, (h).stats()));                                                      \
    } while (0)

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
            INFO(gqla_last_error_message());
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
            INFO("gqla_decode: " << gqla_status_string(st) << " \"" << msg << "\"");
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
        INFO(gqla_last_error_message());
        CHECK((st == GQLA_ERR_INVALID_STATE || st == GQLA_ERR_INVALID_ARGUMENT));
        CHECK(c.untouched());
    }
}

// ------------------------------------------------------------------ config

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
        INFO("gqla_attention: " << gqla_last_error_message());
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
        check_rows(twin, 1, static_cast<int32_t>(head));            // the chunk's first rows
        check_rows(prompt, 1 + L - 50, 50);                         // its last rows
    }
}

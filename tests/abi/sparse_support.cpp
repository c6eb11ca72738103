// SPDX-License-Identifier: Apache-2.0
#include "sparse_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp8_support.hpp"
#include "tests/reference/reference.hpp"
#include "tests/reference/reference_sparse.hpp"

namespace sparse_test {

std::string form_label(Form f) {
    switch (f) {
        case Form::Gqa:
            return "GQA kind";
        case Form::Absorb:
            return "GQLA absorb";
        case Form::GqlaGqaKept:
            return "GQLA GQA path, kept expanded cache";
        case Form::Transient:
            return "GQLA GQA_TRANSIENT";
    }
    return "?";
}

namespace {

gqla_tensor f32_tensor(std::vector<float>& data, std::vector<int64_t> shape) {
    gqla_tensor t;
    REQUIRE(gqla_tensor_init(&t, data.data(), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()), shape.data()) ==
            GQLA_OK);
    return t;
}

std::vector<float> to_f32(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

gqla_device_type g_device = GQLA_DEVICE_CPU;

}  // namespace

void use_device(gqla_device_type device) { g_device = device; }
gqla_device_type device() { return g_device; }

Fixture::Fixture(const gqla_config& cfg, Form form) : cfg_(cfg), form_(form), pick_(rng_.seed() ^ 0x5eedu) {
    cfg_.device = g_device;
    if (form == Form::GqlaGqaKept)
        cfg_.path = GQLA_PATH_GQA;
    else if (form != Form::Gqa)
        cfg_.path = GQLA_PATH_ABSORB;
    INFO("gqla_session_create: " << std::string(gqla_last_error_message()));
    REQUIRE(gqla_session_create(&cfg_, &s_) == GQLA_OK);
    REQUIRE(gqla_session_get_config(s_, &cfg_) == GQLA_OK);
    if (cfg_.kind != GQLA_KIND_GQLA) return;
    const int64_t rows = int64_t(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
    // Weights with standard deviation 1/sqrt(r), rounded to the io dtype (f32).
    w_ = rng_.normal(static_cast<size_t>(rows * cfg_.latent_dim), 1.0 / std::sqrt(double(cfg_.latent_dim)));
    for (double& x : w_) x = static_cast<float>(x);
    std::vector<float> w = to_f32(w_);
    gqla_tensor wt = f32_tensor(w, {rows, cfg_.latent_dim});
    INFO("gqla_set_weights: " << std::string(gqla_last_error_message()));
    REQUIRE(gqla_set_weights(s_, 0, &wt) == GQLA_OK);
}

Fixture::~Fixture() { gqla_session_destroy(s_); }

int64_t Fixture::a_cols() const {
    return cfg_.kind == GQLA_KIND_GQA ? int64_t(cfg_.num_kv_heads) * cfg_.head_dim : cfg_.latent_dim;
}
int64_t Fixture::b_cols() const {
    return cfg_.kind == GQLA_KIND_GQA ? int64_t(cfg_.num_kv_heads) * cfg_.value_dim : cfg_.rope_dim;
}
int32_t Fixture::q_dim() const { return cfg_.kind == GQLA_KIND_GQA ? cfg_.head_dim : cfg_.nope_dim + cfg_.rope_dim; }

gqla_path Fixture::request() const {
    switch (form_) {
        case Form::Gqa:
            return GQLA_PATH_GQA;
        case Form::Absorb:
            return GQLA_PATH_ABSORB;
        case Form::GqlaGqaKept:
            return GQLA_PATH_GQA;
        case Form::Transient:
            return GQLA_PATH_GQA_TRANSIENT;
    }
    return GQLA_PATH_AUTO;
}

Seq& Fixture::add(int64_t length) {
    Seq s;
    REQUIRE(gqla_sequence_add(s_, &s.id) == GQLA_OK);
    int64_t done = 0, chunk = 5;
    while (done < length) {
        const int64_t n = std::min(chunk, length - done);
        chunk = chunk * 3 + 1;  // uneven chunks that cross pages
        std::vector<double> a = rng_.normal(static_cast<size_t>(n * a_cols()));
        std::vector<double> b = rng_.normal(static_cast<size_t>(n * b_cols()));
        std::vector<float> af = to_f32(a), bf = to_f32(b);
        std::vector<int64_t> as{n}, bs{n};
        if (cfg_.kind == GQLA_KIND_GQA) {
            as = {n, cfg_.num_kv_heads, cfg_.head_dim};
            bs = {n, cfg_.num_kv_heads, cfg_.value_dim};
        } else {
            as = {n, cfg_.latent_dim};
            bs = {n, cfg_.rope_dim};
        }
        gqla_tensor at = f32_tensor(af, as), bt = f32_tensor(bf, bs);
        INFO("gqla_append: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_append(s_, 0, s.id, &at, &bt) == GQLA_OK);
        if (cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3) {
            store_fp8(af, bf, n, &s);
        } else {
            for (float x : af) s.a.push_back(abi::as_stored(x, cfg_.cache_dtype));
            for (float x : bf) s.b.push_back(abi::as_stored(x, cfg_.cache_dtype));
        }
        done += n;
    }
    s.length = length;
    seqs_.push_back(std::move(s));
    return seqs_.back();
}

// An 8-bit cache's rows as stored (docs/fp8-cache.md): GQA K and V scaled
// per (token, KV head); the latent per (token, 128-element block), kr bf16.
void Fixture::store_fp8(const std::vector<float>& af, const std::vector<float>& bf, int64_t n, Seq* s) const {
    const size_t a0 = s->a.size(), b0 = s->b.size();
    s->a.insert(s->a.end(), af.begin(), af.end());
    s->b.insert(s->b.end(), bf.begin(), bf.end());
    double* a = s->a.data() + a0;
    double* b = s->b.data() + b0;
    if (cfg_.kind == GQLA_KIND_GQA) {
        fp8test::fake_quantize_blocks(a, static_cast<int>(af.size()), cfg_.head_dim, a);
        fp8test::fake_quantize_blocks(b, static_cast<int>(bf.size()), cfg_.value_dim, b);
        return;
    }
    const int r = cfg_.latent_dim;
    for (int64_t j = 0; j < n; ++j) fp8test::fake_quantize_blocks(a + j * r, r, 128, a + j * r);
    for (size_t i = 0; i < bf.size(); ++i) b[i] = abi::as_stored(b[i], GQLA_DTYPE_BF16);
}

std::vector<int32_t> Fixture::lists(const Seq& s, int32_t n, int32_t topk, int32_t empty_query) {
    const int64_t L = s.length, P = cfg_.page_size;
    std::vector<int32_t> out(static_cast<size_t>(n) * topk);
    auto below = [&](int64_t hi) { return static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, hi)(pick_)); };
    for (int32_t k = 0; k < n; ++k) {
        const int64_t limit = L - n + k;  // last visible position
        int32_t* row = &out[static_cast<size_t>(k) * topk];
        int64_t boundary = P - 1;  // page boundaries in turn: P-1, P, 2P-1, 2P, ...
        for (int32_t t = 0; t < topk; ++t) {
            const int kind = below(9);
            int32_t v;
            if (k == empty_query) {
                // Only entries that must be skipped.
                const int32_t skipped[4] = {-1, static_cast<int32_t>(L + below(50)), -7 - below(1000),
                                            std::numeric_limits<int32_t>::max()};
                v = limit + 1 < L && below(1) ? static_cast<int32_t>(limit + 1 + below(L - limit - 2))
                                              : skipped[below(3)];
            } else if (kind <= 3) {
                v = below(limit);  // visible
            } else if (kind == 4 && boundary <= limit) {
                v = static_cast<int32_t>(boundary);
                boundary += (boundary % P == P - 1) ? 1 : P - 1;
            } else if (kind == 5 && t > 0) {
                v = row[below(t - 1)];  // a repeat of an earlier entry
            } else if (kind == 6) {
                v = -1;
            } else if (kind == 7 && limit + 1 < L) {
                v = static_cast<int32_t>(limit + 1 + below(L - limit - 2));  // the causal tail
            } else if (kind == 8) {
                v = below(1) ? static_cast<int32_t>(L + below(100)) : -2 - below(100);  // out of range
            } else {
                v = below(limit);
            }
            row[t] = v;
        }
    }
    return out;
}

CallCheck Fixture::call(const std::vector<int>& which, const std::vector<int32_t>& q_lens, int32_t topk,
                        const std::vector<int32_t>& idx_in, bool ragged, bool as_3d) {
    const int32_t B = static_cast<int32_t>(which.size());
    const int32_t H = cfg_.num_heads, Dq = q_dim(), Dv = cfg_.value_dim;
    int64_t N = 0;
    for (int32_t n : q_lens) N += n;
    std::vector<double> qd = rng_.normal(static_cast<size_t>(N * H * Dq));
    for (double& x : qd) x = static_cast<float>(x);
    std::vector<float> q = to_f32(qd);
    std::vector<float> o(static_cast<size_t>(N * H * Dv), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(static_cast<size_t>(N * H), std::numeric_limits<float>::quiet_NaN());
    std::vector<int32_t> idx = idx_in;
    std::vector<gqla_seq_id> ids;
    for (int w : which) ids.push_back(seqs_[static_cast<size_t>(w)].id);
    const int32_t s_q = q_lens[0];
    gqla_tensor qt, ot, lt, it;
    if (ragged) {
        qt = f32_tensor(q, {N, H, Dq});
        ot = f32_tensor(o, {N, H, Dv});
        lt = f32_tensor(lse, {N, H});
    } else {
        qt = f32_tensor(q, {B, s_q, H, Dq});
        ot = f32_tensor(o, {B, s_q, H, Dv});
        lt = f32_tensor(lse, {B, s_q, H});
    }
    std::vector<int64_t> ishape = as_3d ? std::vector<int64_t>{B, s_q, topk} : std::vector<int64_t>{N, topk};
    REQUIRE(gqla_tensor_init(&it, idx.data(), GQLA_DTYPE_I32, static_cast<int32_t>(ishape.size()), ishape.data()) ==
            GQLA_OK);
    gqla_attention_args args;
    REQUIRE(gqla_attention_args_default(&args) == GQLA_OK);
    CallCheck res;
    args.layer = 0;
    args.batch = B;
    args.seqs = ids.data();
    args.q_lens = ragged ? q_lens.data() : nullptr;
    args.q = &qt;
    args.o = &ot;
    args.lse = &lt;
    args.path = request();
    args.path_taken = &res.taken;
    args.indices = &it;
    res.status = runner_ ? runner_(s_, args) : gqla_attention(s_, &args);
    if (res.status != GQLA_OK) return res;

    // The reference per sequence, on the rows as stored.
    std::vector<double> ref_o(o.size()), ref_l(lse.size());
    int64_t row = 0;
    for (int32_t b = 0; b < B; ++b) {
        const Seq& s = seqs_[static_cast<size_t>(which[static_cast<size_t>(b)])];
        const int32_t n = q_lens[static_cast<size_t>(b)];
        const double* qb = qd.data() + row * H * Dq;
        const int32_t* ib = idx.data() + row * topk;
        double* ob = ref_o.data() + row * H * Dv;
        double* lb = ref_l.data() + row * H;
        const double scale = cfg_.softmax_scale;
        if (cfg_.kind == GQLA_KIND_GQA) {
            gqla::ref::gqa_sparse_decode(H, cfg_.num_kv_heads, cfg_.head_dim, Dv, s.length, n, scale, qb, s.a.data(),
                                         s.b.data(), ib, topk, ob, lb);
        } else if (form_ == Form::GqlaGqaKept && cfg_.cache_dtype == GQLA_DTYPE_FP8_E4M3) {
            std::vector<double> K, V;
            fp8test::expanded_cache_as_stored(cfg_.num_kv_heads, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim, Dv,
                                              s.length, w_.data(), s.a.data(), s.b.data(), &K, &V);
            gqla::ref::gqa_sparse_decode(H, cfg_.num_kv_heads, cfg_.nope_dim + cfg_.rope_dim, Dv, s.length, n, scale,
                                         qb, K.data(), V.data(), ib, topk, ob, lb);
        } else
            gqla::ref::gqla_sparse_decode(H, cfg_.num_kv_heads, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim, Dv,
                                          s.length, n, scale, qb, w_.data(), s.a.data(), s.b.data(), ib, topk, ob, lb);
        row += n;
    }
    // Rows without a visible entry must be exactly o = 0, lse = -inf; the
    // others are compared as one set.
    std::vector<double> got_o, want_o, got_l, want_l;
    for (int64_t r = 0; r < N * H; ++r) {
        if (std::isinf(ref_l[static_cast<size_t>(r)])) {
            ++res.empty_rows;
            bool zero = lse[static_cast<size_t>(r)] == -std::numeric_limits<float>::infinity();
            for (int e = 0; e < Dv; ++e) zero = zero && o[static_cast<size_t>(r * Dv + e)] == 0.0f;
            res.empty_rows_ok = res.empty_rows_ok && zero;
            continue;
        }
        for (int e = 0; e < Dv; ++e) {
            got_o.push_back(o[static_cast<size_t>(r * Dv + e)]);
            want_o.push_back(ref_o[static_cast<size_t>(r * Dv + e)]);
        }
        got_l.push_back(lse[static_cast<size_t>(r)]);
        want_l.push_back(ref_l[static_cast<size_t>(r)]);
    }
    res.o_err = gqla::ref::rel_l2(got_o.data(), want_o.data(), got_o.size());
    res.lse_err = abi::lse_error(got_l.data(), want_l.data(), got_l.size());
    return res;
}

}  // namespace sparse_test

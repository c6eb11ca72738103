// SPDX-License-Identifier: Apache-2.0
// Fp8Session: see fp8_support.hpp.
#include "fp8_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace fp8test {

namespace {

// Bytes of n elements of an io dtype, filled from doubles.
std::vector<unsigned char> io_bytes(const std::vector<double>& v, gqla_dtype t) {
    std::vector<unsigned char> out(v.size() * gqla::dtype_size(t));
    for (size_t i = 0; i < v.size(); ++i) gqla::store_from_f32(out.data(), t, i, static_cast<float>(v[i]));
    return out;
}

gqla_tensor tensor(void* data, gqla_dtype t, std::vector<int64_t> shape) {
    gqla_tensor x;
    REQUIRE(gqla_tensor_init(&x, data, t, static_cast<int32_t>(shape.size()), shape.data()) == GQLA_OK);
    return x;
}

double bf16_of(double x) { return gqla::bf16_to_f32(gqla::f32_to_bf16(static_cast<float>(x))); }

}  // namespace

namespace {
gqla_device_type g_device = GQLA_DEVICE_CPU;
}  // namespace

gqla_device_type test_device() { return g_device; }
void use_device(gqla_device_type device) { g_device = device; }

Fp8Session::Fp8Session(gqla_config cfg, uint64_t seed, bool outlier) : gen_(seed), outlier_(outlier) {
    cfg.cache_dtype = GQLA_DTYPE_FP8_E4M3;
    cfg.device = g_device;
    if (cfg.num_threads == 0) cfg.num_threads = 2;
    INFO("gqla_session_create: " << std::string(gqla_last_error_message()));
    REQUIRE(gqla_session_create(&cfg, &s_) == GQLA_OK);
    cfg_.struct_size = sizeof cfg_;
    REQUIRE(gqla_session_get_config(s_, &cfg_) == GQLA_OK);
    if (!gqla()) return;
    const int64_t rows = int64_t(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        std::vector<double> w = random(size_t(rows * cfg_.latent_dim), 1.0 / std::sqrt(double(cfg_.latent_dim)));
        // With an outlier channel the latent carries it (what its per-block
        // scales are for) and the weights undo it, as trained up-projections
        // of a normed latent do: with plain random weights the one channel
        // would dominate every up-projected key, the keys of a sequence would
        // be nearly collinear and a short sequence's softmax would turn on a
        // scalar, so 2% of rounding in the keys could move a head's output by
        // 25% (docs/fp8-cache.md: the conditioning of the GQA path).
        if (outlier_)
            for (int64_t i = 0; i < rows; ++i) w[size_t(i * cfg_.latent_dim + kOutlierChannel)] /= kOutlierFactor;
        std::vector<float> wf(w.begin(), w.end());
        for (size_t i = 0; i < w.size(); ++i) w[i] = wf[i];
        gqla_tensor t = tensor(wf.data(), GQLA_DTYPE_F32, {rows, cfg_.latent_dim});
        INFO("gqla_set_weights: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_set_weights(s_, l, &t) == GQLA_OK);
        weights_[l] = std::move(w);
    }
}

Fp8Session::~Fp8Session() { gqla_session_destroy(s_); }

std::vector<double> Fp8Session::random(size_t n, double stddev) {
    std::normal_distribution<double> dist(0.0, stddev);
    std::vector<double> v(n);
    for (double& x : v) x = dist(gen_);
    return v;
}

int64_t Fp8Session::a_cols() const { return gqla() ? cfg_.latent_dim : int64_t(cfg_.num_kv_heads) * cfg_.head_dim; }
int64_t Fp8Session::b_cols() const { return gqla() ? cfg_.rope_dim : int64_t(cfg_.num_kv_heads) * cfg_.value_dim; }

gqla_seq_id Fp8Session::add() {
    gqla_seq_id id = 0;
    REQUIRE(gqla_sequence_add(s_, &id) == GQLA_OK);
    return id;
}

gqla_seq_id Fp8Session::fork(gqla_seq_id parent) {
    gqla_seq_id id = 0;
    INFO("gqla_sequence_fork: " << std::string(gqla_last_error_message()));
    REQUIRE(gqla_sequence_fork(s_, parent, &id) == GQLA_OK);
    for (int32_t l = 0; l < cfg_.num_layers; ++l)
        if (rows_.count({parent, l})) rows_[{id, l}] = rows_[{parent, l}];
    return id;
}

void Fp8Session::append(gqla_seq_id seq, int64_t n, double magnitude) {
    for (int32_t l = 0; l < cfg_.num_layers; ++l) {
        std::vector<double> a = random(size_t(n * a_cols()), magnitude);
        std::vector<double> b = random(size_t(n * b_cols()), gqla() ? 1.0 : magnitude);
        if (outlier_) {
            // One channel of every row group kOutlierFactor x the others.
            const int64_t wa = gqla() ? cfg_.latent_dim : cfg_.head_dim;
            for (size_t i = kOutlierChannel; i < a.size(); i += size_t(wa)) a[i] *= kOutlierFactor;
            if (!gqla())
                for (size_t i = kOutlierChannel; i < b.size(); i += size_t(cfg_.value_dim)) b[i] *= kOutlierFactor;
        }
        for (double& x : a) x = through_io(x, cfg_.io_dtype);
        for (double& x : b) x = through_io(x, cfg_.io_dtype);
        std::vector<unsigned char> ab = io_bytes(a, cfg_.io_dtype), bb = io_bytes(b, cfg_.io_dtype);
        gqla_tensor at = gqla() ? tensor(ab.data(), cfg_.io_dtype, {n, cfg_.latent_dim})
                                : tensor(ab.data(), cfg_.io_dtype, {n, cfg_.num_kv_heads, cfg_.head_dim});
        gqla_tensor bt = gqla() ? tensor(bb.data(), cfg_.io_dtype, {n, cfg_.rope_dim})
                                : tensor(bb.data(), cfg_.io_dtype, {n, cfg_.num_kv_heads, cfg_.value_dim});
        INFO("gqla_append: " << std::string(gqla_last_error_message()));
        REQUIRE(gqla_append(s_, l, seq, &at, &bt) == GQLA_OK);
        Rows& r = rows_[{seq, l}];
        r.a.insert(r.a.end(), a.begin(), a.end());
        r.b.insert(r.b.end(), b.begin(), b.end());
    }
}

void Fp8Session::reference(const Rows& rows, int64_t L, int n, const double* q, bool stored, gqla_path path,
                           int32_t layer, double* o, double* lse) const {
    const int H = cfg_.num_heads, G = cfg_.num_kv_heads;
    const double scale = cfg_.softmax_scale;
    std::vector<double> a(rows.a.begin(), rows.a.begin() + L * a_cols());
    std::vector<double> b(rows.b.begin(), rows.b.begin() + L * b_cols());
    if (!gqla()) {
        if (stored) {
            fake_quantize_blocks(a.data(), int(a.size()), cfg_.head_dim, a.data());
            fake_quantize_blocks(b.data(), int(b.size()), cfg_.value_dim, b.data());
        }
        gqla::ref::gqa_decode(H, G, cfg_.head_dim, cfg_.value_dim, L, n, scale, q, a.data(), b.data(), o, lse);
        return;
    }
    const int r = cfg_.latent_dim, dc = cfg_.nope_dim, dr = cfg_.rope_dim, dv = cfg_.value_dim;
    const std::vector<double>& W = weights_.at(layer);
    if (stored) {
        for (int64_t j = 0; j < L; ++j) fake_quantize_blocks(a.data() + j * r, r, 128, a.data() + j * r);
        for (double& x : b) x = bf16_of(x);
    }
    if (!stored || path != GQLA_PATH_GQA) {
        gqla::ref::gqla_decode(H, G, r, dc, dr, dv, L, n, scale, q, W.data(), a.data(), b.data(), o, lse);
        return;
    }
    // The kept expanded cache as stored.
    std::vector<double> K, V;
    expanded_cache_as_stored(G, r, dc, dr, dv, L, W.data(), a.data(), b.data(), &K, &V);
    gqla::ref::gqa_decode(H, G, dc + dr, dv, L, n, scale, q, K.data(), V.data(), o, lse);
}

Errors Fp8Session::attend(const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens, gqla_path path,
                          bool ragged, int32_t layer) {
    const int H = cfg_.num_heads;
    const int64_t Dq = gqla() ? cfg_.nope_dim + cfg_.rope_dim : cfg_.head_dim, Dv = cfg_.value_dim;
    const int B = static_cast<int>(seqs.size());
    std::vector<int32_t> lens(seqs.size());
    for (int i = 0; i < B; ++i) lens[size_t(i)] = ragged ? q_lens[size_t(i)] : q_lens[0];
    int64_t N = 0;
    for (int32_t n : lens) N += n;
    std::vector<double> q = random(size_t(N * H * Dq), 1.0);
    for (double& x : q) x = through_io(x, cfg_.io_dtype);
    std::vector<unsigned char> qb = io_bytes(q, cfg_.io_dtype);
    std::vector<unsigned char> ob(size_t(N * H * Dv) * gqla::dtype_size(cfg_.io_dtype), 0xff);  // NaN
    std::vector<float> lse(size_t(N * H), std::numeric_limits<float>::quiet_NaN());
    gqla_tensor qt, ot, lt;
    if (ragged) {
        qt = tensor(qb.data(), cfg_.io_dtype, {N, H, Dq});
        ot = tensor(ob.data(), cfg_.io_dtype, {N, H, Dv});
        lt = tensor(lse.data(), GQLA_DTYPE_F32, {N, H});
    } else {
        qt = tensor(qb.data(), cfg_.io_dtype, {B, lens[0], H, Dq});
        ot = tensor(ob.data(), cfg_.io_dtype, {B, lens[0], H, Dv});
        lt = tensor(lse.data(), GQLA_DTYPE_F32, {B, lens[0], H});
    }
    gqla_attention_args args;
    REQUIRE(gqla_attention_args_default(&args) == GQLA_OK);
    args.layer = layer;
    args.batch = B;
    args.seqs = seqs.data();
    args.q_lens = ragged ? lens.data() : nullptr;
    args.q = &qt;
    args.o = &ot;
    args.lse = &lt;
    args.path = path;
    gqla_path taken = GQLA_PATH_AUTO;
    args.path_taken = &taken;
    INFO("gqla_attention: " << std::string(gqla_last_error_message()));
    REQUIRE(gqla_attention(s_, &args) == GQLA_OK);
    const gqla_path form = gqla() ? taken : GQLA_PATH_GQA;

    std::vector<double> o(size_t(N * H * Dv)), ref_s(o.size()), ref_g(o.size()), lse_s(size_t(N * H)),
        lse_g(lse_s.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = gqla::load_as_f32(ob.data(), cfg_.io_dtype, i);
    int64_t row = 0;
    for (int i = 0; i < B; ++i) {
        const Rows& rows = rows_.at({seqs[size_t(i)], layer});
        const int64_t L = int64_t(rows.a.size()) / a_cols();
        const int n = lens[size_t(i)];
        const double* qs = q.data() + row * H * Dq;
        reference(rows, L, n, qs, true, form, layer, ref_s.data() + row * H * Dv, lse_s.data() + row * H);
        reference(rows, L, n, qs, false, form, layer, ref_g.data() + row * H * Dv, lse_g.data() + row * H);
        row += n;
    }
    Errors e;
    e.stored = gqla::ref::rel_l2(o.data(), ref_s.data(), o.size());
    e.given = gqla::ref::rel_l2(o.data(), ref_g.data(), o.size());
    // lse_error of docs/numerics.md: ||lse - ref|| / ||max(1, |ref|)||.
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < lse_s.size(); ++i) {
        if (!std::isfinite(lse[i])) return e.lse = std::numeric_limits<double>::infinity(), e;
        num += (double(lse[i]) - lse_s[i]) * (double(lse[i]) - lse_s[i]);
        den += std::max(1.0, std::fabs(lse_s[i])) * std::max(1.0, std::fabs(lse_s[i]));
    }
    e.lse = std::sqrt(num / den);
    return e;
}

}  // namespace fp8test

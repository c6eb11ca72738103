// SPDX-License-Identifier: Apache-2.0
// Harness implementation: data generation, layouts, the host mirror and the
// comparison with the float64 reference.
#include "harness.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"

namespace abi {

// ------------------------------------------------------------------ data

Rng::Rng() : seed_(test_seed()) { gen_.seed(seed_); }

std::vector<double> Rng::normal(size_t n, double stddev) {
    std::normal_distribution<double> dist(0.0, stddev);
    std::vector<double> v(n);
    for (double& x : v) x = dist(gen_);
    return v;
}

size_t Buffer::size() const { return bytes.size() / gqla::dtype_size(dtype); }

double Buffer::get(size_t i) const { return gqla::load_as_f32(bytes.data(), dtype, i); }

void Buffer::set(size_t i, double v) { gqla::store_from_f32(bytes.data(), dtype, i, static_cast<float>(v)); }

Buffer make_input(Rng& rng, gqla_dtype dtype, size_t n, double stddev) {
    Buffer b = make_poisoned(dtype, n);
    auto v = rng.normal(n, stddev);
    for (size_t i = 0; i < n; ++i) b.set(i, v[i]);
    return b;
}

Buffer make_poisoned(gqla_dtype dtype, size_t n) {
    Buffer b;
    b.dtype = dtype;
    b.bytes.resize(n * gqla::dtype_size(dtype));
    for (size_t i = 0; i < n; ++i) b.set(i, std::nan(""));
    return b;
}

std::vector<double> values_of(const Buffer& b) {
    std::vector<double> v(b.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = b.get(i);
    return v;
}

gqla_tensor view(Buffer& b, std::vector<int64_t> shape, std::vector<int64_t> strides) {
    gqla_tensor t;
    REQUIRE(gqla_tensor_init(&t, b.data(), b.dtype, static_cast<int32_t>(shape.size()), shape.data()) == GQLA_OK);
    for (size_t i = 0; i < strides.size(); ++i) t.strides[i] = strides[i];
    return t;
}

double as_stored(double x, gqla_dtype cache_dtype) {
    unsigned char cell[4];
    gqla::store_from_f32(cell, cache_dtype, 0, static_cast<float>(x));
    return gqla::load_as_f32(cell, cache_dtype, 0);
}

namespace {

double dtype_bound(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return 1e-5;
        case GQLA_DTYPE_F16:
            return 2e-3;
        case GQLA_DTYPE_BF16:
        case GQLA_DTYPE_FP8_E4M3:  // against the rows as stored: the bf16 bound (docs/fp8-cache.md)
            return 1e-2;
        default:
            break;
    }
    return 0.0;
}

}  // namespace

double tolerance(gqla_dtype cache_dtype, gqla_dtype io_dtype) {
    return std::max(dtype_bound(cache_dtype), dtype_bound(io_dtype));
}

double quantization_tolerance(gqla_dtype cache_dtype, gqla_dtype io_dtype) {
    const double rounding = cache_dtype == GQLA_DTYPE_F32 ? 1.0 : 2.0;
    return std::max(rounding * dtype_bound(cache_dtype), dtype_bound(io_dtype));
}

double lse_error(const double* lse, const double* ref, size_t n) {
    double diff = 0.0, floor = 0.0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(lse[i])) return std::numeric_limits<double>::infinity();
        const double scale = std::max(1.0, std::abs(ref[i]));
        diff += (lse[i] - ref[i]) * (lse[i] - ref[i]);
        floor += scale * scale;
    }
    return n ? std::sqrt(diff / floor) : 0.0;
}

std::string dtype_label(gqla_dtype t) { return gqla::dtype_name(t); }

std::string path_label(gqla_path p) {
    switch (p) {
        case GQLA_PATH_AUTO:
            return "auto";
        case GQLA_PATH_GQA:
            return "gqa";
        case GQLA_PATH_ABSORB:
            return "absorb";
        case GQLA_PATH_GQA_TRANSIENT:
            return "gqa_transient";
    }
    return "?";
}

gqla_config odd_gqla_config(int32_t groups) {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, GQLA_KIND_GQLA) == GQLA_OK);
    cfg.num_heads = 6;
    cfg.num_kv_heads = groups;
    cfg.latent_dim = 384;
    cfg.nope_dim = 96;
    cfg.rope_dim = 32;
    cfg.value_dim = 80;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.io_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.page_size = 16;
    cfg.max_tokens = 1 << 14;
    cfg.max_sequences = 64;
    cfg.max_batch = 32;
    cfg.max_q_len = 8;
    cfg.path = GQLA_PATH_ABSORB;
    return cfg;
}

gqla_config deepseek_latent_config(int32_t heads, int32_t groups) {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, GQLA_KIND_GQLA) == GQLA_OK);
    cfg.num_heads = heads;
    cfg.num_kv_heads = groups;
    cfg.latent_dim = 512;
    cfg.nope_dim = 128;
    cfg.rope_dim = 64;
    cfg.value_dim = 128;
    return cfg;
}

gqla_config odd_gqa_config(int32_t groups) {
    gqla_config cfg;
    REQUIRE(gqla_config_default(&cfg, GQLA_KIND_GQA) == GQLA_OK);
    cfg.num_heads = 6;
    cfg.num_kv_heads = groups;
    cfg.head_dim = 72;
    cfg.value_dim = 40;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_F32;
    cfg.io_dtype = GQLA_DTYPE_F32;
    cfg.device = GQLA_DEVICE_CPU;
    cfg.page_size = 16;
    cfg.max_tokens = 1 << 14;
    cfg.max_sequences = 64;
    cfg.max_batch = 32;
    cfg.max_q_len = 8;
    return cfg;
}

bool names_argument(const std::string& message, const std::vector<std::string>& names) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (const auto& name : names) {
        for (size_t pos = message.find(name); pos != std::string::npos; pos = message.find(name, pos + 1)) {
            const bool left = pos == 0 || !ident(message[pos - 1]);
            const size_t end = pos + name.size();
            const bool right = end == message.size() || !ident(message[end]);
            if (left && right) return true;
        }
    }
    return false;
}

void require_ok(gqla_status st, const char* call) {
    INFO(std::string(call) << ": " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
}

std::string plant_marker_message() {
    gqla_config_default(nullptr, GQLA_KIND_GQA);
    return gqla_last_error_message();
}

void expect_refusal(const char* file, int line, const char* call, gqla_status got, gqla_status expected,
                    const std::string& marker, const std::string& msg, const std::vector<std::string>& names,
                    const std::vector<RefusalCheck>& more) {
    std::string failed;
    if (got != expected) failed += std::string("\n  expected status ") + gqla_status_string(expected);
    if (msg == marker) failed += "\n  the call set no message of its own";
    if (!names_argument(msg, names)) {
        failed += "\n  the message names none of:";
        for (const std::string& n : names) failed += " " + n;
    }
    for (const RefusalCheck& c : more)
        if (!c.ok) failed += std::string("\n  ") + c.failure;
    if (failed.empty()) return;
    const std::string report =
        std::string(call) + "\n  -> " + gqla_status_string(got) + "\n  message: \"" + msg + "\"" + failed;
    ADD_FAIL_CHECK_AT(file, line, report);
}

gqla_path active_path(gqla_session* s, gqla_path* requested) {
    gqla_path active = GQLA_PATH_AUTO, req = GQLA_PATH_AUTO;
    require_ok(gqla_get_path(s, &active, &req), "gqla_get_path");
    if (requested) *requested = req;
    return active;
}

// ------------------------------------------------------------------ layouts

std::vector<int64_t> strides_for(const std::vector<int64_t>& shape, Layout layout) {
    const size_t n = shape.size();
    std::vector<int64_t> s(n, 1);
    switch (layout) {
        case Layout::Contiguous:
            for (size_t i = n - 1; i-- > 0;) s[i] = s[i + 1] * shape[i + 1];
            break;
        case Layout::Padded:
            for (size_t i = n - 1; i-- > 0;) s[i] = s[i + 1] * shape[i + 1] + static_cast<int64_t>(2 * (n - i) + 1);
            break;
        case Layout::Transposed: {
            // memory order: dim1, dim0, dim2, ... (swap the two outermost)
            for (size_t i = n - 1; i-- > 2;) s[i] = s[i + 1] * shape[i + 1];
            const int64_t inner = n > 2 ? s[2] * shape[2] : 1;
            s[0] = inner;
            s[1] = inner * shape[0];
            break;
        }
    }
    return s;
}

// ------------------------------------------------------------------ harness

Harness::Harness(const gqla_config& cfg, bool set_all_weights) : cfg_(cfg) {
    INFO(replay_hint(rng_.seed()));
    const gqla_status st = gqla_session_create(&cfg_, &session_);
    INFO("gqla_session_create: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    REQUIRE(session_ != nullptr);
    if (is_gqla() && set_all_weights)
        for (int32_t layer = 0; layer < cfg_.num_layers; ++layer) set_weights(layer);
}

Harness::~Harness() { gqla_session_destroy(session_); }

int64_t Harness::a_cols() const {
    return is_gqla() ? cfg_.latent_dim : static_cast<int64_t>(cfg_.num_kv_heads) * cfg_.head_dim;
}
int64_t Harness::b_cols() const {
    if (is_gqla()) return cfg_.rope_dim;
    const int32_t dv = cfg_.value_dim ? cfg_.value_dim : cfg_.head_dim;
    return static_cast<int64_t>(cfg_.num_kv_heads) * dv;
}
std::vector<int64_t> Harness::a_shape(int64_t n) const {
    if (is_gqla()) return {n, cfg_.latent_dim};
    return {n, cfg_.num_kv_heads, cfg_.head_dim};
}
std::vector<int64_t> Harness::b_shape(int64_t n) const {
    if (is_gqla()) return {n, cfg_.rope_dim};
    return {n, cfg_.num_kv_heads, cfg_.value_dim ? cfg_.value_dim : cfg_.head_dim};
}
int32_t Harness::q_dim() const { return is_gqla() ? cfg_.nope_dim + cfg_.rope_dim : cfg_.head_dim; }
int32_t Harness::out_dim() const {
    if (is_gqla()) return cfg_.value_dim;
    return cfg_.value_dim ? cfg_.value_dim : cfg_.head_dim;
}

void Harness::set_weights(int32_t layer) {
    const int64_t rows = static_cast<int64_t>(cfg_.num_kv_heads) * (cfg_.nope_dim + cfg_.value_dim);
    // stddev 1/sqrt(r) keeps expanded keys/values O(1), so scores are O(1).
    Buffer w = make_input(rng_, GQLA_DTYPE_F32, static_cast<size_t>(rows * cfg_.latent_dim),
                          1.0 / std::sqrt(static_cast<double>(cfg_.latent_dim)));
    gqla_tensor t = view(w, {rows, cfg_.latent_dim});
    const gqla_status st = gqla_set_weights(session_, layer, &t);
    INFO("gqla_set_weights: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    weights_[layer] = values_of(w);
}

gqla_seq_id Harness::add() {
    gqla_seq_id id = -1;
    const gqla_status st = gqla_sequence_add(session_, &id);
    INFO("gqla_sequence_add: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    live_.push_back(id);
    for (int32_t layer = 0; layer < cfg_.num_layers; ++layer) rows_[{id, layer}] = Rows{};
    return id;
}

gqla_status Harness::append(gqla_seq_id seq, int32_t layer, int64_t n) {
    Buffer a = make_input(rng_, cfg_.io_dtype, static_cast<size_t>(n * a_cols()));
    Buffer b = make_input(rng_, cfg_.io_dtype, static_cast<size_t>(n * b_cols()));
    gqla_tensor ta = view(a, a_shape(n)), tb = view(b, b_shape(n));
    const gqla_status st = gqla_append(session_, layer, seq, &ta, &tb);
    if (st == GQLA_OK) record(seq, layer, values_of(a), values_of(b));
    return st;
}

void Harness::append_ok(gqla_seq_id seq, int32_t layer, int64_t n) {
    const gqla_status st = append(seq, layer, n);
    INFO("gqla_append of " << n << " tokens: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
}

gqla_status Harness::append_batch(int32_t layer, const std::vector<gqla_seq_id>& seqs,
                                  const std::vector<int64_t>& counts) {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    Buffer a = make_input(rng_, cfg_.io_dtype, static_cast<size_t>(total * a_cols()));
    Buffer b = make_input(rng_, cfg_.io_dtype, static_cast<size_t>(total * b_cols()));
    gqla_tensor ta = view(a, a_shape(total)), tb = view(b, b_shape(total));
    const gqla_status st =
        gqla_append_batch(session_, layer, static_cast<int32_t>(seqs.size()), seqs.data(), counts.data(), &ta, &tb);
    if (st != GQLA_OK) return st;
    auto av = values_of(a), bv = values_of(b);
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        record(seqs[i], layer,
               std::vector<double>(av.begin() + row * a_cols(), av.begin() + (row + counts[i]) * a_cols()),
               std::vector<double>(bv.begin() + row * b_cols(), bv.begin() + (row + counts[i]) * b_cols()));
        row += counts[i];
    }
    return st;
}

void Harness::record(gqla_seq_id seq, int32_t layer, const std::vector<double>& a, const std::vector<double>& b) {
    Rows& r = rows_.at({seq, layer});
    r.a_given.insert(r.a_given.end(), a.begin(), a.end());
    r.b_given.insert(r.b_given.end(), b.begin(), b.end());
    for (double x : a) r.a.push_back(as_stored(x, cfg_.cache_dtype));
    for (double x : b) r.b.push_back(as_stored(x, cfg_.cache_dtype));
}

gqla_seq_id Harness::fork(gqla_seq_id parent) {
    gqla_seq_id child = -1;
    const gqla_status st = gqla_sequence_fork(session_, parent, &child);
    INFO("gqla_sequence_fork: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    live_.push_back(child);
    for (int32_t layer = 0; layer < cfg_.num_layers; ++layer) rows_[{child, layer}] = rows_.at({parent, layer});
    return child;
}

void Harness::release(gqla_seq_id seq) {
    const gqla_status st = gqla_sequence_release(session_, seq);
    INFO("gqla_sequence_release: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    live_.erase(std::remove(live_.begin(), live_.end(), seq), live_.end());
    for (int32_t layer = 0; layer < cfg_.num_layers; ++layer) rows_.erase({seq, layer});
}

int64_t Harness::mirrored_length(gqla_seq_id seq, int32_t layer) const {
    return static_cast<int64_t>(rows_.at({seq, layer}).a.size()) / a_cols();
}

int64_t Harness::length(gqla_seq_id seq, int32_t layer) const {
    int64_t n = -1;
    const gqla_status st = gqla_sequence_length(session_, seq, layer, &n);
    INFO("gqla_sequence_length: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    return n;
}

Buffer Harness::random_q(int32_t batch, int32_t s_q) {
    return make_input(rng_, cfg_.io_dtype, static_cast<size_t>(batch) * s_q * cfg_.num_heads * q_dim());
}

void Harness::reference(gqla_seq_id seq, int32_t layer, int32_t s_q, const double* qv, double* o, double* lse,
                        bool stored) const {
    const Rows& rows = rows_.at({seq, layer});
    const std::vector<double>& a = stored ? rows.a : rows.a_given;
    const std::vector<double>& b = stored ? rows.b : rows.b_given;
    const int64_t L = mirrored_length(seq, layer);
    const int H = cfg_.num_heads, G = cfg_.num_kv_heads;
    if (is_gqla()) {
        const double scale =
            cfg_.softmax_scale != 0.0f ? cfg_.softmax_scale : 1.0 / std::sqrt(double(cfg_.nope_dim + cfg_.rope_dim));
        gqla::ref::gqla_decode(H, G, cfg_.latent_dim, cfg_.nope_dim, cfg_.rope_dim, cfg_.value_dim, L, s_q, scale, qv,
                               weights_.at(layer).data(), a.data(), b.data(), o, lse);
    } else {
        const double scale = cfg_.softmax_scale != 0.0f ? cfg_.softmax_scale : 1.0 / std::sqrt(double(cfg_.head_dim));
        gqla::ref::gqa_decode(H, G, cfg_.head_dim, out_dim(), L, s_q, scale, qv, a.data(), b.data(), o, lse);
    }
}

DecodeResult Harness::decode(int32_t layer, const std::vector<gqla_seq_id>& seqs, int32_t s_q, Layout layout,
                             bool with_lse) {
    Buffer q = random_q(static_cast<int32_t>(seqs.size()), s_q);
    return decode_with(layer, seqs, s_q, q, layout, with_lse);
}

DecodeResult Harness::decode_with(int32_t layer, const std::vector<gqla_seq_id>& seqs, int32_t s_q, Buffer& q_dense,
                                  Layout layout, bool with_lse) {
    const int64_t B = static_cast<int64_t>(seqs.size()), H = cfg_.num_heads;
    const std::vector<int64_t> q_shape{B, s_q, H, q_dim()}, o_shape{B, s_q, H, out_dim()}, l_shape{B, s_q, H};
    const auto q_str = strides_for(q_shape, layout), o_str = strides_for(o_shape, layout),
               l_str = strides_for(l_shape, layout);
    const auto q_off = offsets_of(q_shape, q_str), o_off = offsets_of(o_shape, o_str),
               l_off = offsets_of(l_shape, l_str);

    // q: gaps NaN (reading them would poison the result); o/lse: NaN where
    // written, a sentinel in the gaps.
    Buffer q = make_poisoned(cfg_.io_dtype, span_of(q_shape, q_str));
    for (size_t i = 0; i < q_off.size(); ++i) q.set(q_off[i], q_dense.get(i));
    Buffer o = make_poisoned(cfg_.io_dtype, span_of(o_shape, o_str));
    Buffer lse = make_poisoned(GQLA_DTYPE_F32, span_of(l_shape, l_str));
    for (size_t i = 0; i < o.size(); ++i) o.set(i, kGapSentinel);
    for (size_t off : o_off) o.set(off, std::nan(""));
    for (size_t i = 0; i < lse.size(); ++i) lse.set(i, kGapSentinel);
    for (size_t off : l_off) lse.set(off, std::nan(""));

    gqla_tensor tq = view(q, q_shape, q_str), to = view(o, o_shape, o_str), tl = view(lse, l_shape, l_str);
    DecodeResult res;
    res.seed = rng_.seed();
    res.given_tol = quantization_tolerance(cfg_.cache_dtype, cfg_.io_dtype);
    res.status = gqla_decode(session_, layer, static_cast<int32_t>(B), seqs.data(), &tq, &to, with_lse ? &tl : nullptr);
    if (res.status != GQLA_OK) return res;

    // Gaps untouched?
    std::vector<char> is_elem(o.size(), 0), is_lse(lse.size(), 0);
    for (size_t off : o_off) is_elem[off] = 1;
    for (size_t off : l_off) is_lse[off] = 1;
    for (size_t i = 0; i < o.size(); ++i)
        if (!is_elem[i] && o.get(i) != kGapSentinel) res.gaps_untouched = false;
    for (size_t i = 0; i < lse.size(); ++i)
        if (!is_lse[i] && lse.get(i) != kGapSentinel && with_lse) res.gaps_untouched = false;
    if (!with_lse)
        for (size_t off : l_off)
            if (!std::isnan(lse.get(off))) res.gaps_untouched = false;  // lse NULL: nothing written

    res.o.resize(o_off.size());
    for (size_t i = 0; i < o_off.size(); ++i) res.o[i] = o.get(o_off[i]);

    const size_t q_per_seq = static_cast<size_t>(s_q * H * q_dim()),
                 o_per_seq = static_cast<size_t>(s_q * H * out_dim()), l_per_seq = static_cast<size_t>(s_q * H);
    // q_dense holds q as gqla reads it (rounded to the io dtype).
    for (int64_t b = 0; b < B; ++b) {
        std::vector<double> qv(q_per_seq), ref_o(o_per_seq), ref_l(l_per_seq), got_l(l_per_seq);
        for (size_t i = 0; i < q_per_seq; ++i) qv[i] = q_dense.get(b * q_per_seq + i);
        if (with_lse)
            for (size_t i = 0; i < l_per_seq; ++i) got_l[i] = lse.get(l_off[b * l_per_seq + i]);
        const double* got_o = res.o.data() + b * o_per_seq;
        auto compare = [&](bool stored, double& o_err, double& lse_err) {
            reference(seqs[b], layer, s_q, qv.data(), ref_o.data(), ref_l.data(), stored);
            o_err = std::max(o_err, gqla::ref::rel_l2(got_o, ref_o.data(), o_per_seq));
            if (with_lse) lse_err = std::max(lse_err, lse_error(got_l.data(), ref_l.data(), l_per_seq));
        };
        compare(true, res.o_err, res.lse_err);
        if (cache_rounds_inputs()) compare(false, res.o_err_given, res.lse_err_given);
    }
    if (!cache_rounds_inputs()) {
        res.o_err_given = res.o_err;
        res.lse_err_given = res.lse_err;
    }
    return res;
}

gqla_stats Harness::stats() const {
    gqla_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    const gqla_status st = gqla_session_stats(session_, &s);
    INFO("gqla_session_stats: " << std::string(gqla_last_error_message()));
    REQUIRE(st == GQLA_OK);
    return s;
}

// Elements spanned by a strided view.
size_t span_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
    int64_t last = 0;
    for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * strides[i];
    return static_cast<size_t>(last + 1);
}

// Offsets of every element of the view, in row-major logical order.
std::vector<size_t> offsets_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
    std::vector<size_t> out{0};
    for (size_t d = 0; d < shape.size(); ++d) {
        std::vector<size_t> next;
        next.reserve(out.size() * static_cast<size_t>(shape[d]));
        for (size_t base : out)
            for (int64_t i = 0; i < shape[d]; ++i) next.push_back(base + static_cast<size_t>(i * strides[d]));
        out.swap(next);
    }
    return out;
}

std::vector<gqla_seq_id> sequences_of_lengths(Harness& h, const std::vector<int64_t>& lengths, int32_t layer) {
    std::vector<gqla_seq_id> seqs;
    for (int64_t len : lengths) {
        gqla_seq_id s = h.add();
        for (int64_t done = 0, chunk = 1; done < len; chunk = chunk * 3 + 1) {
            const int64_t n = std::min(chunk, len - done);
            h.append_ok(s, layer, n);
            done += n;
        }
        REQUIRE(h.length(s, layer) == len);
        seqs.push_back(s);
    }
    return seqs;
}

}  // namespace abi

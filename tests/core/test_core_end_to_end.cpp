// SPDX-License-Identifier: Apache-2.0
// End to end through the C entry points on the built-in CPU backend: paged
// appends (single, batched, forked), decode of GQA and of both GQLA paths,
// each compared with the float64 reference on the same inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <random>
#include <vector>

#include "tests/reference/reference.hpp"
#include "tests/core/test_checks.hpp"
#include "gqla/gqla.h"

namespace {

struct Rng {
    uint64_t seed = core_test::test_seed();
    std::mt19937_64 gen{seed};
    std::vector<float> normal(size_t n, double stddev = 1.0) {
        std::normal_distribution<double> d(0.0, stddev);
        std::vector<float> v(n);
        for (float& x : v) x = static_cast<float>(d(gen));
        return v;
    }
};

gqla_tensor tensor(std::vector<float>& data, std::vector<int64_t> shape) {
    gqla_tensor t;
    REQUIRE(gqla_tensor_init(&t, data.data(), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()), shape.data()) ==
            GQLA_OK);
    return t;
}

#define GQLA_OK_OR_FAIL(call) REQUIRE_MESSAGE((call) == GQLA_OK, std::string(gqla_last_error_message()))

// Host copy of what one sequence holds in one layer: rows of `a` and `b`.
struct Mirror {
    std::vector<double> a, b;
    int64_t length = 0;
    void add(const float* pa, size_t na, const float* pb, size_t nb, int64_t rows) {
        a.insert(a.end(), pa, pa + na);
        b.insert(b.end(), pb, pb + nb);
        length += rows;
    }
};

struct Dims {
    gqla_kind kind;
    int H, G, D, Dv;       // GQA
    int r, d_c, d_r, d_v;  // GQLA
    int a_width() const { return kind == GQLA_KIND_GQA ? G * D : r; }
    int b_width() const { return kind == GQLA_KIND_GQA ? G * Dv : d_r; }
    int q_width() const { return kind == GQLA_KIND_GQA ? D : d_c + d_r; }
    int o_width() const { return kind == GQLA_KIND_GQA ? Dv : d_v; }
    std::vector<int64_t> a_shape(int64_t n) const {
        return kind == GQLA_KIND_GQA ? std::vector<int64_t>{n, G, D} : std::vector<int64_t>{n, r};
    }
    std::vector<int64_t> b_shape(int64_t n) const {
        return kind == GQLA_KIND_GQA ? std::vector<int64_t>{n, G, Dv} : std::vector<int64_t>{n, d_r};
    }
};

class Harness {
public:
    Harness(const Dims& d, int page_size, gqla_path path, int layers = 2) : d_(d) {
        gqla_config c;
        GQLA_OK_OR_FAIL(gqla_config_default(&c, d.kind));
        c.num_heads = d.H;
        c.num_kv_heads = d.G;
        if (d.kind == GQLA_KIND_GQA) {
            c.head_dim = d.D;
            c.value_dim = d.Dv;
        } else {
            c.latent_dim = d.r;
            c.nope_dim = d.d_c;
            c.rope_dim = d.d_r;
            c.value_dim = d.d_v;
        }
        c.num_layers = layers;
        c.cache_dtype = GQLA_DTYPE_F32;
        c.page_size = page_size;
        c.max_tokens = 4096;
        c.device = GQLA_DEVICE_CPU;
        c.path = path;
        c.num_threads = 2;
        GQLA_OK_OR_FAIL(gqla_session_create(&c, &s_));
        gqla_config got;
        got.struct_size = sizeof(got);
        GQLA_OK_OR_FAIL(gqla_session_get_config(s_, &got));
        scale_ = got.softmax_scale;
        layers_ = layers;
        if (d.kind == GQLA_KIND_GQLA) {
            for (int l = 0; l < layers; ++l) {
                std::vector<float> w = rng_.normal(size_t(d.G) * (d.d_c + d.d_v) * d.r, 1.0 / std::sqrt(d.r));
                gqla_tensor tw = tensor(w, {int64_t(d.G) * (d.d_c + d.d_v), d.r});
                GQLA_OK_OR_FAIL(gqla_set_weights(s_, l, &tw));
                weights_.emplace_back(w.begin(), w.end());
            }
        }
    }
    ~Harness() { gqla_session_destroy(s_); }

    gqla_session* session() { return s_; }
    std::string replay_hint() const { return core_test::replay_hint(rng_.seed); }
    std::vector<float> random(size_t n) { return rng_.normal(n); }

    // New W_UKV for a layer that may already hold tokens.
    void replace_weights(int layer) {
        std::vector<float> w = rng_.normal(size_t(d_.G) * (d_.d_c + d_.d_v) * d_.r, 1.0 / std::sqrt(d_.r));
        gqla_tensor tw = tensor(w, {int64_t(d_.G) * (d_.d_c + d_.d_v), d_.r});
        GQLA_OK_OR_FAIL(gqla_set_weights(s_, layer, &tw));
        weights_[size_t(layer)].assign(w.begin(), w.end());
    }

    gqla_seq_id add() {
        gqla_seq_id id;
        GQLA_OK_OR_FAIL(gqla_sequence_add(s_, &id));
        mirrors_[id].resize(size_t(layers_));
        return id;
    }
    gqla_seq_id fork(gqla_seq_id parent) {
        gqla_seq_id id;
        GQLA_OK_OR_FAIL(gqla_sequence_fork(s_, parent, &id));
        mirrors_[id] = mirrors_[parent];
        return id;
    }

    // Append counts[i] fresh rows to seqs[i] in `layer` in one call.
    void append(int layer, std::vector<gqla_seq_id> seqs, std::vector<int64_t> counts) {
        int64_t n = 0;
        for (int64_t c : counts) n += c;
        std::vector<float> a = rng_.normal(size_t(n) * d_.a_width()), b = rng_.normal(size_t(n) * d_.b_width());
        gqla_tensor ta = tensor(a, d_.a_shape(n)), tb = tensor(b, d_.b_shape(n));
        if (seqs.size() == 1)
            GQLA_OK_OR_FAIL(gqla_append(s_, layer, seqs[0], &ta, &tb));
        else
            GQLA_OK_OR_FAIL(gqla_append_batch(s_, layer, int32_t(seqs.size()), seqs.data(), counts.data(), &ta, &tb));
        int64_t row = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            mirrors_[seqs[i]][size_t(layer)].add(a.data() + row * d_.a_width(), size_t(counts[i] * d_.a_width()),
                                                 b.data() + row * d_.b_width(), size_t(counts[i] * d_.b_width()),
                                                 counts[i]);
            row += counts[i];
        }
    }

    // Decode and return the largest error over sequences: rel-L2 of o and
    // core_test::lse_error of lse.
    double decode_error(int layer, std::vector<gqla_seq_id> seqs, int s_q, std::vector<float>* o_out = nullptr) {
        const int B = int(seqs.size()), H = d_.H;
        std::vector<float> q = rng_.normal(size_t(B) * s_q * H * d_.q_width());
        std::vector<float> o(size_t(B) * s_q * H * d_.o_width(), std::numeric_limits<float>::quiet_NaN());
        std::vector<float> lse(size_t(B) * s_q * H, std::numeric_limits<float>::quiet_NaN());
        gqla_tensor tq = tensor(q, {B, s_q, H, d_.q_width()}), to = tensor(o, {B, s_q, H, d_.o_width()});
        gqla_tensor tl = tensor(lse, {B, s_q, H});
        GQLA_OK_OR_FAIL(gqla_decode(s_, layer, B, seqs.data(), &tq, &to, &tl));
        double worst = 0;
        for (int b = 0; b < B; ++b) {
            const Mirror& m = mirrors_[seqs[size_t(b)]][size_t(layer)];
            std::vector<double> qd(q.begin() + size_t(b) * s_q * H * d_.q_width(),
                                   q.begin() + size_t(b + 1) * s_q * H * d_.q_width());
            std::vector<double> ref_o(size_t(s_q) * H * d_.o_width()), ref_lse(size_t(s_q) * H);
            if (d_.kind == GQLA_KIND_GQA)
                gqla::ref::gqa_decode(H, d_.G, d_.D, d_.Dv, m.length, s_q, scale_, qd.data(), m.a.data(), m.b.data(),
                                      ref_o.data(), ref_lse.data());
            else
                gqla::ref::gqla_decode(H, d_.G, d_.r, d_.d_c, d_.d_r, d_.d_v, m.length, s_q, scale_, qd.data(),
                                       weights_[size_t(layer)].data(), m.a.data(), m.b.data(), ref_o.data(),
                                       ref_lse.data());
            worst = std::max(
                worst, gqla::ref::rel_l2(o.data() + size_t(b) * s_q * H * d_.o_width(), ref_o.data(), ref_o.size()));
            worst =
                std::max(worst, core_test::lse_error(lse.data() + size_t(b) * s_q * H, ref_lse.data(), ref_lse.size()));
        }
        if (o_out) *o_out = o;
        return worst;
    }

private:
    Dims d_;
    Rng rng_;
    gqla_session* s_ = nullptr;
    double scale_ = 0;
    int layers_ = 0;
    std::vector<std::vector<double>> weights_;
    std::map<gqla_seq_id, std::vector<Mirror>> mirrors_;
};

// Sequences of lengths 1, page-1, page+1 and a few pages, some sharing a
// forked prefix; layer 1 gets different lengths than layer 0.
std::vector<gqla_seq_id> populate(Harness& h, int page) {
    gqla_seq_id a = h.add(), b = h.add(), c = h.add();
    h.append(0, {a, b, c}, {1, page - 1, page + 1});
    h.append(1, {a, b, c}, {3, page, 2});
    h.append(0, {c}, {2 * page + 3});
    gqla_seq_id d = h.fork(c);    // shares c's pages, partial last page included
    h.append(0, {d, c}, {2, 1});  // both write into the shared partial page
    h.append(1, {d}, {5});
    return {a, b, c, d};
}

}  // namespace

TEST_CASE("end to end: GQA decode matches the float64 reference") {
    Dims d{GQLA_KIND_GQA, 6, 3, 40, 24, 0, 0, 0, 0};
    const int page = 5;
    Harness h(d, page, GQLA_PATH_AUTO);
    INFO(h.replay_hint());
    std::vector<gqla_seq_id> seqs = populate(h, page);
    CHECK(h.decode_error(0, seqs, 1) <= 1e-5);  // a has 1 token
    std::vector<gqla_seq_id> long_ones = {seqs[1], seqs[2], seqs[3]};
    for (int s_q = 2; s_q <= 4; ++s_q) {
        CHECK(h.decode_error(0, long_ones, s_q) <= 1e-5);
        CHECK(h.decode_error(1, {seqs[2], seqs[3]}, std::min(s_q - 1, 2)) <= 1e-5);  // c has 2 tokens in layer 1
    }
}

TEST_CASE("end to end: both GQLA paths match the reference and each other") {
    Dims d{GQLA_KIND_GQLA, 6, 2, 0, 0, 384, 96, 32, 80};
    const int page = 7;
    Harness h(d, page, GQLA_PATH_ABSORB);
    INFO(h.replay_hint());
    std::vector<gqla_seq_id> seqs = populate(h, page);
    gqla_path active;
    GQLA_OK_OR_FAIL(gqla_get_path(h.session(), &active, nullptr));
    CHECK(active == GQLA_PATH_ABSORB);
    CHECK(h.decode_error(0, seqs, 1) <= 1e-5);
    CHECK(h.decode_error(1, {seqs[1], seqs[3]}, 2) <= 1e-5);

    GQLA_OK_OR_FAIL(gqla_select_path(h.session(), GQLA_PATH_GQA));  // expands what is cached
    GQLA_OK_OR_FAIL(gqla_get_path(h.session(), &active, nullptr));
    CHECK(active == GQLA_PATH_GQA);
    CHECK(h.decode_error(0, seqs, 1) <= 1e-5);
    CHECK(h.decode_error(1, {seqs[1], seqs[3]}, 2) <= 1e-5);

    // Appends while the GQA path is on also write the expanded cache; a fork
    // and a copy-on-write carry it along.
    gqla_seq_id e = h.fork(seqs[3]);
    h.append(0, {e, seqs[0]}, {4, 9});
    CHECK(h.decode_error(0, {e, seqs[0], seqs[3]}, 3) <= 1e-5);

    // New weights re-expand the layer's cache while the GQA path is on.
    h.replace_weights(0);
    CHECK(h.decode_error(0, {e, seqs[0], seqs[3]}, 3) <= 1e-5);

    GQLA_OK_OR_FAIL(gqla_select_path(h.session(), GQLA_PATH_ABSORB));
    CHECK(h.decode_error(0, {e, seqs[0], seqs[3]}, 3) <= 1e-5);

    gqla_stats st;
    st.struct_size = sizeof(st);
    GQLA_OK_OR_FAIL(gqla_session_stats(h.session(), &st));
    CHECK(st.expanded_bytes == 0);
    CHECK(st.sequences == 5);
}

TEST_CASE("end to end: GQA path and absorb path agree on the same inputs") {
    Dims d{GQLA_KIND_GQLA, 6, 3, 0, 0, 64, 32, 16, 24};
    const int page = 4;
    // One session decodes the same queries on both paths (two sessions would
    // draw different inputs).
    Harness h(d, page, GQLA_PATH_GQA, 1);
    INFO(h.replay_hint());
    gqla_seq_id a = h.add();
    h.append(0, {a}, {37});
    std::vector<float> q = h.random(2 * 6 * 48), o1(2 * 6 * 24), o2(2 * 6 * 24);
    gqla_tensor tq = tensor(q, {1, 2, 6, 48}), t1 = tensor(o1, {1, 2, 6, 24}), t2 = tensor(o2, {1, 2, 6, 24});
    GQLA_OK_OR_FAIL(gqla_decode(h.session(), 0, 1, &a, &tq, &t1, nullptr));
    GQLA_OK_OR_FAIL(gqla_select_path(h.session(), GQLA_PATH_ABSORB));
    GQLA_OK_OR_FAIL(gqla_decode(h.session(), 0, 1, &a, &tq, &t2, nullptr));
    std::vector<double> ref(o1.begin(), o1.end());
    CHECK(gqla::ref::rel_l2(o2.data(), ref.data(), ref.size()) <= 1e-5);
}

TEST_CASE("end to end: C entry points turn errors into statuses with messages") {
    CHECK(gqla_session_create(nullptr, nullptr) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()).find("out: NULL") != std::string::npos);
    gqla_config c;
    GQLA_OK_OR_FAIL(gqla_config_default(&c, GQLA_KIND_GQA));
    c.num_heads = 32;
    c.num_kv_heads = 5;
    c.head_dim = 64;
    CHECK(gqla_config_validate(&c) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(std::string(gqla_last_error_message()) ==
          "gqla_config_validate: config.num_kv_heads: 5 does not divide num_heads 32");
    gqla_session* s = reinterpret_cast<gqla_session*>(1);
    CHECK(gqla_session_create(&c, &s) == GQLA_ERR_INVALID_ARGUMENT);
    CHECK(s == nullptr);
    CHECK(std::string(gqla_status_string(GQLA_ERR_CAPACITY)).find("GQLA_ERR_CAPACITY") == 0);
    CHECK(std::string(gqla_status_string(static_cast<gqla_status>(42))).find("UNKNOWN") != std::string::npos);
    CHECK(gqla_version() == GQLA_VERSION);
    const std::string expected = std::to_string(GQLA_VERSION_MAJOR) + "." + std::to_string(GQLA_VERSION_MINOR) + "." +
                                 std::to_string(GQLA_VERSION_PATCH);
    CHECK(std::string(gqla_version_string()) == expected);
    int32_t n = -1;
    GQLA_OK_OR_FAIL(gqla_device_count(GQLA_DEVICE_CPU, &n));
    CHECK(n == 1);
    GQLA_OK_OR_FAIL(gqla_device_count(GQLA_DEVICE_CUDA, &n));
    CHECK(n == 0);  // no module in this build
    c.num_kv_heads = 8;
    c.device = GQLA_DEVICE_CUDA;
    CHECK(gqla_session_create(&c, &s) == GQLA_ERR_UNSUPPORTED);
    CHECK(std::string(gqla_last_error_message()).find("CUDA requested but unavailable") != std::string::npos);
}

TEST_CASE("end to end: AUTO path stays correct whichever path the cost model picks") {
    Dims d{GQLA_KIND_GQLA, 8, 2, 0, 0, 128, 32, 16, 32};
    const int page = 16;
    Harness h(d, page, GQLA_PATH_AUTO);
    INFO(h.replay_hint());
    std::vector<gqla_seq_id> seqs = populate(h, page);
    h.append(0, {seqs[0]}, {300});
    std::vector<gqla_seq_id> long_ones = {seqs[0], seqs[2], seqs[3]};
    for (int round = 0; round < 3; ++round)
        for (int s_q = 1; s_q <= 4; ++s_q) CHECK(h.decode_error(0, long_ones, s_q) <= 1e-5);
    gqla_path active, requested;
    GQLA_OK_OR_FAIL(gqla_get_path(h.session(), &active, &requested));
    CHECK(requested == GQLA_PATH_AUTO);
    CHECK((active == GQLA_PATH_GQA || active == GQLA_PATH_ABSORB));
}

// SPDX-License-Identifier: Apache-2.0
// The float64 reference checked against facts that do not depend on it:
// closed-form softmax results, the head-to-group mapping, causal masking, and
// the absorb algebra derived independently in the test.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/reference/reference.hpp"
#include "tests/core/test_checks.hpp"

namespace {

std::vector<double> random_vector(std::mt19937_64& rng, size_t n) {
    std::normal_distribution<double> dist(0.0, 1.0);
    std::vector<double> v(n);
    for (double& x : v) x = dist(rng);
    return v;
}

constexpr double kExact = 1e-12;

}  // namespace

TEST_CASE("reference: identical keys give the mean of the visible values") {
    const uint64_t seed = core_test::test_seed();
    INFO(core_test::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const int H = 4, G = 2, D = 5, Dv = 3, s_q = 3;
    const int64_t L = 7;
    auto q = random_vector(rng, static_cast<size_t>(s_q) * H * D);
    auto one_key = random_vector(rng, D);
    std::vector<double> K(static_cast<size_t>(L) * G * D);
    for (int64_t j = 0; j < L; ++j)
        for (int g = 0; g < G; ++g)
            for (int d = 0; d < D; ++d) K[(j * G + g) * D + d] = one_key[d];
    auto V = random_vector(rng, static_cast<size_t>(L) * G * Dv);
    std::vector<double> o(static_cast<size_t>(s_q) * H * Dv, std::nan(""));
    gqla::ref::gqa_decode(H, G, D, Dv, L, s_q, 0.7, q.data(), K.data(), V.data(), o.data(), nullptr);
    for (int i = 0; i < s_q; ++i) {
        const int64_t visible = L - s_q + i + 1;
        for (int h = 0; h < H; ++h) {
            const int g = h / (H / G);
            for (int d = 0; d < Dv; ++d) {
                double mean = 0.0;
                for (int64_t j = 0; j < visible; ++j) mean += V[(j * G + g) * Dv + d];
                mean /= static_cast<double>(visible);
                CHECK(o[(i * H + h) * Dv + d] == doctest::Approx(mean).epsilon(kExact));
            }
        }
    }
}

TEST_CASE("reference: a single token returns its value and its own score as lse") {
    const uint64_t seed = core_test::test_seed();
    INFO(core_test::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const int H = 6, G = 3, D = 4, Dv = 2;
    const double scale = 0.37;
    auto q = random_vector(rng, static_cast<size_t>(H) * D);
    auto K = random_vector(rng, static_cast<size_t>(G) * D);
    auto V = random_vector(rng, static_cast<size_t>(G) * Dv);
    std::vector<double> o(static_cast<size_t>(H) * Dv, std::nan("")), lse(H, std::nan(""));
    gqla::ref::gqa_decode(H, G, D, Dv, 1, 1, scale, q.data(), K.data(), V.data(), o.data(), lse.data());
    for (int h = 0; h < H; ++h) {
        const int g = h / 2;  // H / G = 2: heads 2g and 2g+1 share group g
        double dot = 0.0;
        for (int d = 0; d < D; ++d) dot += q[h * D + d] * K[g * D + d];
        CHECK(lse[h] == doctest::Approx(scale * dot).epsilon(kExact));
        for (int d = 0; d < Dv; ++d) CHECK(o[h * Dv + d] == V[g * Dv + d]);
    }
}

TEST_CASE("reference: known scores give the closed-form softmax and lse") {
    // D = 1, q = 1, scale = 1: scores are the keys themselves, ln1, ln2, ln3,
    // so the weights are 1/6, 2/6, 3/6 and lse = ln 6.
    const double K[3] = {std::log(1.0), std::log(2.0), std::log(3.0)};
    const double V[3] = {10.0, -4.0, 2.5};
    const double q[1] = {1.0};
    double o = std::nan(""), lse = std::nan("");
    gqla::ref::gqa_decode(1, 1, 1, 1, 3, 1, 1.0, q, K, V, &o, &lse);
    CHECK(lse == doctest::Approx(std::log(6.0)).epsilon(kExact));
    CHECK(o == doctest::Approx((10.0 - 8.0 + 7.5) / 6.0).epsilon(kExact));

    // Huge scores must not overflow: shifting all keys by 1000 adds 1000 to lse.
    const double K_big[3] = {K[0] + 1000.0, K[1] + 1000.0, K[2] + 1000.0};
    gqla::ref::gqa_decode(1, 1, 1, 1, 3, 1, 1.0, q, K_big, V, &o, &lse);
    CHECK(lse == doctest::Approx(1000.0 + std::log(6.0)).epsilon(kExact));
    CHECK(o == doctest::Approx(9.5 / 6.0).epsilon(kExact));
}

TEST_CASE("reference: query i ignores cache positions after L - s_q + i") {
    const uint64_t seed = core_test::test_seed();
    INFO(core_test::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const int H = 2, G = 1, D = 3, Dv = 3, s_q = 4;
    const int64_t L = 6;
    auto q = random_vector(rng, static_cast<size_t>(s_q) * H * D);
    auto K = random_vector(rng, static_cast<size_t>(L) * G * D);
    auto V = random_vector(rng, static_cast<size_t>(L) * G * Dv);
    const size_t n_out = static_cast<size_t>(s_q) * H * Dv;
    std::vector<double> base(n_out), changed(n_out);
    gqla::ref::gqa_decode(H, G, D, Dv, L, s_q, 0.5, q.data(), K.data(), V.data(), base.data(), nullptr);
    // Perturb position p: queries with L - s_q + i >= p must change, the others not.
    for (int64_t p = 0; p < L; ++p) {
        auto K2 = K, V2 = V;
        for (int d = 0; d < D; ++d) K2[p * D + d] += 1.0;
        for (int d = 0; d < Dv; ++d) V2[p * Dv + d] += 1.0;
        gqla::ref::gqa_decode(H, G, D, Dv, L, s_q, 0.5, q.data(), K2.data(), V2.data(), changed.data(), nullptr);
        for (int i = 0; i < s_q; ++i) {
            const bool visible = p <= L - s_q + i;
            CAPTURE(p);
            CAPTURE(i);
            for (int k = 0; k < H * Dv; ++k) {
                const double a = base[i * H * Dv + k], b = changed[i * H * Dv + k];
                if (visible)
                    CHECK(a != b);
                else
                    CHECK(a == b);
            }
        }
    }
}

TEST_CASE("reference: GQLA equals GQA over keys expanded by hand and the absorb algebra") {
    const uint64_t seed = core_test::test_seed();
    INFO(core_test::replay_hint(seed));
    std::mt19937_64 rng(seed);
    const int H = 6, G = 3, r = 7, d_c = 4, d_r = 3, d_v = 5, s_q = 3;
    const int64_t L = 9;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_c + d_r));
    const int dq = d_c + d_r;
    auto q = random_vector(rng, static_cast<size_t>(s_q) * H * dq);
    auto W = random_vector(rng, static_cast<size_t>(G) * (d_c + d_v) * r);
    auto C = random_vector(rng, static_cast<size_t>(L) * r);
    auto KR = random_vector(rng, static_cast<size_t>(L) * d_r);
    const size_t n_out = static_cast<size_t>(s_q) * H * d_v;
    std::vector<double> o(n_out, std::nan("")), lse(s_q * H, std::nan(""));
    gqla::ref::gqla_decode(H, G, r, d_c, d_r, d_v, L, s_q, scale, q.data(), W.data(), C.data(), KR.data(), o.data(),
                           lse.data());

    // Expanded keys/values: W viewed as [G, d_c + d_v, r].
    std::vector<double> K(static_cast<size_t>(L) * G * dq), V(static_cast<size_t>(L) * G * d_v);
    auto w = [&](int g, int row, int t) { return W[(static_cast<size_t>(g) * (d_c + d_v) + row) * r + t]; };
    for (int64_t j = 0; j < L; ++j)
        for (int g = 0; g < G; ++g) {
            for (int row = 0; row < d_c + d_v; ++row) {
                double s = 0.0;
                for (int t = 0; t < r; ++t) s += w(g, row, t) * C[j * r + t];
                if (row < d_c)
                    K[(j * G + g) * dq + row] = s;
                else
                    V[(j * G + g) * d_v + row - d_c] = s;
            }
            for (int d = 0; d < d_r; ++d) K[(j * G + g) * dq + d_c + d] = KR[j * d_r + d];
        }
    std::vector<double> o_gqa(n_out), lse_gqa(s_q * H);
    gqla::ref::gqa_decode(H, G, dq, d_v, L, s_q, scale, q.data(), K.data(), V.data(), o_gqa.data(), lse_gqa.data());
    CHECK(gqla::ref::rel_l2(o.data(), o_gqa.data(), n_out) < kExact);
    CHECK(core_test::lse_error(lse.data(), lse_gqa.data(), lse.size()) < kExact);

    // Absorb algebra, written out here: q~ = W_UK^T qc, scores over c and kr,
    // o~ = sum p c, o = W_UV o~.
    std::vector<double> o_abs(n_out);
    const int n_rep = H / G;
    for (int i = 0; i < s_q; ++i)
        for (int h = 0; h < H; ++h) {
            const int g = h / n_rep;
            const double* qh = &q[(static_cast<size_t>(i) * H + h) * dq];
            std::vector<double> qt(r, 0.0);
            for (int row = 0; row < d_c; ++row)
                for (int t = 0; t < r; ++t) qt[t] += w(g, row, t) * qh[row];
            const int64_t visible = L - s_q + i + 1;
            std::vector<double> p(visible);
            double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
            for (int64_t j = 0; j < visible; ++j) {
                double s = 0.0;
                for (int t = 0; t < r; ++t) s += qt[t] * C[j * r + t];
                for (int d = 0; d < d_r; ++d) s += qh[d_c + d] * KR[j * d_r + d];
                p[j] = scale * s;
                mx = std::max(mx, p[j]);
            }
            for (auto& x : p) sum += (x = std::exp(x - mx));
            std::vector<double> ot(r, 0.0);
            for (int64_t j = 0; j < visible; ++j)
                for (int t = 0; t < r; ++t) ot[t] += p[j] / sum * C[j * r + t];
            for (int row = 0; row < d_v; ++row) {
                double s = 0.0;
                for (int t = 0; t < r; ++t) s += w(g, d_c + row, t) * ot[t];
                o_abs[(static_cast<size_t>(i) * H + h) * d_v + row] = s;
            }
        }
    CHECK(gqla::ref::rel_l2(o.data(), o_abs.data(), n_out) < 1e-12);
}

TEST_CASE("reference: GQLA with identity weights reduces to hand-computable attention") {
    // G = H = 1, r = 2, d_c = d_v = 1, d_r = 1, W = [[1,0],[0,1]]:
    // key = [c0 | kr], value = c1.
    const double W[4] = {1, 0, 0, 1};
    const double C[4] = {std::log(2.0), 5.0, 0.0, -1.0};  // token 0: c=(ln2,5), token 1: c=(0,-1)
    const double KR[2] = {0.0, std::log(3.0)};
    const double q[2] = {1.0, 1.0};  // score_j = c0_j + kr_j: ln2, ln3
    double o = std::nan(""), lse = std::nan("");
    gqla::ref::gqla_decode(1, 1, 2, 1, 1, 1, 2, 1, 1.0, q, W, C, KR, &o, &lse);
    CHECK(lse == doctest::Approx(std::log(5.0)).epsilon(kExact));
    CHECK(o == doctest::Approx((2.0 * 5.0 + 3.0 * -1.0) / 5.0).epsilon(kExact));
}

TEST_CASE("reference: rel_l2 of known vectors, NaN and inf are infinitely wrong") {
    const double ref[2] = {3.0, 4.0};
    const double a[2] = {3.0, 4.5};
    CHECK(gqla::ref::rel_l2(a, ref, 2) == doctest::Approx(0.1).epsilon(kExact));
    const float af[2] = {3.0f, 4.5f};
    CHECK(gqla::ref::rel_l2(af, ref, 2) == doctest::Approx(0.1).epsilon(kExact));
    CHECK(gqla::ref::rel_l2(ref, ref, 2) == 0.0);
    const double bad[2] = {std::nan(""), 4.0};
    CHECK(std::isinf(gqla::ref::rel_l2(bad, ref, 2)));
    const float badf[2] = {3.0f, std::numeric_limits<float>::infinity()};
    CHECK(std::isinf(gqla::ref::rel_l2(badf, ref, 2)));
}

// SPDX-License-Identifier: Apache-2.0
// Float64 reference of the decode math. Written straight from the definitions
// so that nothing here shares an idea (blocking, online softmax, absorption)
// with the code it checks: scores, a max-shifted softmax, a weighted sum.
#include "tests/reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gqla::ref {
namespace {

// Softmax-weighted sum over the visible prefix [0, visible) of one head,
// value j at values + j * value_stride. scores[j] are already scaled.
// Writes out[dv] and, when wanted, the lse.
// Positions past the prefix are never read, so whatever they hold (NaN, inf)
// cannot reach the result; inside it, IEEE arithmetic decides: a NaN score or
// value makes the result NaN, a +inf score gives exp(inf - inf) = NaN, a -inf
// score weighs exactly 0.
void attend(const std::vector<double>& scores, int64_t visible, const double* values, size_t value_stride, int dv,
            double* out, double* lse) {
    // std::max(m, NaN) is m: a NaN score stays out of the maximum and turns
    // its weight, and so the result, into NaN below.
    double max_score = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < visible; ++j) max_score = std::max(max_score, scores[j]);
    double denom = 0.0;
    std::vector<double> acc(dv, 0.0);
    for (int64_t j = 0; j < visible; ++j) {
        const double w = std::exp(scores[j] - max_score);
        denom += w;
        const double* v = values + static_cast<size_t>(j) * value_stride;
        for (int d = 0; d < dv; ++d) acc[d] += w * v[d];
    }
    for (int d = 0; d < dv; ++d) out[d] = acc[d] / denom;
    if (lse) *lse = max_score + std::log(denom);
}

}  // namespace

void gqa_decode(int H, int G, int D, int Dv, int64_t L, int s_q, double scale, const double* q, const double* K,
                const double* V, double* o, double* lse) {
    const int n_rep = H / G;
    std::vector<double> scores(static_cast<size_t>(L));
    for (int i = 0; i < s_q; ++i) {
        const int64_t visible = L - s_q + i + 1;  // positions j <= L - s_q + i
        for (int h = 0; h < H; ++h) {
            const int g = h / n_rep;
            const double* qh = q + (static_cast<size_t>(i) * H + h) * D;
            for (int64_t j = 0; j < visible; ++j) {
                const double* k = K + (static_cast<size_t>(j) * G + g) * D;
                scores[j] = scale * dot(qh, k, D);
            }
            double* lse_ih = lse ? lse + static_cast<size_t>(i) * H + h : nullptr;
            attend(scores, visible, V + static_cast<size_t>(g) * Dv, static_cast<size_t>(G) * Dv, Dv,
                   o + (static_cast<size_t>(i) * H + h) * Dv, lse_ih);
        }
    }
}

void gqla_token_rows(int G, int r, int d_c, int d_r, int d_v, const double* W, const double* c, const double* kr,
                     double* keys, double* vals) {
    const int dq = d_c + d_r;
    const size_t rows_per_group = static_cast<size_t>(d_c + d_v);
    for (int g = 0; g < G; ++g) {
        const double* w_uk = W + g * rows_per_group * r;
        const double* w_uv = w_uk + static_cast<size_t>(d_c) * r;
        double* key = keys + static_cast<size_t>(g) * dq;
        double* val = vals + static_cast<size_t>(g) * d_v;
        for (int row = 0; row < d_c; ++row) key[row] = dot(w_uk + static_cast<size_t>(row) * r, c, r);
        for (int d = 0; d < d_r; ++d) key[d_c + d] = kr[d];
        for (int row = 0; row < d_v; ++row) val[row] = dot(w_uv + static_cast<size_t>(row) * r, c, r);
    }
}

void gqla_expanded_rows(int G, int r, int d_c, int d_r, int d_v, int64_t L, const double* W, const double* C,
                        const double* KR, double* keys, double* vals) {
    const size_t dq = static_cast<size_t>(d_c + d_r);
    for (int64_t j = 0; j < L; ++j)
        gqla_token_rows(G, r, d_c, d_r, d_v, W, C + static_cast<size_t>(j) * r, KR + static_cast<size_t>(j) * d_r,
                        keys + static_cast<size_t>(j) * G * dq, vals + static_cast<size_t>(j) * G * d_v);
}

void gqla_decode(int H, int G, int r, int d_c, int d_r, int d_v, int64_t L, int s_q, double scale, const double* q,
                 const double* W, const double* C, const double* KR, double* o, double* lse) {
    const int dq = d_c + d_r;
    // Form every group's key [W_UK[g] c[j] | kr[j]] and value W_UV[g] c[j]
    // explicitly, exactly as the definition reads.
    std::vector<double> keys(static_cast<size_t>(L) * G * dq);
    std::vector<double> vals(static_cast<size_t>(L) * G * d_v);
    gqla_expanded_rows(G, r, d_c, d_r, d_v, L, W, C, KR, keys.data(), vals.data());
    // With keys and values formed, the score is q[h]·key and the rest is GQA.
    gqa_decode(H, G, dq, d_v, L, s_q, scale, q, keys.data(), vals.data(), o, lse);
}

double dot(const double* a, const double* b, int64_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

double rel_l2(const double* a, const double* ref, size_t n) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
        const double d = a[i] - ref[i];
        diff += d * d;
        norm += ref[i] * ref[i];
    }
    if (norm == 0.0) return diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    return std::sqrt(diff) / std::sqrt(norm);
}

double rel_l2(const float* a, const double* ref, size_t n) {
    std::vector<double> widened(a, a + n);
    return rel_l2(widened.data(), ref, n);
}

}  // namespace gqla::ref

// SPDX-License-Identifier: Apache-2.0
// Float64 reference of sparse attention (see reference_sparse.hpp).
#include "tests/reference/reference_sparse.hpp"

#include "tests/reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gqla::ref {
namespace {

// The visible entries of one query's list, in list order, repeats kept.
std::vector<int64_t> visible_entries(const int32_t* list, int topk, int64_t last_visible) {
    std::vector<int64_t> out;
    for (int t = 0; t < topk; ++t)
        if (list[t] >= 0 && list[t] <= last_visible) out.push_back(list[t]);
    return out;
}

// Softmax-weighted sum of one head over the listed keys. key(j) and
// value(j) give the rows of position j.
template <class KeyOf, class ValueOf>
void attend_listed(const std::vector<int64_t>& pos, const double* qh, int dk, int dv, double scale, KeyOf key,
                   ValueOf value, double* out, double* lse) {
    if (pos.empty()) {
        std::fill(out, out + dv, 0.0);
        if (lse) *lse = -std::numeric_limits<double>::infinity();
        return;
    }
    std::vector<double> scores(pos.size());
    double max_score = -std::numeric_limits<double>::infinity();
    for (size_t t = 0; t < pos.size(); ++t) {
        scores[t] = scale * dot(qh, key(pos[t]), dk);
        max_score = std::max(max_score, scores[t]);
    }
    double denom = 0.0;
    std::vector<double> acc(static_cast<size_t>(dv), 0.0);
    for (size_t t = 0; t < pos.size(); ++t) {
        const double w = std::exp(scores[t] - max_score);
        denom += w;
        const double* v = value(pos[t]);
        for (int d = 0; d < dv; ++d) acc[static_cast<size_t>(d)] += w * v[d];
    }
    for (int d = 0; d < dv; ++d) out[d] = acc[static_cast<size_t>(d)] / denom;
    if (lse) *lse = max_score + std::log(denom);
}

}  // namespace

void gqa_sparse_decode(int H, int G, int D, int Dv, int64_t L, int s_q, double scale, const double* q, const double* K,
                       const double* V, const int32_t* idx, int topk, double* o, double* lse) {
    const int n_rep = H / G;
    for (int i = 0; i < s_q; ++i) {
        const std::vector<int64_t> pos = visible_entries(idx + static_cast<size_t>(i) * topk, topk, L - s_q + i);
        for (int h = 0; h < H; ++h) {
            const int g = h / n_rep;
            const size_t row = static_cast<size_t>(i) * H + h;
            attend_listed(
                pos, q + row * D, D, Dv, scale, [&](int64_t j) { return K + (static_cast<size_t>(j) * G + g) * D; },
                [&](int64_t j) { return V + (static_cast<size_t>(j) * G + g) * Dv; }, o + row * Dv,
                lse ? lse + row : nullptr);
        }
    }
}

void gqla_sparse_decode(int H, int G, int r, int d_c, int d_r, int d_v, int64_t L, int s_q, double scale,
                        const double* q, const double* W, const double* C, const double* KR, const int32_t* idx,
                        int topk, double* o, double* lse) {
    const int dq = d_c + d_r;
    // Keys [W_UK[g] c[j] | kr[j]] and values W_UV[g] c[j] of every listed
    // position, formed once per group as the definition reads.
    std::vector<char> listed(static_cast<size_t>(L), 0);
    for (int i = 0; i < s_q; ++i)
        for (int t = 0; t < topk; ++t) {
            const int32_t j = idx[static_cast<size_t>(i) * topk + t];
            if (j >= 0 && j < L) listed[static_cast<size_t>(j)] = 1;
        }
    std::vector<double> keys(static_cast<size_t>(L) * G * dq, 0.0);
    std::vector<double> vals(static_cast<size_t>(L) * G * d_v, 0.0);
    for (int64_t j = 0; j < L; ++j)
        if (listed[static_cast<size_t>(j)])
            gqla_token_rows(G, r, d_c, d_r, d_v, W, C + static_cast<size_t>(j) * r, KR + static_cast<size_t>(j) * d_r,
                            &keys[static_cast<size_t>(j) * G * dq], &vals[static_cast<size_t>(j) * G * d_v]);
    gqa_sparse_decode(H, G, dq, d_v, L, s_q, scale, q, keys.data(), vals.data(), idx, topk, o, lse);
}

}  // namespace gqla::ref

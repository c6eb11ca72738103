// SPDX-License-Identifier: Apache-2.0
// The slack bound of boundary_slack.hpp.
#include "tests/fuzz/boundary_slack.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fuzz {

void attention_slack(int H, int G, int Dk, int Dv, int64_t L, int n, double scale, const double* q, const double* keys,
                     const double* vals, const double* dk, const double* dv, const int32_t* idx, int topk,
                     double* slack_o, double* slack_lse) {
    const int rep = H / G;
    std::vector<int64_t> pos;
    std::vector<double> s, p, d;
    for (int i = 0; i < n; ++i) {
        const int64_t limit = L - n + i;  // the last position query i sees
        pos.clear();
        if (idx == nullptr) {
            for (int64_t j = 0; j <= limit; ++j) pos.push_back(j);
        } else {
            for (int t = 0; t < topk; ++t) {
                const int64_t j = idx[static_cast<int64_t>(i) * topk + t];
                if (j >= 0 && j <= limit) pos.push_back(j);
            }
        }
        for (int h = 0; h < H; ++h) {
            const int g = h / rep;
            const double* qh = q + (static_cast<int64_t>(i) * H + h) * Dk;
            double* so = slack_o + (static_cast<int64_t>(i) * H + h) * Dv;
            std::fill(so, so + Dv, 0.0);
            slack_lse[static_cast<int64_t>(i) * H + h] = 0.0;
            if (pos.empty()) continue;
            const size_t m = pos.size();
            s.assign(m, 0.0);
            p.assign(m, 0.0);
            d.assign(m, 0.0);
            double smax = -INFINITY;
            for (size_t k = 0; k < m; ++k) {
                const int64_t row = (pos[k] * G + g) * Dk;
                double dot = 0.0, shift = 0.0;
                for (int e = 0; e < Dk; ++e) {
                    dot += qh[e] * keys[row + e];
                    shift += std::fabs(qh[e]) * dk[row + e];
                }
                s[k] = scale * dot;
                d[k] = scale * shift;
                smax = std::max(smax, s[k]);
            }
            double z = 0.0;
            for (size_t k = 0; k < m; ++k) z += (p[k] = std::exp(s[k] - smax));
            double z_min = 0.0, z_max = 0.0;
            for (size_t k = 0; k < m; ++k) {
                p[k] /= z;
                z_min += p[k] * std::exp(-d[k]);
                z_max += p[k] * std::exp(d[k]);
            }
            slack_lse[static_cast<int64_t>(i) * H + h] = std::max(std::log(z_max), -std::log(z_min));
            for (int e = 0; e < Dv; ++e) {
                double o = 0.0;
                for (size_t k = 0; k < m; ++k) o += p[k] * vals[(pos[k] * G + g) * Dv + e];
                double moved = 0.0;
                for (size_t k = 0; k < m; ++k) {
                    const int64_t at = (pos[k] * G + g) * Dv + e;
                    const double reach = std::max(std::exp(d[k]) / z_min - 1.0, 1.0 - std::exp(-d[k]) / z_max);
                    moved += p[k] * (std::exp(d[k]) / z_min * dv[at] + reach * std::fabs(vals[at] - o));
                }
                so[e] = moved;
            }
        }
    }
}

}  // namespace fuzz

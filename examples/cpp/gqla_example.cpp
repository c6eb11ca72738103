// SPDX-License-Identifier: Apache-2.0
// gqla from C++ (gqla.hpp): a small GQLA layer decoded on the absorb path and
// on the expanded GQA path, which must agree; then what the cost model thinks
// of each path on this machine.
//
// Build: c++ -std=c++17 gqla_example.cpp $(pkg-config --cflags --libs gqla)
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gqla/gqla.hpp>

namespace {

std::vector<float> random_values(std::mt19937& rng, size_t n, float scale = 1.0f) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        norm += double(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
}

}  // namespace

int main() {
    const int H = 8, G = 2, r = 128, dc = 32, dr = 16, dv = 32, tokens = 300, s_q = 2;
    std::mt19937 rng(42);
    try {
        gqla_config cfg = gqla::make_gqla_config(H, G, r, dc, dr, dv);
        cfg.cache_dtype = GQLA_DTYPE_F32;  // f32 so the paths can be compared tightly
        cfg.max_tokens = 4096;
        cfg.path = GQLA_PATH_ABSORB;
        gqla::Session session(cfg);

        // kv_b_proj.weight: per group, dc rows of W_UK then dv rows of W_UV.
        auto w = random_values(rng, size_t(G) * (dc + dv) * r, 1.0f / std::sqrt(float(r)));
        session.set_weights(0, gqla::tensor(w.data(), {G * (dc + dv), r}));

        auto c = random_values(rng, size_t(tokens) * r);
        auto kr = random_values(rng, size_t(tokens) * dr);
        const gqla_seq_id seq = session.add_sequence();
        session.append(0, seq, gqla::tensor(c.data(), {tokens, r}), gqla::tensor(kr.data(), {tokens, dr}));

        // Two query tokens (e.g. speculative verification): the last two positions.
        auto q = random_values(rng, size_t(s_q) * H * (dc + dr));
        const gqla_tensor tq = gqla::tensor(q.data(), {1, s_q, H, dc + dr});
        std::vector<float> o_absorb(size_t(s_q) * H * dv), o_gqa(o_absorb.size());
        session.decode(0, {seq}, tq, gqla::tensor(o_absorb.data(), {1, s_q, H, dv}));
        session.select_path(GQLA_PATH_GQA);
        session.decode(0, {seq}, tq, gqla::tensor(o_gqa.data(), {1, s_q, H, dv}));

        const double diff = relative_difference(o_absorb, o_gqa);
        std::printf("gqla %s: absorb vs GQA path relative L2 difference %.2e\n", gqla::version_string().c_str(), diff);

        const gqla_cost_report cost = session.predict_cost(gqla::workload(1, tokens, s_q));
        std::printf("predicted: GQA path %.2f us (%.0f bytes), absorb %.2f us (%.0f bytes); AUTO picks %s\n",
                    cost.gqa.time_s * 1e6, cost.gqa.bytes, cost.absorb.time_s * 1e6, cost.absorb.bytes,
                    cost.chosen == GQLA_PATH_ABSORB ? "absorb" : "GQA");
        if (!(diff <= 1e-5)) {
            std::fprintf(stderr, "the two paths disagree\n");
            return 1;
        }
        return 0;
    } catch (const gqla::Error& e) {
        std::fprintf(stderr, "gqla error: %s\n", e.what());
        return 1;
    }
}

// SPDX-License-Identifier: Apache-2.0
// Installed-package check through gqla.hpp: one GQA token in, its value out.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gqla/gqla.hpp>

int main() {
    try {
        const int H = 4, G = 2, D = 8;
        gqla_config cfg = gqla::make_gqa_config(H, G, D);
        cfg.cache_dtype = GQLA_DTYPE_F32;
        cfg.device = GQLA_DEVICE_CPU;
        cfg.max_tokens = 64;
        gqla::Session s(cfg);
        std::vector<float> k(G * D), v(G * D), q(H * D), o(H * D, NAN);
        for (int i = 0; i < G * D; ++i) k[i] = std::sin(0.3f * i + 0.1f), v[i] = std::cos(0.7f * i + 0.2f);
        for (int i = 0; i < H * D; ++i) q[i] = std::sin(1.1f * i + 0.5f);
        const gqla_seq_id seq = s.add_sequence();
        s.append(0, seq, gqla::tensor(k.data(), {1, G, D}), gqla::tensor(v.data(), {1, G, D}));
        s.decode(0, {seq}, gqla::tensor(q.data(), {1, 1, H, D}), gqla::tensor(o.data(), {1, 1, H, D}));
        for (int h = 0; h < H; ++h)
            for (int d = 0; d < D; ++d)
                if (!(std::fabs(o[h * D + d] - v[(h / (H / G)) * D + d]) <= 1e-6f)) {
                    std::fprintf(stderr, "o[%d][%d] wrong\n", h, d);
                    return 1;
                }
        std::printf("OK cmake consumer, gqla %s\n", gqla::version_string().c_str());
        return 0;
    } catch (const gqla::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
}

// SPDX-License-Identifier: Apache-2.0
// Cross-device test through the public C ABI only: identical inputs go to a
// CPU session and a CUDA session (GQA kind and GQLA kind on both paths, ragged
// batch, s_q > 1, host tensors); each is checked against the float64
// reference and the two against each other. Exit 77 when no GPU is usable.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tests/cuda/run_seed.hpp"
#include "tests/reference/reference.hpp"
#include "gqla/gqla.h"

namespace {

int failures = 0;
std::mt19937 rng;  // seeded in main (run_seed)

std::vector<float> randn(size_t n, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

#define CHECK_OK(call)                                                                                    \
    do {                                                                                                  \
        gqla_status st_ = (call);                                                                         \
        if (st_ != GQLA_OK) {                                                                             \
            std::printf("FAIL %s: %s (%s)\n", #call, gqla_status_string(st_), gqla_last_error_message()); \
            ++failures;                                                                                   \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)

gqla_tensor tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
    gqla_tensor t;
    gqla_tensor_init(&t, const_cast<float*>(v.data()), GQLA_DTYPE_F32, static_cast<int32_t>(shape.size()),
                     shape.data());
    return t;
}

void report(const char* what, double err, double tol) {
    bool ok = err <= tol;
    if (!ok) ++failures;
    std::printf("%-4s %-60s rel_l2 %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", what, err, tol);
}

struct Case {
    gqla_kind kind;
    gqla_dtype cache;
    gqla_path path;
};

void run_case(const Case& c) {
    const int H = 6, G = 2, D = 40, r = 384, dc = 96, dr = 32, dv = 80, s_q = 3;
    const std::vector<int64_t> lengths = {3, 65, 700};
    const bool gqla = c.kind == GQLA_KIND_GQLA;
    const int dq = gqla ? dc + dr : D, dvo = gqla ? dv : D;
    gqla_config cfg;
    gqla_config_default(&cfg, c.kind);
    cfg.num_heads = H;
    cfg.num_kv_heads = G;
    cfg.num_layers = 1;
    cfg.cache_dtype = c.cache;
    cfg.page_size = 63;
    cfg.max_tokens = 4096;
    cfg.max_batch = 8;
    cfg.max_q_len = 4;
    cfg.path = c.path;
    if (gqla) {
        cfg.latent_dim = r;
        cfg.nope_dim = dc;
        cfg.rope_dim = dr;
        cfg.value_dim = dv;
    } else {
        cfg.head_dim = D;
    }

    std::vector<float> w = randn(size_t(G) * (dc + dv) * r, 1.f / std::sqrt(float(r)));
    std::vector<std::vector<float>> A, Bv;
    for (int64_t L : lengths) {
        A.push_back(randn(size_t(L) * (gqla ? r : G * D)));
        Bv.push_back(randn(size_t(L) * (gqla ? dr : G * D)));
    }
    const int B = static_cast<int>(lengths.size());
    std::vector<float> q = randn(size_t(B) * s_q * H * dq);
    std::vector<std::vector<float>> outs;
    for (gqla_device_type dev : {GQLA_DEVICE_CPU, GQLA_DEVICE_CUDA}) {
        cfg.device = dev;
        gqla_session* s = nullptr;
        CHECK_OK(gqla_session_create(&cfg, &s));
        if (gqla) {
            gqla_tensor wt = tensor(w, {int64_t(G) * (dc + dv), r});
            CHECK_OK(gqla_set_weights(s, 0, &wt));
        }
        std::vector<gqla_seq_id> ids(B);
        for (int b = 0; b < B; ++b) {
            CHECK_OK(gqla_sequence_add(s, &ids[b]));
            const int64_t L = lengths[size_t(b)];
            gqla_tensor ta = gqla ? tensor(A[b], {L, r}) : tensor(A[b], {L, G, D});
            gqla_tensor tb = gqla ? tensor(Bv[b], {L, dr}) : tensor(Bv[b], {L, G, D});
            CHECK_OK(gqla_append(s, 0, ids[b], &ta, &tb));
        }
        std::vector<float> o(size_t(B) * s_q * H * dvo, NAN);
        gqla_tensor tq = tensor(q, {B, s_q, H, dq});
        gqla_tensor to = tensor(o, {B, s_q, H, dvo});
        CHECK_OK(gqla_decode(s, 0, B, ids.data(), &tq, &to, nullptr));
        outs.push_back(o);
        gqla_session_destroy(s);
    }
    std::vector<double> ref(outs[0].size());
    for (int b = 0; b < B; ++b) {
        const int64_t L = lengths[size_t(b)];
        std::vector<double> qd(q.begin() + size_t(b) * s_q * H * dq, q.begin() + size_t(b + 1) * s_q * H * dq);
        std::vector<double> a(A[b].begin(), A[b].end()), bb(Bv[b].begin(), Bv[b].end());
        double* ro = ref.data() + size_t(b) * s_q * H * dvo;
        if (gqla) {
            std::vector<double> wd(w.begin(), w.end());
            gqla::ref::gqla_decode(H, G, r, dc, dr, dv, L, s_q, 1.0 / std::sqrt(double(dc + dr)), qd.data(), wd.data(),
                                   a.data(), bb.data(), ro, nullptr);
        } else {
            gqla::ref::gqa_decode(H, G, D, D, L, s_q, 1.0 / std::sqrt(double(D)), qd.data(), a.data(), bb.data(), ro,
                                  nullptr);
        }
    }
    const double tol = c.cache == GQLA_DTYPE_F32 ? 1e-5 : c.cache == GQLA_DTYPE_F16 ? 2e-3 : 1e-2;
    char name[128];
    const char* cn = c.cache == GQLA_DTYPE_F32 ? "f32" : c.cache == GQLA_DTYPE_F16 ? "f16" : "bf16";
    const char* pn = !gqla ? "gqa" : c.path == GQLA_PATH_ABSORB ? "gqla absorb" : "gqla gqa-path";
    std::snprintf(name, sizeof name, "%s %s cpu vs reference", pn, cn);
    report(name, gqla::ref::rel_l2(outs[0].data(), ref.data(), ref.size()), tol);
    std::snprintf(name, sizeof name, "%s %s cuda vs reference", pn, cn);
    report(name, gqla::ref::rel_l2(outs[1].data(), ref.data(), ref.size()), tol);
    std::vector<double> cpu(outs[0].begin(), outs[0].end());
    std::snprintf(name, sizeof name, "%s %s cuda vs cpu", pn, cn);
    report(name, gqla::ref::rel_l2(outs[1].data(), cpu.data(), cpu.size()), 2 * tol);
}

}  // namespace

int main() {
    int32_t n = 0;
    if (gqla_device_count(GQLA_DEVICE_CUDA, &n) != GQLA_OK || n == 0) {
        std::printf("no CUDA device (or CUDA module) visible: skipping\n");
        return 77;
    }
    rng.seed(gqla::test::run_seed());
    for (gqla_dtype t : {GQLA_DTYPE_F32, GQLA_DTYPE_BF16}) {
        run_case({GQLA_KIND_GQA, t, GQLA_PATH_GQA});
        run_case({GQLA_KIND_GQLA, t, GQLA_PATH_ABSORB});
        run_case({GQLA_KIND_GQLA, t, GQLA_PATH_GQA});
    }
    std::printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}

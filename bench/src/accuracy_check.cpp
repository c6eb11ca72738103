// SPDX-License-Identifier: Apache-2.0
#include "accuracy_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/reference.hpp"
#include "support.hpp"

namespace gqla::bench {

double error_bound(gqla_dtype cache) {
    switch (cache) {
        case GQLA_DTYPE_F32: return 1e-5;
        case GQLA_DTYPE_F16: return 2e-3;
        case GQLA_DTYPE_BF16: return 1e-2;
    }
    return 0;
}

double error_bound(gqla_dtype cache, gqla_dtype io) { return std::max(error_bound(cache), error_bound(io)); }

double relative_error_vs_reference(const AccuracySpec& spec) {
    const Preset& p = *spec.preset;
    const int B = 2, s_q = spec.s_q;
    SessionShape shape = spec.shape;
    shape.max_tokens = 1024;
    shape.max_sequences = 4;
    shape.max_batch = B;
    shape.max_q_len = s_q;
    gqla_config cfg = make_config(p, shape);
    gqla_session* session = nullptr;
    check(gqla_session_create(&cfg, &session), "gqla_session_create");
    struct Guard { gqla_session* s; ~Guard() { gqla_session_destroy(s); } } guard{session};

    const double scale = p.is_gqla() ? 1.0 / std::sqrt(static_cast<double>(p.d_c + p.d_r))
                                     : 1.0 / std::sqrt(static_cast<double>(p.D));
    const int64_t w_rows = static_cast<int64_t>(p.G) * (p.d_c + p.d_v);
    std::vector<float> w;
    if (p.is_gqla()) {
        w = random_vector(static_cast<size_t>(w_rows) * p.r, 101, 1.0f / std::sqrt(static_cast<float>(p.r)));
        gqla_tensor tw = host_tensor(w.data(), {w_rows, p.r});
        check(gqla_set_weights(session, 0, &tw), "gqla_set_weights");
    }

    const int64_t a_row = p.is_gqla() ? p.r : static_cast<int64_t>(p.G) * p.D;
    const int64_t b_row = p.is_gqla() ? p.d_r : static_cast<int64_t>(p.G) * p.Dv;
    // Inputs in the io dtype; the reference takes them as rounded to it.
    const gqla_dtype io = shape.io_dtype;
    auto rounded = [&](std::vector<unsigned char>& raw, size_t n, uint64_t seed) {
        raw = to_dtype(random_vector(n, seed), io);
        return from_dtype(raw.data(), io, n);
    };
    std::vector<std::vector<float>> a(B), b(B);
    std::vector<std::vector<unsigned char>> a_raw(B), b_raw(B);
    gqla_seq_id ids[B];
    for (int s = 0; s < B; ++s) {
        const int64_t L = spec.lengths[s];
        a[s] = rounded(a_raw[s], static_cast<size_t>(L * a_row), 200 + s);
        b[s] = rounded(b_raw[s], static_cast<size_t>(L * b_row), 300 + s);
        void* ad = a_raw[s].data();
        void* bd = b_raw[s].data();
        gqla_tensor ta = p.is_gqla() ? host_tensor(ad, io, {L, p.r}) : host_tensor(ad, io, {L, p.G, p.D});
        gqla_tensor tb = p.is_gqla() ? host_tensor(bd, io, {L, p.d_r}) : host_tensor(bd, io, {L, p.G, p.Dv});
        check(gqla_sequence_add(session, &ids[s]), "gqla_sequence_add");
        check(gqla_append(session, 0, ids[s], &ta, &tb), "gqla_append");
    }
    if (p.is_gqla() && spec.shape.path != GQLA_PATH_AUTO) check(gqla_select_path(session, spec.shape.path), "gqla_select_path");

    const size_t q_per_seq = static_cast<size_t>(s_q) * p.H * p.q_dim();
    const size_t o_per_seq = static_cast<size_t>(s_q) * p.H * p.out_dim();
    std::vector<unsigned char> q_raw;
    const std::vector<float> q = rounded(q_raw, B * q_per_seq, 400);
    std::vector<unsigned char> o_raw =
        to_dtype(std::vector<float>(B * o_per_seq, std::numeric_limits<float>::quiet_NaN()), io);  // poison
    gqla_tensor tq = host_tensor(q_raw.data(), io, {B, s_q, p.H, p.q_dim()});
    gqla_tensor to = host_tensor(o_raw.data(), io, {B, s_q, p.H, p.out_dim()});
    check(gqla_decode(session, 0, B, ids, &tq, &to, nullptr), "gqla_decode");
    check(gqla_session_synchronize(session), "gqla_session_synchronize");
    const std::vector<float> o = from_dtype(o_raw.data(), io, B * o_per_seq);

    std::vector<double> ref(B * o_per_seq);
    const std::vector<double> wd(w.begin(), w.end());
    for (int s = 0; s < B; ++s) {
        const std::vector<double> qd(q.begin() + s * q_per_seq, q.begin() + (s + 1) * q_per_seq);
        const std::vector<double> ad(a[s].begin(), a[s].end()), bd(b[s].begin(), b[s].end());
        double* out = ref.data() + s * o_per_seq;
        if (p.is_gqla())
            ref::gqla_decode(p.H, p.G, p.r, p.d_c, p.d_r, p.d_v, spec.lengths[s], s_q, scale, qd.data(), wd.data(),
                             ad.data(), bd.data(), out, nullptr);
        else
            ref::gqa_decode(p.H, p.G, p.D, p.Dv, spec.lengths[s], s_q, scale, qd.data(), ad.data(), bd.data(), out,
                            nullptr);
    }
    return ref::rel_l2(o.data(), ref.data(), o.size());
}

}  // namespace gqla::bench

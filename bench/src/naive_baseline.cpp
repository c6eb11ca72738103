// SPDX-License-Identifier: Apache-2.0
#include "naive_baseline.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "support.hpp"

namespace gqla::bench {
namespace {

struct Bf16 {
    uint16_t bits;
};
struct F16 {
    uint16_t bits;
};

inline float to_f32(float x) { return x; }
inline float to_f32(Bf16 x) { return gqla::bf16_to_f32(x.bits); }
inline float to_f32(F16 x) { return gqla::f16_to_f32(x.bits); }
template <class T>
T from_f32(float x);
template <>
float from_f32<float>(float x) {
    return x;
}
template <>
Bf16 from_f32<Bf16>(float x) {
    return {gqla::f32_to_bf16(x)};
}
template <>
F16 from_f32<F16>(float x) {
    return {gqla::f32_to_f16(x)};
}

// One set of `batch` sequences: keys [B][heads][L][Dk], values [B][heads][L][Dv]
// where heads = G for GQA (repeated at every step) and H for GQLA.
template <class T>
struct NaiveCache {
    std::vector<T> k, v;
};

template <class T>
void attend_head(const T* K, const T* V, int64_t L, int Dk, int Dv, int s_q, int q_stride, const float* q, float scale,
                 float* o, int o_stride, std::vector<float>& scores) {
    scores.resize(static_cast<size_t>(L));
    for (int i = 0; i < s_q; ++i) {
        const int64_t visible = L - s_q + i + 1;
        const float* qi = q + static_cast<size_t>(i) * q_stride;
        float mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
            float s = 0;
            for (int d = 0; d < Dk; ++d) s += qi[d] * to_f32(K[j * Dk + d]);
            scores[j] = s * scale;
            mx = std::max(mx, scores[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
        float* oi = o + static_cast<size_t>(i) * o_stride;
        for (int d = 0; d < Dv; ++d) oi[d] = 0;
        for (int64_t j = 0; j < visible; ++j) {
            const float pj = scores[j] / sum;
            for (int d = 0; d < Dv; ++d) oi[d] += pj * to_f32(V[j * Dv + d]);
        }
    }
}

template <class T>
NaiveResult run(const Preset& p, int batch, int64_t L, int s_q, int threads, int reps, int sets) {
    const bool gqla = p.is_gqla();
    const int H = p.H, G = p.G, heads = gqla ? H : G, n_rep = H / G;
    const int Dk = p.q_dim(), Dv = p.out_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
    const size_t k_seq = static_cast<size_t>(heads) * L * Dk, v_seq = static_cast<size_t>(heads) * L * Dv;

    std::vector<NaiveCache<T>> caches(static_cast<size_t>(sets));
    {
        std::vector<float> rk = random_vector(k_seq, 21), rv = random_vector(v_seq, 23);
        for (auto& c : caches) {
            c.k.resize(k_seq * batch);
            c.v.resize(v_seq * batch);
            for (int b = 0; b < batch; ++b) {
                for (size_t i = 0; i < k_seq; ++i) c.k[b * k_seq + i] = from_f32<T>(rk[i]);
                for (size_t i = 0; i < v_seq; ++i) c.v[b * v_seq + i] = from_f32<T>(rv[i]);
            }
        }
    }
    // repeat_kv target for GQA: every query head gets its own copy.
    std::vector<T> k_rep, v_rep;
    if (!gqla) {
        k_rep.resize(static_cast<size_t>(batch) * H * L * Dk);
        v_rep.resize(static_cast<size_t>(batch) * H * L * Dv);
    }
    const std::vector<float> q = random_vector(static_cast<size_t>(batch) * s_q * H * Dk, 29);
    std::vector<float> o(static_cast<size_t>(batch) * s_q * H * Dv);

    auto step = [&](const NaiveCache<T>& c) {
        const T* K = c.k.data();
        const T* V = c.v.data();
        if (!gqla) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(threads)
            for (int b = 0; b < batch; ++b)
                for (int h = 0; h < H; ++h) {
                    const int g = h / n_rep;
                    std::memcpy(&k_rep[(static_cast<size_t>(b) * H + h) * L * Dk], &K[b * k_seq + g * L * Dk],
                                sizeof(T) * L * Dk);
                    std::memcpy(&v_rep[(static_cast<size_t>(b) * H + h) * L * Dv], &V[b * v_seq + g * L * Dv],
                                sizeof(T) * L * Dv);
                }
            K = k_rep.data();
            V = v_rep.data();
        }
        const size_t k_head = static_cast<size_t>(L) * Dk, v_head = static_cast<size_t>(L) * Dv;
#pragma omp parallel num_threads(threads)
        {
            std::vector<float> scores;
#pragma omp for collapse(2) schedule(static)
            for (int b = 0; b < batch; ++b)
                for (int h = 0; h < H; ++h) {
                    const size_t head = static_cast<size_t>(b) * H + h;
                    attend_head(K + head * k_head, V + head * v_head, L, Dk, Dv, s_q, H * Dk,
                                q.data() + (static_cast<size_t>(b) * s_q * H + h) * Dk, scale,
                                o.data() + (static_cast<size_t>(b) * s_q * H + h) * Dv, H * Dv, scores);
                }
        }
    };

    int next = 0;
    step(caches[next]);  // warm-up (page faults of the repeat buffers)
    next = (next + 1) % sets;
    std::vector<double> times;
    double spent = 0;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        step(caches[next]);
        const double dt = now_s() - t0;
        next = (next + 1) % sets;
        times.push_back(dt);
        spent += dt;
        if (spent > 3.0 && times.size() >= 3) break;
    }
    NaiveResult r;
    r.ran = true;
    r.seconds = median(times);
    return r;
}

}  // namespace

NaiveResult time_naive_baseline(const Preset& p, gqla_dtype cache, int batch, int64_t context, int s_q, int threads,
                                int reps, bool hot, double cold_bytes, uint64_t memory_cap) {
    if (threads <= 0) threads = omp_get_max_threads();
    const int heads = p.is_gqla() ? p.H : p.G;
    const double e = static_cast<double>(dtype_size(cache));
    const double set_bytes = e * batch * static_cast<double>(context) * heads * (p.q_dim() + p.out_dim());
    const double repeat_bytes =
        p.is_gqla() ? 0.0 : e * batch * static_cast<double>(context) * p.H * (p.q_dim() + p.out_dim());
    const int sets = hot ? 1 : std::max(2, static_cast<int>(std::ceil(cold_bytes / set_bytes)));
    if (set_bytes * sets + repeat_bytes > static_cast<double>(memory_cap)) {
        const int fit = static_cast<int>((static_cast<double>(memory_cap) - repeat_bytes) / set_bytes);
        if (fit < 1) {
            NaiveResult r;
            r.skipped = "naive cache of " + std::to_string(static_cast<long long>((set_bytes + repeat_bytes) / 1e6)) +
                        " MB exceeds the memory cap";
            return r;
        }
        return time_naive_baseline(p, cache, batch, context, s_q, threads, reps, fit == 1, set_bytes * fit, memory_cap);
    }
    switch (cache) {
        case GQLA_DTYPE_F32:
            return run<float>(p, batch, context, s_q, threads, reps, sets);
        case GQLA_DTYPE_F16:
            return run<F16>(p, batch, context, s_q, threads, reps, sets);
        case GQLA_DTYPE_BF16:
            return run<Bf16>(p, batch, context, s_q, threads, reps, sets);
        case GQLA_DTYPE_FP8_E4M3:
        case GQLA_DTYPE_I32:
            break;
    }
    return {};  // no naive loop for 8-bit caches: not run, nothing to report
}

}  // namespace gqla::bench

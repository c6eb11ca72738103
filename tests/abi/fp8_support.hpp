// SPDX-License-Identifier: Apache-2.0
// A session with an 8-bit (e4m3) cache and a host mirror of what it holds:
// every appended row as given and as the cache stores it (quantized with
// the per-group scales of docs/fp8-cache.md, rebuilt here from that rule),
// so a decode can be checked against the float64 reference on both.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "gqla/gqla.h"

namespace fp8test {

// Relative L2 bound against the reference on the dequantized cache (the
// kernels' own error: the bf16 bound of docs/numerics.md) and against the
// reference on the inputs as given (adds the 8-bit rounding).
constexpr double kStoredBound = 1e-2;
constexpr double kGivenBound = 6e-2;

// Outlier data: this channel of every appended row group is this many times
// the others.
constexpr int kOutlierChannel = 3;
constexpr double kOutlierFactor = 50.0;

// x rounded through the io dtype (what the library receives).
inline double through_io(double x, gqla_dtype io) {
    if (io == GQLA_DTYPE_BF16) return gqla::bf16_to_f32(gqla::f32_to_bf16(static_cast<float>(x)));
    if (io == GQLA_DTYPE_F16) return gqla::f16_to_f32(gqla::f32_to_f16(static_cast<float>(x)));
    return static_cast<float>(x);
}

// Quantize-dequantize one group as the cache stores it: scale = amax / 448.
inline void fake_quantize(const double* src, int n, double* dst) {
    float amax = 0.0f;
    for (int k = 0; k < n; ++k) amax = std::max(amax, std::fabs(static_cast<float>(src[k])));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int k = 0; k < n; ++k)
        dst[k] = static_cast<double>(gqla::e4m3_to_f32(gqla::f32_to_e4m3(static_cast<float>(src[k]) / scale))) * scale;
}
inline void fake_quantize_blocks(const double* src, int n, int block, double* dst) {
    for (int b = 0; b < n; b += block) fake_quantize(src + b, std::min(block, n - b), dst + b);
}

// The kept expanded cache of an 8-bit GQLA session as stored: KC and VE up-
// projected (in f32) from the stored latent C [L, r] by W [G*(d_c+d_v), r],
// quantized per (token, group); the stored rope key KR [L, d_r] beside
// every group's KC. K [L, G, d_c + d_r], V [L, G, d_v].
inline void expanded_cache_as_stored(int G, int r, int dc, int dr, int dv, int64_t L, const double* W, const double* C,
                                     const double* KR, std::vector<double>* K, std::vector<double>* V) {
    K->assign(size_t(L) * G * (dc + dr), 0.0);
    V->assign(size_t(L) * G * dv, 0.0);
    std::vector<double> row(size_t(dc + dv));
    for (int64_t j = 0; j < L; ++j)
        for (int g = 0; g < G; ++g) {
            for (int i = 0; i < dc + dv; ++i)
                row[size_t(i)] = static_cast<float>(gqla::ref::dot(W + (int64_t(g) * (dc + dv) + i) * r, C + j * r, r));
            double* kd = K->data() + (j * G + g) * (dc + dr);
            fake_quantize(row.data(), dc, kd);
            for (int e = 0; e < dr; ++e) kd[dc + e] = KR[j * dr + e];
            fake_quantize(row.data() + dc, dv, V->data() + (j * G + g) * dv);
        }
}

// The device of the sessions below (CPU unless a test program sets another:
// tests/cuda runs the GQA-kind fp8 cases on the GPU).
gqla_device_type test_device();
void use_device(gqla_device_type device);

struct Errors {
    double stored = 0.0;  // rel-L2 of o against the reference on the stored rows
    double given = 0.0;   // ... on the rows as given
    double lse = 0.0;     // lse_error (docs/numerics.md) against the stored rows
};

class Fp8Session {
public:
    // cfg: cache_dtype is set to FP8_E4M3 here. outlier: one channel of every
    // appended row is kOutlierFactor x the others (for GQLA, in the latent,
    // and the weights' column of that channel is divided by it).
    Fp8Session(gqla_config cfg, uint64_t seed, bool outlier = false);
    ~Fp8Session();
    Fp8Session(const Fp8Session&) = delete;
    Fp8Session& operator=(const Fp8Session&) = delete;

    gqla_session* session() const { return s_; }
    const gqla_config& config() const { return cfg_; }
    bool gqla() const { return cfg_.kind == GQLA_KIND_GQLA; }

    gqla_seq_id add();
    gqla_seq_id fork(gqla_seq_id parent);
    // Appends n random rows (scaled by `magnitude`) to every layer.
    void append(gqla_seq_id seq, int64_t n, double magnitude = 1.0);
    // One attention call over seqs with q_lens (ragged when `ragged`, else
    // all equal to q_lens[0]) on `path`; REQUIREs success.
    Errors attend(const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens, gqla_path path, bool ragged,
                  int32_t layer = 0);

private:
    struct Rows {
        std::vector<double> a, b;  // as given (io-rounded)
    };
    // Reference of one sequence: o [n, H, Dv], lse [n, H].
    void reference(const Rows& rows, int64_t L, int n, const double* q, bool stored, gqla_path path, int32_t layer,
                   double* o, double* lse) const;
    std::vector<double> random(size_t n, double stddev);
    int64_t a_cols() const;
    int64_t b_cols() const;

    gqla_config cfg_{};
    gqla_session* s_ = nullptr;
    std::mt19937_64 gen_;
    bool outlier_;
    std::map<int32_t, std::vector<double>> weights_;
    std::map<std::pair<gqla_seq_id, int32_t>, Rows> rows_;
};

}  // namespace fp8test

// SPDX-License-Identifier: Apache-2.0
// The e4m3 quantization rule of fp8_rows.hpp.
#include "tests/fuzz/fp8_rows.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "core/dtype.hpp"

namespace fuzz::fp8 {

namespace {

constexpr float kE4m3Max = 448.0f;
// Relative widening that covers one f32 rounding (2^-24) with room to spare.
constexpr double kF32Rounding = 0x1p-22;

double e4m3_value(double t) { return gqla::e4m3_to_f32(gqla::f32_to_e4m3(static_cast<float>(t))); }

}  // namespace

float scale_for(float amax) {
    if (!(amax > 0.0f)) return 1.0f;
    const float s = amax / kE4m3Max;
    return s < FLT_MIN ? FLT_MIN : s;
}

void quantize(const double* x, int n, double* out) {
    float amax = 0.0f;
    for (int k = 0; k < n; ++k) {
        const float a = std::fabs(static_cast<float>(x[k]));
        if (a <= FLT_MAX && a > amax) amax = a;
    }
    const float scale = scale_for(amax);
    for (int k = 0; k < n; ++k) {
        const float v = static_cast<float>(x[k]);
        // e4m3 has no infinity: a non-finite element is stored as NaN, of
        // its sign (the code an export shows).
        out[k] = std::isfinite(v) ? e4m3_value(v / scale) * static_cast<double>(scale) : std::copysign(std::nan(""), v);
    }
}

bool quantize_bounded(const double* x, const double* err, int n, double* out, double* dev) {
    std::vector<double> rounded(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) rounded[static_cast<size_t>(k)] = static_cast<float>(x[k]);
    quantize(rounded.data(), n, out);
    // gqla's amax is its own largest |value|: within the largest error of
    // ours. Its scale (a division by 448 and a conversion to f32, both
    // monotone) then lies between the scales of the two ends.
    double amax = 0.0, emax = 0.0;
    for (int k = 0; k < n; ++k) {
        amax = std::max(amax, std::fabs(x[k]));
        emax = std::max(emax, err[k]);
    }
    double s_lo, s_hi;
    if (amax - emax > 0.0) {
        s_lo = scale_for(static_cast<float>(amax - emax)) * (1.0 - kF32Rounding);
        s_hi = scale_for(static_cast<float>(amax + emax)) * (1.0 + kF32Rounding);
    } else {  // the group may be all zero (scale 1) or tiny: any scale up to 1
        s_lo = FLT_MIN;
        s_hi = std::max(1.0, scale_for(static_cast<float>(amax + emax)) * (1.0 + kF32Rounding));
    }
    bool boundary = false;
    for (int k = 0; k < n; ++k) {
        // x_lib / scale_lib over the corners of both ranges, widened by the
        // f32 division's rounding; e4m3 rounding is monotone, so every
        // stored value lies between those of the two ends.
        const double lo = x[k] - err[k], hi = x[k] + err[k];
        const double t[4] = {lo / s_lo, lo / s_hi, hi / s_lo, hi / s_hi};
        double t_min = *std::min_element(t, t + 4), t_max = *std::max_element(t, t + 4);
        t_min -= std::fabs(t_min) * kF32Rounding;
        t_max += std::fabs(t_max) * kF32Rounding;
        const double v_lo = e4m3_value(t_min), v_hi = e4m3_value(t_max);
        if (v_lo != v_hi) boundary = true;
        double d = 0.0;
        for (double v : {v_lo, v_hi})
            for (double s : {s_lo, s_hi}) d = std::max(d, std::fabs(v * s - out[k]));
        dev[k] = d;
    }
    return boundary;
}

}  // namespace fuzz::fp8

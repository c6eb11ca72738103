// SPDX-License-Identifier: Apache-2.0
// The 8-bit (e4m3) cache's quantization as docs/fp8-cache.md states it, for
// the shadow model: a row group of values x is stored as e4m3(x / scale)
// (round to nearest even, saturating at 448) with one f32 scale
//     scale = amax / 448   (amax: the group's largest finite |x|; 1 when it
//                           has no finite non-zero element; at least 2^-126)
// and reads back as e4m3 * scale. The fuzzer rebuilds the rule from that page
// (and core/dtype.hpp's scalar conversions, which the page names), not from
// the backend's code.
//
// Rows gqla quantizes from values the fuzzer knows exactly (an append's io
// rows, widened to f32) come out exactly as gqla stores them. The expanded
// rows of the GQLA GQA path do not: gqla up-projects the stored latent with
// an f32 GEMM whose summation order the fuzzer cannot repeat, so its f32
// values may differ from the float64 ones in the last bits, and where such
// a value lies at a rounding boundary of e4m3 (or moves the group's scale
// across one) the stored element is one e4m3 step (6-12%) away from the
// float64 rebuild. quantize_bounded says which elements can be affected and
// by how much; boundary_slack.hpp turns that into a bound on the outputs.
#pragma once

namespace fuzz::fp8 {

// Elements of the latent that share one scale (kFp8LatentBlock).
constexpr int kLatentBlock = 128;

// The scale of a group whose largest finite magnitude is amax.
float scale_for(float amax);

// One group of n values, each exactly an f32 (io rows widened): out[k] =
// e4m3(x[k] / scale) * scale, the value the cache holds.
void quantize(const double* x, int n, double* out);

// One expanded row group of n elements whose exact (float64) values are
// x[k], of which gqla's f32 GEMM may be off by up to err[k]. out: the row as
// stored when gqla's values are x rounded to f32 (what a GEMM without
// rounding error would give); dev[k]: how far the stored value of element k
// may be from out[k] for any f32 values within err of x (both ends of the
// range of the group's scale included). Returns true when some element may
// land on another e4m3 value than out's (dev then spans an e4m3 step);
// false when all differences are the scale's last-bit ones.
bool quantize_bounded(const double* x, const double* err, int n, double* out, double* dev);

}  // namespace fuzz::fp8

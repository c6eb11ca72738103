// SPDX-License-Identifier: Apache-2.0
// Keeping non-finite cache values where they belong.
//
// A position a query may not see must not change its output, not even
// through a NaN: but a masked position's probability is 0, and a
// tensor-core P.V still computes 0 * NaN = NaN and 0 * Inf = NaN for its
// value row. The kernels therefore scrub the value rows of the few tiles
// that hold positions some row of the tile may not see (the causal tail of
// the earlier queries): non-finite elements become 0, and each row that
// may see such a token gets a NaN probability for it instead, so the
// token's NaN/Inf still reaches exactly the outputs that attend to it.
// Slots past a sequence's end are never read (zero-filled copies), so only
// the causal tail needs this. Scores of masked positions are replaced by
// -inf with a select, never arithmetic, so a NaN key cannot reach a row
// that may not see it either.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "attention_common.cuh"  // exp2_ftz
#include "row_copies.cuh"        // SmemRows

namespace gqla::cuda {

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

// Exponent bits of a 16-bit float: all ones is Inf or NaN.
template <typename T>
constexpr uint32_t kExponentMask16 = std::is_same<T, __nv_bfloat16>::value ? 0x7f80u : 0x7c00u;  // bf16 : f16

// Zeroes the non-finite halves of a packed pair of 16-bit floats; bit 0 /
// bit 1 of the result tell whether the low / high half was one.
template <typename T>
__device__ __forceinline__ uint32_t scrub_pair(uint32_t& packed) {
    constexpr uint32_t e = kExponentMask16<T>;
    const uint32_t lo_bad = (packed & e) == e, hi_bad = ((packed >> 16) & e) == e;
    packed &= (lo_bad ? 0xffff0000u : 0xffffffffu) & (hi_bad ? 0x0000ffffu : 0xffffffffu);
    return lo_bad | (hi_bad << 1);
}

// Zeroes the non-finite elements of rows [0, rows) (at most 32) of `dim`
// elements (a multiple of 8) of a shared-memory tile laid out as `layout`
// (16-byte pieces: see SmemRows); returns (to every lane) a mask of the rows
// that had one. Called by a whole warp.
template <typename T>
__device__ __forceinline__ uint32_t scrub_rows(T* tile, SmemRows layout, int rows, int dim, int lane) {
    const int per_row = dim >> 3;
    uint32_t bad_rows = 0;
    for (int piece = lane; piece < rows * per_row; piece += 32) {
        const int r = piece / per_row, c = (piece - r * per_row) << 3;
        uint4* at = reinterpret_cast<uint4*>(tile + smem_index(layout, r, c));
        uint4 v = *at;
        const uint32_t bad = scrub_pair<T>(v.x) | scrub_pair<T>(v.y) | scrub_pair<T>(v.z) | scrub_pair<T>(v.w);
        if (bad) {
            *at = v;
            bad_rows |= 1u << r;
        }
    }
    return __reduce_or_sync(0xffffffffu, bad_rows);
}

// Softmax weight 2^(s - m) of a score in log2 units against its row's
// running max m: 0 for a masked score (-inf), NaN for a NaN score even
// while m is still -inf (a row whose visible scores are all NaN).
__device__ __forceinline__ float softmax_weight(float s, float m) { return s == -INFINITY ? 0.f : exp2_ftz(s - m); }

// A row's output element from its accumulator and sum: 0 where the row saw
// no token (l == 0); a NaN sum stays NaN.
__device__ __forceinline__ float normalized(float acc, float l) { return l == 0.f ? 0.f : acc / l; }

// Sum of a partial (max m, sum l) rescaled to the merged max M: 0 for a
// partial that saw no token (l == 0, m == -inf), NaN where l is (a NaN
// score, even with m still -inf).
__device__ __forceinline__ float rescaled_sum(float m, float l, float M) {
    return l == 0.f ? 0.f : l * exp2_ftz(m - M);
}

}  // namespace gqla::cuda

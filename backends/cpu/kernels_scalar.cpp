// SPDX-License-Identifier: Apache-2.0
// Portable kernels: one f32 "lane", plain C++ arithmetic. The reference for
// the SIMD kernels and the fallback on hosts without AVX2/FMA/F16C.
#include <cstdint>
#include <type_traits>  // std::integral_constant, used by attention_kernels.inl

#include "backends/cpu/kernel_table.hpp"
#include "gqla/gqla.h"

namespace gqla::cpu {
namespace scalar_isa {

struct Simd {
    using V = float;
    static constexpr int W = 1;
    static constexpr int kVectorRegisters = 32;  // (scalar: no register tiles to fit)
    static constexpr int kScoreRows = 4;
    static constexpr int kScoreTokens = 2;
    static constexpr int kPvChunks = 4;
    static constexpr int kAbsorbTokens = 4;
    static constexpr int kAbsorbRowVecs = 4;
    static constexpr int kAbsorbDims = 4;
    static constexpr int kGemmVecs = 4;
    static constexpr int kGemvVecs = 4;  // single-row GEMM: vectors per row pass

    static inline V zero() { return 0.0f; }
    static inline V set1(float x) { return x; }
    static inline V load(const float* p) { return *p; }
    static inline void store(float* p, V v) { *p = v; }
    static inline float f16_scalar(uint16_t h) {
        const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
        const uint32_t exp = (h >> 10) & 0x1fu;
        const uint32_t mant = h & 0x3ffu;
        uint32_t bits;
        if (exp == 0) {
            if (mant == 0) {
                bits = sign;
            } else {
                float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
                return sign ? -f : f;
            }
        } else if (exp == 31) {
            bits = sign | 0x7f800000u | (mant << 13);
        } else {
            bits = sign | ((exp + 112u) << 23) | (mant << 13);
        }
        float f;
        __builtin_memcpy(&f, &bits, 4);
        return f;
    }
    static inline V load_f16(const uint16_t* p) { return f16_scalar(*p); }
    static inline V load_bf16(const uint16_t* p) {
        uint32_t u = static_cast<uint32_t>(*p) << 16;
        float f;
        __builtin_memcpy(&f, &u, 4);
        return f;
    }
    // 2W bf16 elements as two vectors: even-indexed and odd-indexed ones.
    static inline void load_bf16_pair(const uint16_t* p, V& even, V& odd) {
        even = load_bf16(p);
        odd = load_bf16(p + 1);
    }
    // e4m3 to f32 divided by 256, as the vector layers return it
    // (attention_fp8.inl: e4m3_raw_scalar).
    static inline V load_e4m3(const uint8_t* p);
    static inline void load_e4m3_pair(const uint8_t* p, V& lo, V& hi) {
        lo = load_e4m3(p);
        hi = load_e4m3(p + 1);
    }
    static inline V fma(V a, V b, V c) { return a * b + c; }
    static inline V mul(V a, V b) { return a * b; }
    static inline V add(V a, V b) { return a + b; }
    static inline V sub(V a, V b) { return a - b; }
    // b when either is NaN, like the x86 max instructions: the kernels pass
    // the running maximum second, so a NaN never enters it.
    static inline V max(V a, V b) { return a > b ? a : b; }
    using M = bool;
    static inline M lt(V a, V b) { return a < b; }
    static inline V fma_where(M m, V a, V b, V c) { return m ? a * b + c : c; }
    static inline float hsum(V v) { return v; }
    static inline float hmax(V v) { return v; }
    static inline void hsum_many(const V* a, int n, float* out) {
        for (int i = 0; i < n; ++i) out[i] = a[i];
    }
    static inline V exp2(V x) { return __builtin_exp2f(x); }
    static inline float exp2_scalar(float x) { return __builtin_exp2f(x); }
};

#include "backends/cpu/attention_kernels.inl"
#include "backends/cpu/kernel_table_entries.inl"

inline Simd::V Simd::load_e4m3(const uint8_t* p) { return e4m3_raw_scalar(*p); }

}  // namespace scalar_isa

const KernelTable& scalar_kernels() { return scalar_isa::make_table(Isa::Scalar, "scalar"); }

}  // namespace gqla::cpu

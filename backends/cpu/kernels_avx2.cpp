// SPDX-License-Identifier: Apache-2.0
// AVX2 + FMA + F16C kernels: 8 f32 lanes, 16 vector registers. Tile sizes
// keep the accumulators plus operands within the 16 ymm registers.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>  // std::integral_constant, used by attention_kernels.inl

#include "backends/cpu/kernel_table.hpp"
#include "gqla/gqla.h"

namespace gqla::cpu {
namespace avx2_isa {

struct Simd {
    using V = __m256;
    static constexpr int W = 8;
    static constexpr int kVectorRegisters = 16;  // ymm0-15
    static constexpr int kScoreRows = 4;         // GQA scores: 4 rows x 2 tokens = 8 accumulators
    static constexpr int kScoreTokens = 2;
    static constexpr int kPvChunks = 2;      // GQA values: 4 rows x 2 vectors
    static constexpr int kAbsorbTokens = 6;  // absorb scores: 6 tokens x 2 row vectors
    static constexpr int kAbsorbRowVecs = 2;
    static constexpr int kAbsorbDims = 6;  // absorb values: 6 latent dims x 2 row vectors
    static constexpr int kGemmVecs = 2;
    static constexpr int kGemvVecs = 8;  // single-row GEMM: vectors per row pass

    static inline V zero() { return _mm256_setzero_ps(); }
    static inline V set1(float x) { return _mm256_set1_ps(x); }
    static inline V load(const float* p) { return _mm256_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static inline V load_f16(const uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static inline V load_bf16(const uint16_t* p) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    // 2W bf16 elements as two vectors: even-indexed and odd-indexed ones.
    // A bf16 is the top half of an f32, so within each 32-bit pair a shift
    // widens the even element and a mask the odd one: one ALU op per 8
    // values, no cross-lane shuffle (load_bf16 needs a widening shuffle and a
    // shift). The caller works in that "pair order" (see to_pair_order in
    // attention_kernels.inl).
    static inline void load_bf16_pair(const uint16_t* p, V& even, V& odd) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
        odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    static inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
    // e4m3 bytes to f32 divided by 256 (see the AVX-512 layer): shifts into
    // f16 bits, the NaN code made an f16 NaN by a compare, F16C widens.
    static inline V load_e4m3(const uint8_t* p) {
        const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        const __m128i t = _mm_slli_epi16(x, 7);
        __m128i h = _mm_add_epi16(t, _mm_and_si128(t, _mm_set1_epi16(0x4000)));
        const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(t, _mm_set1_epi16(0x3f80)), _mm_set1_epi16(0x3f80));
        h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7e00)));
        return _mm256_cvtph_ps(h);
    }
    static inline void load_e4m3_pair(const uint8_t* p, V& lo, V& hi) {
        lo = load_e4m3(p);
        hi = load_e4m3(p + W);
    }
    static inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static inline V add(V a, V b) { return _mm256_add_ps(a, b); }
    static inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    // b when either is NaN (MAXPS returns its second operand then): the
    // kernels pass the running maximum second, so a NaN never enters it.
    static inline V max(V a, V b) { return _mm256_max_ps(a, b); }
    // Lane masks: m = a < b (false for NaN); fma_where keeps c where m is
    // false, so a masked lane never sees a * b, not even a NaN.
    using M = __m256;
    static inline M lt(V a, V b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
    static inline V fma_where(M m, V a, V b, V c) { return _mm256_blendv_ps(c, _mm256_fmadd_ps(a, b, c), m); }
    static inline float hmax(V v) {
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        return _mm_cvtss_f32(m);
    }
    static inline float hsum(V v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    // Four horizontal sums at once through a hadd tree.
    static inline void hsum_many(const V* a, int n, float* out) {
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            __m256 t0 = _mm256_hadd_ps(a[i], a[i + 1]);
            __m256 t1 = _mm256_hadd_ps(a[i + 2], a[i + 3]);
            __m256 t2 = _mm256_hadd_ps(t0, t1);
            _mm_storeu_ps(out + i, _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1)));
        }
        for (; i < n; ++i) out[i] = hsum(a[i]);
    }
    // 2^x: round-to-nearest split, degree-7 polynomial of e^(f ln2) on
    // |f| <= 1/2 (relative error ~5e-9); inputs below -126 give exactly 0,
    // above 127 2^127. NaN gives NaN: `keep` is true for unordered inputs and
    // the clamps take x as their second operand, which MINPS/MAXPS return
    // when either operand is NaN (a NaN score must reach the output).
    static inline V exp2(V x) {
        const V keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_NLT_UQ);
        x = _mm256_max_ps(_mm256_set1_ps(-126.0f), _mm256_min_ps(_mm256_set1_ps(127.0f), x));
        const V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const V f = _mm256_mul_ps(_mm256_sub_ps(x, n), _mm256_set1_ps(0.6931471805599453f));
        V p = _mm256_set1_ps(1.0f / 5040.0f);
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 720.0f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120.0f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24.0f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6.0f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
        p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
    }
    static inline float exp2_scalar(float x) { return __builtin_exp2f(x); }
};

#include "backends/cpu/attention_kernels.inl"
#include "backends/cpu/kernel_table_entries.inl"

}  // namespace avx2_isa

const KernelTable& avx2_kernels() { return avx2_isa::make_table(Isa::Avx2, "avx2"); }

}  // namespace gqla::cpu

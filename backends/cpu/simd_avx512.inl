// SPDX-License-Identifier: Apache-2.0
// The AVX-512 (F/BW/VL/DQ) vector layer of the CPU kernels: 16 f32 lanes,
// 32 vector registers, which allow larger register tiles than AVX2.
// Included inside the namespace of each AVX-512 translation unit (plain and
// BF16-dot), so every unit gets its own copy (see attention_kernels.inl).
struct Simd {
    using V = __m512;
    static constexpr int W = 16;
    static constexpr int kVectorRegisters = 32;  // zmm0-31
    static constexpr int kScoreRows = 4;         // GQA scores: 4 rows x 4 tokens = 16 accumulators
    static constexpr int kScoreTokens = 4;
    static constexpr int kPvChunks = 4;      // GQA values: 4 rows x 4 vectors
    static constexpr int kAbsorbTokens = 8;  // absorb scores: 8 tokens x 2 row vectors
    static constexpr int kAbsorbRowVecs = 2;
    static constexpr int kAbsorbDims = 8;  // absorb values: 8 latent dims x 2 row vectors
    static constexpr int kGemmVecs = 4;
    static constexpr int kGemvVecs = 16;  // single-row GEMM: vectors per row pass

    static inline V zero() { return _mm512_setzero_ps(); }
    static inline V set1(float x) { return _mm512_set1_ps(x); }
    static inline V load(const float* p) { return _mm512_loadu_ps(p); }
    static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static inline V load_f16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static inline V load_bf16(const uint16_t* p) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
    // 2W bf16 elements as even-indexed and odd-indexed vectors (see the
    // AVX2 layer): a shift and a mask instead of a widening shuffle.
    static inline void load_bf16_pair(const uint16_t* p, V& even, V& odd) {
        const __m512i x = _mm512_loadu_si512(p);
        even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    static inline float f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
    // e4m3 bytes to f32 divided by 256 (attention_fp8.inl: kE4m3Raw): the
    // 7 magnitude bits shifted into an f16's exponent and mantissa, the sign
    // moved up by an add, the NaN code (S.1111.111) made an f16 NaN, then
    // F16C widens. No table lookup; the 256 folds into the row scales.
    static inline __m256i e4m3_to_f16_bits(__m256i x) {
        const __m256i t = _mm256_slli_epi16(x, 7);
        const __m256i h = _mm256_add_epi16(t, _mm256_and_si256(t, _mm256_set1_epi16(0x4000)));
        const __mmask16 nan =
            _mm256_cmpeq_epi16_mask(_mm256_and_si256(t, _mm256_set1_epi16(0x3f80)), _mm256_set1_epi16(0x3f80));
        return _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7e00));
    }
    static inline V load_e4m3(const uint8_t* p) {
        const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm512_cvtph_ps(e4m3_to_f16_bits(x));
    }
    // 2W e4m3 elements as two vectors in order (first W, next W).
    static inline void load_e4m3_pair(const uint8_t* p, V& lo, V& hi) {
        const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        const __m512i t = _mm512_slli_epi16(x, 7);
        __m512i h = _mm512_add_epi16(t, _mm512_and_si512(t, _mm512_set1_epi16(0x4000)));
        const __mmask32 nan =
            _mm512_cmpeq_epi16_mask(_mm512_and_si512(t, _mm512_set1_epi16(0x3f80)), _mm512_set1_epi16(0x3f80));
        h = _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7e00));
        lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
    }
    static inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static inline V add(V a, V b) { return _mm512_add_ps(a, b); }
    static inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    // b when either is NaN (as MAXPS): the kernels pass the running maximum
    // second, so a NaN never enters it.
    static inline V max(V a, V b) { return _mm512_max_ps(a, b); }
    // Lane masks: m = a < b (false for NaN); fma_where keeps c where m is
    // false, so a masked lane never sees a * b, not even a NaN.
    using M = __mmask16;
    static inline M lt(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
    static inline V fma_where(M m, V a, V b, V c) { return _mm512_mask3_fmadd_ps(a, b, c, m); }
    static inline __m256 halves(V v) {
        return _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    }
    static inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
    static inline float hmax(V v) { return _mm512_reduce_max_ps(v); }
    // Sixteen horizontal sums at once: each level adds the two halves of a
    // pair of vectors with one shuffle each, so the 16 reductions cost 46
    // shuffles/adds instead of ~5 per vector through 256-bit hadd trees.
    static inline V hsum16(const V* a) {
        V b[8], c[4], d[2];
        for (int i = 0; i < 8; ++i)
            b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                                 _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
        for (int i = 0; i < 4; ++i)
            c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                                 _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
        // 128-bit block k of c[i] now holds 4 partial sums of a[4i + k].
        for (int i = 0; i < 2; ++i)
            d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                                 _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
        const V e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
        // Lane 4k + m of e is the sum of a[4m + k].
        const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        return _mm512_permutexvar_ps(order, e);
    }
    // Groups of 16 through hsum16; the rest folded to 8 lanes, four at once
    // through a hadd tree.
    static inline void hsum_many(const V* a, int n, float* out) {
        int i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, hsum16(a + i));
        for (; i + 4 <= n; i += 4) {
            __m256 t0 = _mm256_hadd_ps(halves(a[i]), halves(a[i + 1]));
            __m256 t1 = _mm256_hadd_ps(halves(a[i + 2]), halves(a[i + 3]));
            __m256 t2 = _mm256_hadd_ps(t0, t1);
            _mm_storeu_ps(out + i, _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1)));
        }
        for (; i < n; ++i) out[i] = hsum(a[i]);
    }
    // 2^x as in the AVX2 kernels (same polynomial), exact 0 below -126 and
    // NaN for NaN (`keep` true for unordered inputs; the clamps take x as
    // their second operand, which VMINPS/VMAXPS return for a NaN operand).
    static inline V exp2(V x) {
        const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
        x = _mm512_max_ps(_mm512_set1_ps(-126.0f), _mm512_min_ps(_mm512_set1_ps(127.0f), x));
        const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const V f = _mm512_mul_ps(_mm512_sub_ps(x, n), _mm512_set1_ps(0.6931471805599453f));
        V p = _mm512_set1_ps(1.0f / 5040.0f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 720.0f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120.0f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24.0f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6.0f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
        const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
        return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(e));
    }
    static inline float exp2_scalar(float x) { return __builtin_exp2f(x); }
};

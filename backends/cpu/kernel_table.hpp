// SPDX-License-Identifier: Apache-2.0
// The per-ISA kernel table of the CPU backend. Each ISA translation unit
// (scalar, AVX2+FMA+F16C, AVX-512) fills one table from the same templated
// kernel source; dispatch picks a table once per context from the probe's
// ISA bits. Everything here is plain data so the ISA units share no inline
// code that could be compiled with the wrong instruction set.
#pragma once

#include <cstdint>

namespace gqla::cpu {

// Avx512Bf16: AVX-512 plus AVX512-BF16 dot products (bf16 caches only).
// Amx: the AVX-512 table with the absorb form of bf16 and 8-bit latents on
// AMX tiles (AMX-TILE + AMX-BF16; kernels_amx.cpp).
enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3, Amx = 4 };

// Tokens handled per online-softmax step; also the row length of the score
// scratch. A step never crosses a page boundary.
constexpr int kGqaTokenBlock = 64;
constexpr int kAbsorbTokenBlock = 32;
// GqaItem::scratch in floats, for `rows` query rows and keys of dk elements:
// the score block and the per-row rescale, then room for the rows' queries
// in bf16 twice (high and low parts) and their probabilities as bf16 pairs
// (kernels with bf16 dot products; each key segment padded to 32 elements).
// Offsets are multiples of 16 floats.
// Workspace parts start at multiples of 16 floats (64 bytes).
constexpr int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
constexpr int64_t gqa_scratch_scores_floats(int64_t rows) { return round16(rows * (kGqaTokenBlock + 1)); }
constexpr int64_t gqa_bf16_query_ld(int64_t d1, int64_t d2) { return (d1 + 31) / 32 * 32 + (d2 + 31) / 32 * 32; }
// ... and last the rows' f32 queries in pair order (f32-arithmetic kernels on
// bf16 caches: see pair_order in attention_kernels.inl).
// (Each query copy has room for rows x (dk padded to 32, + 96) bf16: the
// 8-bit VBMI kernel pads its e4m3 segment to 64 and the rope segment to 32.)
constexpr int64_t gqa_scratch_pair_query_offset(int64_t rows, int64_t dk) {
    return gqa_scratch_scores_floats(rows) + 2 * round16(rows * ((dk + 31) / 32 * 32 + 96) / 2) +
           round16(rows * kGqaTokenBlock / 2);
}
// ... then, for 8-bit caches, the rope-key scores of the block (GQLA GQA
// path: kr is bf16 beside the e4m3 keys) and the block's scale factors.
constexpr int64_t gqa_scratch_fp8_offset(int64_t rows, int64_t dk) {
    return gqa_scratch_pair_query_offset(rows, dk) + round16(rows * dk);
}
constexpr int64_t gqa_scratch_floats(int64_t rows, int64_t dk) {
    return gqa_scratch_fp8_offset(rows, dk) + round16(rows * kGqaTokenBlock) + round16(2 * kGqaTokenBlock);
}

// Query rows of the absorb kernel live in SIMD lanes; blocks are padded to
// this multiple (a multiple of every vector width).
constexpr int kAbsorbRowAlign = 16;

// Wide GQA items (many query rows: prefill chunks) put their rows in SIMD
// lanes, as the absorb kernel does, so no score needs a horizontal sum and
// the softmax is lane-parallel. At most kWideRows rows per item.
constexpr int kWideRows = 64;
constexpr int kWideTokenBlock = 32;
// GqaItem::scratch of gqa_attend_wide for keys [d1 | d2] and values dv,
// rows <= kWideRows (rows_pad = rows rounded up to kAbsorbRowAlign):
//   queries transposed     [d1 + d2 + 2][rows_pad] (f32, or bf16 pairs)
//   scores / probabilities [kWideTokenBlock + 1][rows_pad] (+ rescale)
//   keys widened to f32    [kWideTokenBlock][d1 + d2]
//   values widened to f32  [kWideTokenBlock][dv]
//   value / probability pairs (bf16 dot products) [kWideTokenBlock / 2][dv + rows_pad]
//   accumulator transposed [dv][rows_pad]
//   m, l, visible counts, limits (int64)  [6][rows_pad]
constexpr int64_t gqa_wide_scratch_floats(int64_t d1, int64_t d2, int64_t dv) {
    return round16((d1 + d2 + 2) * kWideRows) + round16((kWideTokenBlock + 1) * kWideRows) +
           round16(kWideTokenBlock * (d1 + d2)) + round16(kWideTokenBlock * dv) +
           round16(kWideTokenBlock / 2 * (dv + kWideRows)) + round16(dv * kWideRows) + round16(6 * kWideRows);
}
// Elements of the latent sharing one scale in an 8-bit cache
// (core/config.hpp: kFp8LatentBlock; a multiple of every vector width).
constexpr int kFp8LatentBlockElems = 128;

// Largest row block (lanes) of one absorb work item.
constexpr int kAbsorbMaxRowBlock = 64;

// One work item of the GQA-form kernel: the n_rep * s_q query rows of one
// (sequence, KV group) over the cache positions [t0, t1). The key of token j
// is the concatenation [k1[j] (d1) | k2[j] (d2)] (d2 = 0 for plain GQA; the
// shared rope key for the GQLA GQA path); the value is v[j] (dv). Addresses
// are element offsets in the cache dtype: page p, slot s of segment x starts
// at x + p * x_page_stride + s * dx.
struct GqaItem {
    int rows;
    const float* q;  // [rows][q_ld], pre-multiplied by scale * log2(e)
    int q_ld;
    // That factor (softmax scale * log2(e)); 0 when unknown. The bf16-dot
    // kernels divide it out to round the caller's own query values, and
    // multiply it back into the f32 scores.
    float q_scale = 0.0f;
    float score_scale() const { return q_scale > 0.0f ? q_scale : 1.0f; }
    float query_unscale() const { return q_scale > 0.0f ? 1.0f / q_scale : 1.0f; }
    const int64_t* row_limit;  // [rows]: last position each row may attend
    const int32_t* page_table;
    int page_size;
    int64_t t0, t1;
    const void* k1;
    int64_t k1_page_stride;
    int d1;
    const void* k2;
    int64_t k2_page_stride;
    int d2;
    const void* v;
    int64_t v_page_stride;
    int dv;
    float* acc;      // out [rows][dv]: unnormalised sum of p * v
    float* m;        // out [rows]: running max (log2 domain)
    float* l;        // out [rows]: sum of exp2(s - m)
    float* scratch;  // gqa_scratch_floats(rows, d1 + d2) floats
    // 8-bit caches (docs/fp8-cache.md): k1 and v are e4m3 with one f32 scale
    // per token, the one of page p, slot s at x_scale[p * x_scale_page_stride
    // + s]; k2 (the rope key) is then bf16. Unused for other dtypes.
    const float* k1_scale = nullptr;
    int64_t k1_scale_page_stride = 0;
    const float* v_scale = nullptr;
    int64_t v_scale_page_stride = 0;
    // Gathered tokens (sparse attention): when k1_rows is set, token t of
    // [t0, t1) has its rows at k1_rows[t], k2_rows[t] (when d2 > 0) and
    // v_rows[t], anywhere in memory; page_table, page_size and the page
    // strides are then unused, and blocks are not cut at page ends. f32,
    // f16 and bf16 caches; 8-bit ones where the table says so
    // (fp8_gqa_lists), with token t's scales at k1_scale[t] and v_scale[t].
    const void* const* k1_rows = nullptr;
    const void* const* k2_rows = nullptr;
    const void* const* v_rows = nullptr;
};

// One work item of the absorb kernel: a block of query rows (heads x query
// tokens of one sequence, in lanes) against the latent tokens [t0, t1). Key
// of token j: [c[j] (r) | kr[j] (d_r)]; value: c[j].
struct AbsorbItem {
    int rows_pad;     // multiple of kAbsorbRowAlign
    const float* qt;  // [r + d_r][qt_ld], column block of this item, pre-scaled
    int64_t qt_ld;
    const int64_t* row_limit;  // [rows_pad]
    const int32_t* page_table;
    int page_size;
    int64_t t0, t1;
    const void* c;
    int64_t c_page_stride;
    int r;
    const void* kr;
    int64_t kr_page_stride;
    int d_r;
    float* acc;       // out [r][rows_pad]: unnormalised sum of p * c (transposed)
    float* m;         // out [rows_pad]
    float* l;         // out [rows_pad]
    float* ctile;     // kAbsorbTokenBlock * (r + d_r) floats
    float* stile;     // kAbsorbTokenBlock * rows_pad + rows_pad floats
    uint32_t* pairs;  // absorb_pair_scratch_floats(r + d_r, r, rows_pad) words (bf16-dot kernels)
    // 8-bit caches: c is e4m3 with c_scale_blocks f32 scales per token (one
    // per kFp8LatentBlock elements), those of page p, slot s at
    // c_scale[p * c_scale_page_stride + s * c_scale_blocks]; kr is bf16.
    const float* c_scale = nullptr;
    int64_t c_scale_page_stride = 0;
    int c_scale_blocks = 0;
    // 8-bit caches, bf16-dot kernels: kAbsorbTokenBlock x r bf16 staging
    // (absorb_fp8_stage_floats(r) floats past the pair scratch).
    uint16_t* stage = nullptr;
};
constexpr int64_t absorb_fp8_stage_floats(int64_t r) { return round16(kAbsorbTokenBlock * r / 2 + 1); }

// Scratch of the bf16-dot and AMX absorb kernels, in 4-byte words: the
// queries as bf16 pairs over the key dim [(K + 1) / 2][rows], one block's
// latent as pairs over tokens [kAbsorbTokenBlock / 2][r], its probabilities
// as pairs over tokens [kAbsorbTokenBlock / 2][rows], the queries' low parts
// as pairs [(K + 1) / 2][rows], and the AMX kernels' row-major accumulator
// [rows][r] (f32); each part 16-aligned.
constexpr int64_t absorb_pair_scratch_floats(int64_t K, int64_t r, int64_t rows) {
    return 2 * round16((K + 1) / 2 * rows) + round16(kAbsorbTokenBlock / 2 * r) +
           round16(kAbsorbTokenBlock / 2 * rows) + round16(r * rows);
}

// Up-projection of a block of latent rows for one group (the GQA_TRANSIENT
// form): out[j][n] = sum_k c[j][k] * W[n][k] for j < tokens, n < N, where W
// is the group's [N][r] block of W_UKV (d_c rows of W_UK, then d_v of W_UV).
// f32 accumulation; W in f32, or in bf16 when that holds it exactly.
struct ExpandItem {
    int tokens;                 // rows of this block, <= kExpandTokens
    const void* const* latent;  // [tokens] rows of r elements of the cache dtype
    int r;
    const void* w;  // [N][r]
    int w_bf16;     // w is bf16 (else f32)
    int N;
    float* out;      // [tokens][N]
    float* scratch;  // expand_scratch_floats(r, N)
};
// Room for a block of kExpandTokens rows.
constexpr int kExpandTokens = 64;
constexpr int64_t expand_scratch_floats(int64_t r, int64_t N) {
    return round16((kExpandTokens + 1) * r) + round16(N * kExpandTokens);
}

using GqaAttendFn = void (*)(const GqaItem&);
using ExpandFn = void (*)(const ExpandItem&);
using AbsorbAttendFn = void (*)(const AbsorbItem&);
// C[M,N] = A[M,K] * B[K,N]; row-major with leading dimensions, f32.
using GemmFn = void (*)(int M, int N, int K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                        int64_t ldc);
// The same with B in bf16 (widened in registers, f32 accumulation).
using GemmBf16Fn = void (*)(int M, int N, int K, const float* A, int64_t lda, const uint16_t* B, int64_t ldb, float* C,
                            int64_t ldc);
// dst[k] = e4m3 src[k] * scales[k / block] for k < n (8-bit cache rows to
// f32: expansion and up-projection inputs).
using Fp8RowFn = void (*)(const uint8_t* src, int n, const float* scales, int block, float* dst);
// The same rows rounded to bf16 (nearest even, as f32_to_bf16): sparse calls
// over an 8-bit cache widen their listed rows into bf16 staging.

struct KernelTable {
    Isa isa;
    const char* name;
    // Indexed by cache dtype: [0] f32, [1] f16, [2] bf16, [3] fp8 e4m3
    // (gqla_dtype - 1).
    GqaAttendFn gqa_attend[4];
    // The same item with its rows in SIMD lanes (rows <= kWideRows, scratch
    // gqa_wide_scratch_floats): many rows per item, as prefill chunks have.
    GqaAttendFn gqa_attend_wide[4];
    AbsorbAttendFn absorb_attend[4];
    // Up-projection of f32/f16/bf16 latent rows; an 8-bit latent is widened
    // with fp8_rows first and up-projected as f32 (no [3] entry).
    ExpandFn expand[3];
    GemmFn gemm;
    GemmBf16Fn gemm_bf16;
    Fp8RowFn fp8_rows;
    // gqa_attend[3] reads gathered e4m3 rows (GqaItem::k1_rows) of items
    // with d1 + d2 >= 32 (fp8_gqa_reads_lists): the f32 tables' kernel and
    // the VBMI one; elsewhere (the AVX512-BF16 table without VBMI, and
    // narrower rows) sparse calls widen the listed rows into f32 first.
    bool fp8_gqa_lists = false;
};

inline bool fp8_gqa_reads_lists(const KernelTable& k, int d1, int d2) { return k.fp8_gqa_lists && d1 + d2 >= 32; }

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
// The AVX512-BF16 table. Its GQA-form decode kernel for bf16 caches sums
// the values with dot products and takes the scores either by dot products
// too (queries rounded to bf16, split in two parts unless exact) or by f32
// FMAs over keys widened in registers. Which runs faster depends on how the
// core issues the two instructions, so bf16_gqa_scores() races them once
// per process (~1 ms, gqa_kernel_race.hpp); GQLA_CPU_BF16_DOT_SCORES=1
// forces the dot products, =0 the FMAs (read on every call).
enum class Bf16GqaScores { Dot, Fma };
const KernelTable& avx512bf16_kernels(Bf16GqaScores scores);
Bf16GqaScores bf16_gqa_scores();
const KernelTable& avx512bf16_kernels();  // avx512bf16_kernels(bf16_gqa_scores())

// The AMX table, or nullptr where the host lacks AMX-TILE/AMX-BF16 (or
// AVX512-BF16), the kernel does not grant the tile state (Linux
// arch_prctl ARCH_REQ_XCOMP_PERM), the GQLA_MAX_ISA cap excludes
// AVX512-BF16, or GQLA_CPU_AMX=0.
const KernelTable* amx_kernels();

// Best table the host supports (after the GQLA_MAX_ISA cap of the probe).
const KernelTable& best_kernels();
// Table for `isa`, or nullptr when the host lacks it.
const KernelTable* kernels_for(Isa isa);

}  // namespace gqla::cpu

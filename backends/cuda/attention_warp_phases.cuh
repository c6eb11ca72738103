// SPDX-License-Identifier: Apache-2.0
// The phases of the per-warp decode kernel (attention_warp_kernel.cuh), each
// a device function with explicit parameters: the query staging, the K/V
// chunk copies (and the 8-bit caches' widening), the score product, the
// online softmax, the scrub of hidden value rows, the value scales of 8-bit
// caches, the value product, and the merge of the warps with the epilogue.
// The kernel only orders them (stages, waits, barriers).
#pragma once

#include "attention_common.cuh"
#include "attention_kernels.hpp"  // kWarpKernelMaxValueDim
#include "fp8_e4m3.cuh"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"
#include "row_copies.cuh"

namespace gqla::cuda {

constexpr int kWarpKernelWarps = 4;
constexpr int kWarpKernelTile = 16 * kWarpKernelWarps;  // tokens per CTA step
constexpr int kWarpKernelMaxDv = 128;
static_assert(kWarpKernelMaxDv == kWarpKernelMaxValueDim, "attention_kernels.hpp says the same");
constexpr int kWarpKernelMinStages = 2;
constexpr int kWarpKernelMaxStages = 4;

struct WarpLayout {
    int k_stride, v_stride, q_off, kv_off, warp_bytes, o_off, f_off, bytes;
    // 8-bit caches: a warp's bf16 tile, then its stages of stored bytes
    // (16 key rows of dk bytes, 16 value rows of dv bytes, 16 + 16 scales).
    int tile_bytes, raw_stage_bytes;
};

__host__ __device__ inline int max_int(int a, int b) { return a > b ? a : b; }
__host__ __device__ inline WarpLayout warp_layout(int dk, int dv, bool alias, int stages, bool fp8 = false) {
    WarpLayout L{};
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    L.k_stride = dk16 + 8;
    L.v_stride = alias ? L.k_stride : dv16 + 8;
    const int stage_bytes = 16 * L.k_stride * 2 + (alias ? 0 : 16 * L.v_stride * 2);
    L.q_off = 0;
    L.kv_off = (16 * L.k_stride * 2 + 127) / 128 * 128;
    L.warp_bytes = stages * stage_bytes;
    if (fp8) {
        L.tile_bytes = stage_bytes;
        L.raw_stage_bytes = 16 * dk16 + 16 * dv16 + 2 * 16 * 4;
        L.warp_bytes = L.tile_bytes + stages * L.raw_stage_bytes;
    }
    // The merged O reuses the K/V stages: it is only written after every warp
    // has finished its tokens.
    L.o_off = L.kv_off;
    L.f_off = L.kv_off + max_int(kWarpKernelWarps * L.warp_bytes, 16 * dv16 * 4);
    // per-warp m, l; merged l, m; the query rows' scales (8-bit caches)
    L.bytes = L.f_off + (2 * kWarpKernelWarps * 16 + 3 * 16) * 4;
    return L;
}

namespace decode_warp {

constexpr int kThreads = kWarpKernelWarps * 32;

// One warp's stages in shared memory: ST stages of [16 key rows | 16 value
// rows] of T (8-bit caches: one tile of T, then ST stages of stored bytes).
template <typename T>
struct WarpStages {
    T* tiles;
    unsigned char* raw;
    int stage_elems, raw_stage_bytes;
    int k_stride, v_stride, dk16, dv16;

    __device__ __forceinline__ T* keys(int stage) const { return tiles + stage * stage_elems; }
    // 8-bit caches: stage `stage`'s stored keys, values, and [16] key then [16] value scales.
    __device__ __forceinline__ unsigned char* raw_k(int stage) const { return raw + stage * raw_stage_bytes; }
    __device__ __forceinline__ unsigned char* raw_v(int stage) const { return raw_k(stage) + 16 * dk16; }
    __device__ __forceinline__ float* raw_scales(int stage) const {
        return reinterpret_cast<float*>(raw_v(stage) + 16 * dv16);
    }
};

// Query staging: the CTA's 16 query rows -> sQ (any io dtype -> T), pad
// columns zero. 8-bit caches: each row divided by the power of two that puts
// it in [2^14, 2^15), kept in sRowQ.
template <typename T, bool FP8>
__device__ __forceinline__ void stage_queries(const AttentionParams& p, const CtaWork& w, T* sQ, float* sRowQ,
                                              int k_stride, int dk, int dk16, int tid) {
    const int rb = w.rb, g = w.g, b = w.b;
    if constexpr (FP8) {
        // 8 threads a row: the row's largest finite magnitude, then the row
        // divided by the power of two 2^e that puts it in [2^14, 2^15).
        static_assert(kThreads == 16 * 8, "8 threads per query row");
        const int m = tid >> 3, sub = tid & 7, mg = rb * 16 + m;
        const bool real = mg < p.rows;
        int64_t q0 = 0;
        if (real) {
            const auto [qi, h] = query_head(p, g, mg);
            q0 = row_offset(p.qa, b, qi, h);
        }
        float amax = 0.f;
        for (int c = sub; real && c < dk; c += 8) {
            const float a = fabsf(load_elem(p.q, p.q_dtype, q0 + c));
            if (a <= 3.40282347e38f) amax = fmaxf(amax, a);
        }
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const int e = f16_query_exponent(amax);
        for (int c = sub; c < dk16; c += 8)
            sQ[m * k_stride + c] = from_float<T>(real && c < dk ? ldexpf(load_elem(p.q, p.q_dtype, q0 + c), -e) : 0.f);
        if (sub == 0) sRowQ[m] = ldexpf(1.f, e);
    } else {
        for (int i = tid; i < 16 * dk16; i += kThreads) {
            int m = i / dk16, c = i - m * dk16, mg = rb * 16 + m;
            float v = 0.f;
            if (mg < p.rows && c < dk) {
                const auto [qi, h] = query_head(p, g, mg);
                v = load_elem(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + c);
            }
            sQ[m * k_stride + c] = from_float<T>(v);
        }
    }
}

// Pad columns of the warp's stages (8-bit caches: of its one tile) set to
// zero; cp.async never writes them.
template <typename T, int ST, bool FP8>
__device__ __forceinline__ void zero_stage_pads(const AttentionParams& p, const WarpStages<T>& ws, int dk, int dv,
                                                int lane) {
    for (int s = 0; s < (FP8 ? 1 : ST); ++s) {
        T* k = ws.keys(s);
        for (int i = lane; i < 16 * (ws.dk16 - dk); i += 32)
            k[(i / (ws.dk16 - dk)) * ws.k_stride + dk + i % (ws.dk16 - dk)] = from_float<T>(0.f);
        if (!p.v_aliases_k1) {
            T* v = k + 16 * ws.k_stride;
            for (int i = lane; i < 16 * (ws.dv16 - dv); i += 32)
                v[(i / (ws.dv16 - dv)) * ws.v_stride + dv + i % (ws.dv16 - dv)] = from_float<T>(0.f);
        }
    }
}

// Token base (page << 32 | slot) of row `row` of the warp's chunk c, which
// covers tokens (range.begin + c) * 64 + warp * 16 + [0, 16); -1 for the
// upper half-warp (half 1), past the split's chunks and past the end.
__device__ __forceinline__ int64_t chunk_row_base(const AttentionParams& p, const CtaWork& w, int c, int warp, int row,
                                                  int half) {
    const int j = (w.range.begin + c) * kWarpKernelTile + warp * 16 + row;
    return (half == 0 && c < w.range.end - w.range.begin && j < w.length) ? cta_token(p, w, j) : -1;
}

// Where a chunk's rows are read from (attention_common.cuh).
template <typename T>
using ChunkSources = KvRowSources<T>;

// Chunk copy into stage `stage`: this lane's part of row `row`'s keys and
// values from its token base tb (-1: zero-filled). 8-bit caches: the stored
// bytes and the row's two scales (GQA kind: k2 absent).
template <typename T, bool FP8>
__device__ __forceinline__ void copy_chunk(const AttentionParams& p, const ChunkSources<T>& src,
                                           const WarpStages<T>& ws, int stage, int64_t tb, int g, int row, int half,
                                           int lane) {
    if constexpr (FP8) {
        const bool valid = tb >= 0;
        const int64_t base = valid ? tb : 0;
        const int64_t page = base >> 32, slot = base & 0xffffffff;
        const unsigned char* kb = static_cast<const unsigned char*>(p.k1.base);
        const unsigned char* vbb = static_cast<const unsigned char*>(p.v.base);
        copy_scattered_byte_rows16(ws.raw_k(stage), ws.dk16, valid ? kb + pool_offset(p.k1, base, g) : nullptr, src.dk1,
                                   kb, lane);
        copy_scattered_byte_rows16(ws.raw_v(stage), ws.dv16, valid ? vbb + pool_offset(p.v, base, g) : nullptr, src.dv,
                                   vbb, lane);
        if (half == 0) {
            float* sc = ws.raw_scales(stage);
            cp_async_4(sc + row, kb + pool_scale_offset(p.k1, page, g, p.page_size, slot), valid);
            cp_async_4(sc + 16 + row, vbb + pool_scale_offset(p.v, page, g, p.page_size, slot), valid);
        }
        return;
    }
    T* k = ws.keys(stage);
    T* v = k + 16 * ws.k_stride;
    const bool valid = tb >= 0;
    const int64_t base = valid ? tb : 0;
    const SmemRows k_rows{ws.k_stride, false}, v_rows{ws.v_stride, false};
    copy_scattered_rows16(k, k_rows, 0, valid ? src.k1 + pool_offset(p.k1, base, g) : nullptr, src.dk1, src.k1, lane);
    if (src.dk2)
        copy_scattered_rows16(k, k_rows, src.dk1, valid ? src.k2 + pool_offset(p.k2, base, g) : nullptr, src.dk2,
                              src.k2, lane);
    if (!p.v_aliases_k1)
        copy_scattered_rows16(v, v_rows, 0, valid ? src.v + pool_offset(p.v, base, g) : nullptr, src.dv, src.v, lane);
}

// 8-bit caches: stage `stage`'s stored keys and values widened into the f16
// tile (tK, tV), in 8-byte pieces (widths are multiples of 8); the tile's pad
// columns past the width stay zero.
template <typename T>
__device__ __forceinline__ void widen_chunk(const WarpStages<T>& ws, int stage, T* tK, T* tV, int dk1, int dv,
                                            int lane) {
    const unsigned char* rk = ws.raw_k(stage);
    const unsigned char* rv = ws.raw_v(stage);
    for (int piece = lane; piece < 2 * dk1; piece += 32) {  // 16 rows x dk1 / 8 pieces
        const int r = piece / (dk1 / 8), c = (piece - r * (dk1 / 8)) * 8;
        widen8_e4m3_to_f16(rk + r * ws.dk16 + c, tK + r * ws.k_stride + c);
    }
    for (int piece = lane; piece < 2 * dv; piece += 32) {
        const int r = piece / (dv / 8), c = (piece - r * (dv / 8)) * 8;
        widen8_e4m3_to_f16(rv + r * ws.dv16 + c, tV + r * ws.v_stride + c);
    }
    __syncwarp();
}

// Scores: S = Q K^T of the chunk's 16 tokens (their keys in tile `tile` of
// the warp's tiles wK) against the 16 query rows, into two m16n8
// accumulators.
template <typename T>
__device__ __forceinline__ void chunk_scores(float (&s)[2][4], const T* sQ, const T* wK, int tile, int tile_elems,
                                             int k_stride, int dk16, int lane) {
    const T* tK = wK + tile * tile_elems;
    const T* qrow = sQ + (lane & 15) * k_stride + (lane >> 4) * 8;
    const T* krow = tK + ((lane & 7) + ((lane >> 4) << 3)) * k_stride + ((lane >> 3) & 1) * 8;
    for (int kk = 0; kk < dk16; kk += 16) {
        uint32_t a[4], bk[4];
        ldmatrix_x4(a, qrow + kk);
        ldmatrix_x4(bk, krow + kk);
        mma_16816<T>(s[0], a, bk[0], bk[1]);
        mma_16816<T>(s[1], a, bk[2], bk[3]);
    }
}

// 8-bit caches: the scales of this lane's two query rows, and the power of
// two the accumulated outputs are divided by.
struct Fp8Rows {
    float row_q[2];
    ValuePower vp;
};

// Online softmax of the chunk (first token tok0): scores scaled to log2
// units (8-bit caches: times the query row's and the token's key scale) and
// masked, then turned into probabilities in place; the running maxima run_m
// and this lane's partial sums run_l updated, and alpha set to the factor
// the outputs so far are rescaled by.
template <bool FP8>
__device__ __forceinline__ void chunk_softmax(float (&s)[2][4], float (&alpha)[2], float (&run_m)[2], float (&run_l)[2],
                                              const Fp8Rows& fp8, const int (&limit)[2], const float* scales,
                                              const AttentionParams& p, int tok0, int lane) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                int j = tok0 + n * 8 + (lane & 3) * 2 + e;
                float score = s[n][hr * 2 + e];
                if constexpr (FP8) score *= fp8.row_q[hr] * scales[n * 8 + (lane & 3) * 2 + e];
                float v = (j <= limit[hr]) ? score * p.scale_log2 : -INFINITY;
                s[n][hr * 2 + e] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float m_new = fmaxf(run_m[hr], mx);
        alpha[hr] = (m_new == -INFINITY) ? 1.f : exp2_ftz(run_m[hr] - m_new);
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float pe = softmax_weight(s[n][hr * 2 + e], m_new);
                s[n][hr * 2 + e] = pe;
                sum += pe;
            }
        run_l[hr] = run_l[hr] * alpha[hr] + sum;
        run_m[hr] = m_new;
    }
}

// Scrub of the chunk's hidden tokens (some row may not see them; loaded:
// before the end): value rows scrubbed, NaN probabilities for the rows that
// may see a scrubbed one.
template <typename T>
__device__ __forceinline__ void scrub_hidden_tokens(float (&s)[2][4], T* tV, int vstride, int dv, int tok0,
                                                    int first_hidden, int length, const int (&limit)[2], int lane) {
    if (tok0 + 16 > first_hidden && first_hidden < length) {
        const uint32_t bad = scrub_rows(tV, SmemRows{vstride, false}, 16, dv, lane);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int k = n * 8 + (lane & 3) * 2 + e;
                    if (((bad >> k) & 1) && tok0 + k <= limit[hr]) s[n][hr * 2 + e] = quiet_nan();
                }
        __syncwarp();
    }
}

// 8-bit caches, value scales: the outputs so far rescaled through alpha to
// the chunk's power of two (ValuePower), and each probability multiplied by
// its token's value scale over that power.
__device__ __forceinline__ void apply_value_scales(float (&s)[2][4], float (&alpha)[2], Fp8Rows& fp8,
                                                   const float* scales, int lane) {
    float vmax = scales[16 + (lane & 15)];
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
    float inv;
    const float rescale = fp8.vp.advance(vmax, &inv);
    alpha[0] *= rescale;
    alpha[1] *= rescale;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= scales[16 + n * 8 + (lane & 3) * 2 + (e & 1)] * inv;
}

// P V: the outputs rescaled by alpha, then the chunk's probabilities times
// its values added. The S accumulators (m16n8 x2) are exactly the A
// fragment of P (m16k16).
template <typename T, int MAX_NT>
__device__ __forceinline__ void accumulate_values(float (&acc)[MAX_NT][4], const float (&s)[2][4],
                                                  const float (&alpha)[2], const T* tV, int vstride, int dv16,
                                                  int lane) {
    uint32_t pa[4];
    pa[0] = pack_pair(s[0][0], s[0][1], static_cast<T*>(nullptr));
    pa[1] = pack_pair(s[0][2], s[0][3], static_cast<T*>(nullptr));
    pa[2] = pack_pair(s[1][0], s[1][1], static_cast<T*>(nullptr));
    pa[3] = pack_pair(s[1][2], s[1][3], static_cast<T*>(nullptr));
    const T* vrow = tV + ((lane & 7) + ((lane >> 3) & 1) * 8) * vstride + (lane >> 4) * 8;
#pragma unroll
    for (int i = 0; i < MAX_NT; i += 2) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
        acc[i + 1][0] *= alpha[0];
        acc[i + 1][1] *= alpha[0];
        acc[i + 1][2] *= alpha[1];
        acc[i + 1][3] *= alpha[1];
        if (i * 8 < dv16) {
            uint32_t bv[4];
            ldmatrix_x4_trans(bv, vrow + i * 8);
            mma_16816<T>(acc[i], pa, bv[0], bv[1]);
            mma_16816<T>(acc[i + 1], pa, bv[2], bv[3]);
        }
    }
}

// Shared-memory floats of the merge: per-warp m and l, then the merged l
// and m of each row.
struct MergeRows {
    float* warp_m;
    float* warp_l;
    float* row_l;
    float* row_m;
};

// Merge, row statistics: each warp's row maxima and sums published, the
// merged maximum and sum of each row (warp 0), and the factor scale that
// this lane's outputs are multiplied by (8-bit caches: with the outputs'
// power of two). Ends with a CTA barrier.
template <bool FP8>
__device__ __forceinline__ void merge_row_stats(float (&scale)[2], float (&run_m)[2], float (&run_l)[2], int v_exp,
                                                const MergeRows& sm, int tid) {
    const int lane = tid & 31, warp = tid >> 5;
    constexpr int NW = kWarpKernelWarps;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        run_l[hr] += __shfl_xor_sync(0xffffffffu, run_l[hr], 1);
        run_l[hr] += __shfl_xor_sync(0xffffffffu, run_l[hr], 2);
        if ((lane & 3) == 0) {
            sm.warp_m[warp * 16 + (lane >> 2) + hr * 8] = run_m[hr];
            sm.warp_l[warp * 16 + (lane >> 2) + hr * 8] = run_l[hr];
        }
    }
    __syncthreads();
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = (lane >> 2) + hr * 8;
        float M = -INFINITY;
        for (int w = 0; w < NW; ++w) M = fmaxf(M, sm.warp_m[w * 16 + r]);
        scale[hr] = (run_m[hr] == -INFINITY) ? 0.f : ldexpf(exp2_ftz(run_m[hr] - M), FP8 ? v_exp : 0);
        if (warp == 0 && (lane & 3) == 0) {
            float tot = 0.f;
            for (int w = 0; w < NW; ++w) tot += rescaled_sum(sm.warp_m[w * 16 + r], sm.warp_l[w * 16 + r], M);
            sm.row_l[r] = tot;
            sm.row_m[r] = M;
        }
    }
}

// Merge, outputs: sO zeroed, then each warp's outputs times scale added,
// one warp at a time (CTA barriers between).
template <int MAX_NT>
__device__ __forceinline__ void merge_outputs(float* sO, const float (&acc)[MAX_NT][4], const float (&scale)[2],
                                              int dv16, int tid) {
    constexpr int NW = kWarpKernelWarps;
    const int lane = tid & 31, warp = tid >> 5;
    for (int i = tid; i < 16 * dv16; i += kThreads) sO[i] = 0.f;
    __syncthreads();
    for (int w = 0; w < NW; ++w) {
        if (warp == w) {
#pragma unroll
            for (int i = 0; i < MAX_NT; ++i) {
                if (i * 8 >= dv16) continue;
                const int col = i * 8 + (lane & 3) * 2;
                const int r0 = lane >> 2;
                sO[r0 * dv16 + col] += acc[i][0] * scale[0];
                sO[r0 * dv16 + col + 1] += acc[i][1] * scale[0];
                sO[(r0 + 8) * dv16 + col] += acc[i][2] * scale[1];
                sO[(r0 + 8) * dv16 + col + 1] += acc[i][3] * scale[1];
            }
        }
        __syncthreads();
    }
}

// Epilogue: the merged rows normalized to o (or to the split partials),
// then each row's lse.
__device__ __forceinline__ void write_rows(const AttentionParams& p, const CtaWork& w, const float* sO,
                                           const MergeRows& sm, int dv, int dv16, int tid) {
    const int rb = w.rb, g = w.g, b = w.b, split = w.split;
    for (int i = tid; i < 16 * dv; i += kThreads) {
        const int m = i / dv, col = i - m * dv, mg = rb * 16 + m;
        if (mg >= p.rows) continue;
        const float l = sm.row_l[m];
        const auto [qi, h] = query_head(p, g, mg);
        write_output(p, split, b, qi, h, col, normalized(sO[m * dv16 + col], l));
    }
    if (tid < 16) {
        const int mg = rb * 16 + tid;
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, g, mg);
            write_row_lse(p, split, b, qi, h, sm.row_m[tid], sm.row_l[tid]);
        }
    }
}

}  // namespace decode_warp
}  // namespace gqla::cuda

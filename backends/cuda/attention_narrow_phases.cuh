// SPDX-License-Identifier: Apache-2.0
// The phases of the narrow-group decode kernel (attention_narrow_kernel.cuh)
// past its K/V copies (attention_narrow_ring.cuh), each a device function
// with explicit parameters: where a CTA's rows lie, the staging of the query
// rows, the score product S^T = K Q^T, the online softmax, the scrub of
// hidden value rows, the value product O^T += V^T P^T, the merge of the
// warps and the epilogue. The kernel only orders them.
#pragma once

#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "attention_narrow_layout.cuh"
#include "attention_narrow_ring.cuh"
#include "cluster_merge.cuh"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"

namespace gqla::cuda::narrow {

// The CTA's regions for merging its warps (and a cluster's CTAs) in shared memory.
struct MergeSmem {
    float* warp_o;           // [NW][kNarrowRows][o_stride]: each warp's rescaled O^T (over the slots)
    float* o;                // merged, for the cluster merge
    float* warp_m;           // row maxima per warp and row
    float* warp_l;           // row sums per warp and row
    float* row_l;            // per CTA row: the merged sum
    float* row_m;            // and maximum
    int64_t* row_out;        // and output offset
    unsigned char* cluster;  // a cluster launch's merge region
};

// Where the merge regions lie in the CTA's shared memory.
template <class S>
__device__ __forceinline__ MergeSmem merge_smem(unsigned char* smem, const NarrowLayout& L) {
    MergeSmem m;
    m.warp_o = reinterpret_cast<float*>(smem + L.o_off);
    m.o = m.warp_o + S::NW * kNarrowRows * L.o_stride;
    m.warp_m = reinterpret_cast<float*>(smem + L.f_off);
    m.warp_l = m.warp_m + S::NW * kNarrowRows;
    m.row_l = m.warp_l + S::NW * kNarrowRows;
    m.row_m = m.row_l + S::CTA_ROWS;
    m.row_out = reinterpret_cast<int64_t*>(m.row_m + S::CTA_ROWS);  // 8-byte aligned: f_off + 64 (NW + RB)
    m.cluster = smem + L.merge_off;
    return m;
}

// The group's query rows of this CTA and warp.
struct QueryRows {
    int grp, b, split;
    int cta_row0, cta_rows;  // the CTA's rows [cta_row0, cta_row0 + cta_rows)
    int row0, rows_here;     // the warp's rows [row0, row0 + rows_here)
};

// grid.x = groups x CTA row blocks: a warp's rows are kNarrowRows of the
// group's, but in the group's last block (none past it).
template <class S>
__device__ __forceinline__ QueryRows query_rows(const AttentionParams& p, const CtaWork& w, int rbw) {
    QueryRows q;
    q.grp = w.g;
    q.b = w.b;
    q.split = w.split;
    q.cta_row0 = w.rb * S::CTA_ROWS;
    q.cta_rows = min(S::CTA_ROWS, p.rows - q.cta_row0);
    q.row0 = q.cta_row0 + rbw * kNarrowRows;
    q.rows_here = max(0, min(kNarrowRows, p.rows - q.row0));
    return q;
}

// Where row block `block` stages its query rows: its ring's last slot.
template <class S>
__device__ __forceinline__ typename S::T* staged_rows(unsigned char* smem, const NarrowLayout& L, int block) {
    return reinterpret_cast<typename S::T*>(smem + block * L.warp_bytes) + (S::R - 1) * L.slot_elems;
}

// Query staging: the CTA's query rows (any io dtype -> T), with whole-piece
// vector loads, into shared memory (rows dk16 + 8 elements apart).
template <class S>
__device__ __forceinline__ void stage_queries(const AttentionParams& p, unsigned char* smem, const NarrowLayout& L,
                                              const Widths& d, const QueryRows& q, int tid) {
    using T = typename S::T;
    const int q_stride = d.dk16() + 8, pieces = d.dk16() / 8;
    for (int i = tid; i < S::CTA_ROWS * pieces; i += S::NT) {
        const int r = i / pieces, c = (i - r * pieces) * 8;
        float v[8];
        int64_t qoff = 0;
        int n = 0;
        if (r < q.cta_rows) {
            const QueryHead qh = query_head(p, q.grp, q.cta_row0 + r);
            qoff = row_offset(p.qa, q.b, qh.qi, qh.h) + c;
            n = min(8, d.dk - c);
        }
        load_elems8(p.q, p.q_dtype, qoff, n, v);
        *reinterpret_cast<uint4*>(staged_rows<S>(smem, L, r / kNarrowRows) + (r % kNarrowRows) * q_stride + c) =
            pack_eight<T>(v);
    }
}

// Where each CTA row's output goes (o, or this split's partial row).
__device__ __forceinline__ void store_row_outputs(const AttentionParams& p, const QueryRows& q, int64_t* row_out,
                                                  const Lane& ln) {
    const int tid = ln.tid;
    if (tid < q.cta_rows) {
        const QueryHead qh = query_head(p, q.grp, q.cta_row0 + tid);
        const bool whole = p.num_splits == 1 || p.cluster_merge;
        row_out[tid] = whole ? row_offset(p.oa, q.b, qh.qi, qh.h) : partial_row(p, q.split, q.b, qh.qi, qh.h) * p.v.dim;
    }
}

// Q^T as B fragments from the staged rows: b0 = Q[row fr][16ks + 2fc, +1],
// b1 = the same +8; then the rings' last slots are free for their halves.
template <class S>
__device__ __forceinline__ void load_query_fragments(uint32_t (&qb)[S::MAX_KS][2], unsigned char* smem,
                                                     const NarrowLayout& L, const Widths& d, const Lane& ln) {
    using T = typename S::T;
    const int q_stride = d.dk16() + 8;
    __syncthreads();
    const T* qrow = staged_rows<S>(smem, L, ln.rbw) + ln.fr * q_stride + 2 * ln.fc;
#pragma unroll
    for (int ks = 0; ks < S::MAX_KS; ++ks) {
        qb[ks][0] = ks < d.k_steps() ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16) : 0u;
        qb[ks][1] = ks < d.k_steps() ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16 + 8) : 0u;
    }
    if constexpr (S::TMA) fence_proxy_async_smem();  // these reads before TMA writes into the same bytes
    __syncthreads();                                 // the rings' last slots take their halves next
}

// Causal limit of this lane's two query rows (columns 2fc, 2fc+1 of S^T).
__device__ __forceinline__ void row_limits(int (&limit)[2], const AttentionParams& p, const QueryRows& q, int length,
                                           int fc) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int row = 2 * fc + e;
        limit[e] = row < q.rows_here ? length - p.q_len + query_head(p, q.grp, q.row0 + row).qi : length - 1;
    }
}

// First token some row of this warp may not see (its first row has the
// earliest limit; rows past the group's end see everything).
__device__ __forceinline__ int first_hidden_token(const AttentionParams& p, const QueryRows& q, int length) {
    return q.rows_here > 0 ? length - p.q_len + query_head(p, q.grp, q.row0).qi + 1 : length;
}

// Scores: S^T = K Q^T of a chunk's 16 tokens, A = K rows from the slot tK,
// B = Q^T registers. s[e]: token fr (+8 for e >= 2), query row 2fc + (e & 1).
template <class S>
__device__ __forceinline__ void chunk_scores(float (&s)[4], const typename S::T* tK, const uint32_t (&qb)[S::MAX_KS][2],
                                             const Widths& d, int k_stride, int lane) {
    using T = typename S::T;
    // Even and odd k-steps in two accumulators: half the dependent chain.
    float s_even[4] = {0.f, 0.f, 0.f, 0.f}, s_odd[4] = {0.f, 0.f, 0.f, 0.f};
    // Lane l reads row l % 16, piece 2 ks + l / 16 (swizzled: ^ row % 8,
    // which only permutes the pieces within each group of 8, i.e. 4 ks):
    // 4 row pointers, the group as an immediate offset.
    const T* krow[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        krow[j] = tK + (lane & 15) * k_stride + (((2 * j + (lane >> 4)) ^ (S::SWZ ? lane & 7 : 0)) << 3);
#pragma unroll
    for (int ks = 0; ks < S::MAX_KS; ++ks) {
        if (ks < d.k_steps()) {
            uint32_t a[4];
            ldmatrix_x4(a, krow[ks & 3] + (ks >> 2) * S::BLOCK);
            mma_16816<T>(ks % 2 ? s_odd : s_even, a, qb[ks][0], qb[ks][1]);
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = s_even[e] + s_odd[e];
}

// Online softmax of the chunk's scores for this lane's two rows, in place:
// masks tokens past a row's limit, updates the running maximum and partial
// sum, and returns in alpha the factors the rows' earlier O^T must be
// rescaled by (tok0: the chunk's first token).
__device__ __forceinline__ void online_softmax(float (&s)[4], float (&alpha)[2], float (&run_m)[2], float (&run_l)[2],
                                               const int (&limit)[2], int tok0, int fr, float scale_log2) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int j_lo = tok0 + fr, j_hi = j_lo + 8;
        float lo = (j_lo <= limit[e]) ? s[e] * scale_log2 : -INFINITY;
        float hi = (j_hi <= limit[e]) ? s[e + 2] * scale_log2 : -INFINITY;
        float mx = fmaxf(lo, hi);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float m_new = fmaxf(run_m[e], mx);
        const bool none = m_new == -INFINITY;
        alpha[e] = none ? 1.f : exp2_ftz(run_m[e] - m_new);
        lo = softmax_weight(lo, m_new);
        hi = softmax_weight(hi, m_new);
        run_l[e] = run_l[e] * alpha[e] + lo + hi;
        run_m[e] = m_new;
        s[e] = lo;
        s[e + 2] = hi;
    }
}

// Row pointers of the V^T tiles (A by ldmatrix.trans of the V rows in tV).
// Lane l reads row l % 8 + 8 (l / 16), piece 2i + (l / 8) % 2 (the same
// swizzle as K), and holds V^T rows (value columns) fr, fr + 8 of tokens
// 2fc, 2fc + 1 (a[0], a[1]) and 2fc + 8, 2fc + 9 (a[2], a[3]).
template <class S>
__device__ __forceinline__ void value_rows(const typename S::T* (&vrow)[4], const typename S::T* tV, int v_stride,
                                           int lane) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
        vrow[j] = tV + ((lane & 7) + ((lane >> 4) << 3)) * v_stride +
                  (((2 * j + ((lane >> 3) & 1)) ^ (S::SWZ ? lane & 7 : 0)) << 3);
}

// Scrub of a tail chunk (tokens some row may not see, loaded before the
// end): finds which tokens have a non-finite value, and gives each such
// token a row may see a NaN probability. A warp-private ring's slot is
// scrubbed in place (the value product stays as it is); shared rings' slots
// are read by the other row blocks' warps too, whose rows may see those
// values, so there each warp scrubs its own V^T fragments in the product.
template <class S>
__device__ __forceinline__ void scrub_tail(float (&s)[4], const typename S::T* tV,
                                           const typename S::T* const (&vrow)[4], const SmemRows& v_rows,
                                           const Widths& d, const int (&limit)[2], int tok0, const Lane& ln) {
    using T = typename S::T;
    const int fr = ln.fr, fc = ln.fc;
    uint32_t bad = 0;
    if constexpr (S::RB == 1) {
        bad = scrub_rows(const_cast<T*>(tV), v_rows, 16, d.dv, ln.lane);
        if constexpr (S::TMA) fence_proxy_async_smem();  // these writes before TMA refills the slot
        __syncwarp();
    } else {
#pragma unroll
        for (int i = 0; i < S::MAX_VT; ++i) {
            if (i < d.v_tiles()) {
                uint32_t a[4];
                ldmatrix_x4_trans(a, vrow[i & 3] + (i >> 2) * S::BLOCK);
                // (Value columns only: pad rows of V^T may hold a former K half.)
                const bool lo_col = i * 16 + fr < d.dv, hi_col = i * 16 + fr + 8 < d.dv;
                const uint32_t first = (lo_col ? scrub_pair<T>(a[0]) : 0u) | (hi_col ? scrub_pair<T>(a[1]) : 0u);
                const uint32_t second = (lo_col ? scrub_pair<T>(a[2]) : 0u) | (hi_col ? scrub_pair<T>(a[3]) : 0u);
                bad |= (first << (2 * fc)) | (second << (2 * fc + 8));
            }
        }
        bad = __reduce_or_sync(0xffffffffu, bad);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        if (((bad >> fr) & 1) && tok0 + fr <= limit[e]) s[e] = quiet_nan();
        if (((bad >> (fr + 8)) & 1) && tok0 + fr + 8 <= limit[e]) s[e + 2] = quiet_nan();
    }
}

// Value product: O^T = alpha O^T + V^T P^T, P^T (tokens x rows) going to a B
// operand (k = tokens, n = rows) by transposing its two 8x8 halves in
// registers; shared rings scrub the V^T fragments of a tail chunk.
template <class S>
__device__ __forceinline__ void accumulate_values(float (&acc)[S::MAX_VT][4], const float (&s)[4],
                                                  const float (&alpha)[2], const typename S::T* const (&vrow)[4],
                                                  const Widths& d, bool tail) {
    using T = typename S::T;
    const uint32_t pb0 = movmatrix_trans(pack_pair(s[0], s[1], static_cast<T*>(nullptr)));
    const uint32_t pb1 = movmatrix_trans(pack_pair(s[2], s[3], static_cast<T*>(nullptr)));
#pragma unroll
    for (int i = 0; i < S::MAX_VT; ++i) {
        if (i < d.v_tiles()) {
            acc[i][0] *= alpha[0];
            acc[i][1] *= alpha[1];
            acc[i][2] *= alpha[0];
            acc[i][3] *= alpha[1];
            uint32_t a[4];
            ldmatrix_x4_trans(a, vrow[i & 3] + (i >> 2) * S::BLOCK);
            if constexpr (S::RB > 1) {
                if (tail) {
#pragma unroll
                    for (int k = 0; k < 4; ++k) scrub_pair<T>(a[k]);
                }
            }
            mma_16816<T>(acc[i], a, pb0, pb1);
        }
    }
}

// Merge of the warps of each row block (its TW token lanes): per query row,
// max over warps; each warp stores its rescaled O^T in its own rows (which
// reuse the K/V slots): two CTA barriers in all, after which merged_column
// sums a column over the warps. CTA row rbw * kNarrowRows + r is row r of
// the warps rbw * TW .. rbw * TW + TW - 1.
template <class S>
__device__ __forceinline__ void merge_warps(const MergeSmem& sm, int o_stride, const float (&acc)[S::MAX_VT][4],
                                            const float (&run_m)[2], float (&run_l)[2], const Widths& d,
                                            const Lane& ln) {
    const int fr = ln.fr, fc = ln.fc;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 4);
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 8);
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 16);
        if (fr == 0) {
            sm.warp_m[ln.warp * kNarrowRows + 2 * fc + e] = run_m[e];
            sm.warp_l[ln.warp * kNarrowRows + 2 * fc + e] = run_l[e];
        }
    }
    __syncthreads();
    const int w0 = ln.rbw * S::TW;  // first warp of this row block
    float scale[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int r = 2 * fc + e;
        float M = -INFINITY;
        for (int w = w0; w < w0 + S::TW; ++w) M = fmaxf(M, sm.warp_m[w * kNarrowRows + r]);
        scale[e] = (run_m[e] == -INFINITY) ? 0.f : exp2_ftz(run_m[e] - M);
        if (ln.tw == 0 && fr == 0) {
            float tot = 0.f;
            for (int w = w0; w < w0 + S::TW; ++w)
                tot += rescaled_sum(sm.warp_m[w * kNarrowRows + r], sm.warp_l[w * kNarrowRows + r], M);
            sm.row_l[ln.rbw * kNarrowRows + r] = tot;
            sm.row_m[ln.rbw * kNarrowRows + r] = M;
        }
    }
    float* own = sm.warp_o + ln.warp * kNarrowRows * o_stride;
#pragma unroll
    for (int i = 0; i < S::MAX_VT; ++i) {
        if (i >= d.v_tiles()) continue;
        // O^T rows fr and fr + 8 of tile i: value columns 16i + fr and
        // 16i + fr + 8, or 16i + 2fr and 16i + 2fr + 1 (Shape::FP8).
        const int col = S::FP8 ? i * 16 + 2 * fr : i * 16 + fr, col_hi = S::FP8 ? col + 1 : col + 8;
        own[(2 * fc) * o_stride + col] = acc[i][0] * scale[0];
        own[(2 * fc + 1) * o_stride + col] = acc[i][1] * scale[1];
        own[(2 * fc) * o_stride + col_hi] = acc[i][2] * scale[0];
        own[(2 * fc + 1) * o_stride + col_hi] = acc[i][3] * scale[1];
    }
    __syncthreads();
}

// Column sum over a row block's warps, in warp order (m: CTA row).
template <class S>
__device__ __forceinline__ float merged_column(const float* warp_o, int o_stride, int m, int col) {
    const int first = S::RB == 1 ? 0 : (m / kNarrowRows) * S::TW, r = S::RB == 1 ? m : m % kNarrowRows;
    float v = 0.f;
    for (int w = first; w < first + S::TW; ++w) v += warp_o[(w * kNarrowRows + r) * o_stride + col];
    return v;
}

// Epilogue: the merged rows, normalized, to o (or this split's partial rows,
// with their log-sum-exp), or merged with the other splits of a cluster.
// Rows x columns spread over all threads (wide CTAs have more threads than
// a row has columns).
template <class S>
__device__ __forceinline__ void write_output(const AttentionParams& p, const MergeSmem& sm, int o_stride,
                                             const QueryRows& q, int dv, const Lane& ln) {
    const int tid = ln.tid;
    if (p.cluster_merge) {  // the splits of this row block are the CTAs of one cluster (RB == 1)
        for (int e = tid; e < q.cta_rows * dv; e += S::NT) {
            const int m = e / dv, col = e - m * dv;
            sm.o[m * o_stride + col] = merged_column<S>(sm.warp_o, o_stride, m, col);
        }
        __syncthreads();
        merge_splits_in_cluster(p, sm.cluster, q.cta_rows, dv, o_stride, sm.o, sm.row_m, sm.row_l, sm.row_out,
                                [&](int r) {
                                    const QueryHead qh = query_head(p, q.grp, q.cta_row0 + r);
                                    return lse_index(p, q.b, qh.qi, qh.h);
                                });
        return;
    }
    for (int e = tid; e < q.cta_rows * dv; e += S::NT) {
        const int m = e / dv, col = e - m * dv;
        const float l = sm.row_l[m];
        const int64_t out = sm.row_out[m] + col;
        const float v = normalized(merged_column<S>(sm.warp_o, o_stride, m, col), l);
        if (p.num_splits == 1)
            store_elem(p.o, p.o_dtype, out, v);
        else
            p.part_o[out] = v;
    }
    if (tid < q.cta_rows) {
        const QueryHead qh = query_head(p, q.grp, q.cta_row0 + tid);
        write_row_lse(p, q.split, q.b, qh.qi, qh.h, sm.row_m[tid], sm.row_l[tid]);
    }
}

}  // namespace gqla::cuda::narrow

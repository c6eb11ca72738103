// SPDX-License-Identifier: Apache-2.0
// The phases of the prefill kernel (prefill_wgmma_kernel.cu), each a device
// function with explicit parameters: where a CTA's work lies, the query and
// K/V copies into the 128B swizzle, the scrub of hidden value rows, the
// score product, the online softmax on the accumulators, the value product
// and the epilogue. The kernel only orders them (stages, barriers, waits).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../attention_common.cuh"
#include "../nonfinite.cuh"
#include "../prefill_wgmma.hpp"
#include "wgmma_primitives.cuh"

namespace gqla::cuda::prefill {

// Two consumer warpgroups of 64 rows each (the block's 128 rows), then one
// producer warpgroup that only copies K/V tiles.
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kProducerThreads = 128;
constexpr int kProducerWarps = kProducerThreads / 32;
constexpr int kThreads = kConsumerThreads + kProducerThreads;
constexpr int kValueDim = 128;
constexpr int kValueAtoms = kValueDim / 64;
constexpr int kAtomBytes = kPrefillTile * kSwizzleRowBytes;  // 64 columns x 128 rows (tokens or query rows)
static_assert(kPrefillRows == kPrefillTile, "Q atoms and K/V atoms share one size");
constexpr int kRowsPerLoadPass = kProducerThreads / 8;  // 8 threads x 16 bytes per 64-column atom row
constexpr int kLoadPasses = kPrefillTile / kRowsPerLoadPass;

// Where one CTA's work lies: grid.x = groups x row blocks (heaviest row
// blocks, the latest queries, first), grid.y = the launch's sequences,
// grid.z = splits of the key tiles the row block may see.
struct Work {
    int g, b, split;
    int row0;             // first of the block's rows in the group's rows
    int length;           // tokens of the sequence in this layer
    int first_limit;      // query qi sees positions <= first_limit + qi
    int block_min_limit;  // the block's first row's limit
    int tile_begin, tile_end;
    const int32_t* table;
};

__device__ __forceinline__ Work cta_work(const AttentionParams& p) {
    Work w;
    const int groups = p.num_heads / p.heads_per_group;
    const int row_blocks = (p.rows + kPrefillRows - 1) / kPrefillRows;
    const int rb = row_blocks - 1 - static_cast<int>(blockIdx.x) / groups;
    w.g = static_cast<int>(blockIdx.x) % groups;
    const int bl = blockIdx.y, seq_slot = p.slots[bl];
    w.b = p.batch_offset + bl;
    w.split = blockIdx.z;
    w.length = __ldg(p.lengths + seq_slot);
    w.table = p.page_tables + static_cast<int64_t>(seq_slot) * p.table_stride;
    w.first_limit = w.length - p.q_len;
    w.row0 = rb * kPrefillRows;
    const int last_row = min(p.rows, w.row0 + kPrefillRows) - 1;
    w.block_min_limit = w.first_limit + w.row0 / p.heads_per_group;
    const int block_max_limit = min(w.first_limit + last_row / p.heads_per_group, w.length - 1);
    const int tiles = block_max_limit >= 0 ? block_max_limit / kPrefillTile + 1 : 0;
    const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
    w.tile_begin = min(tiles, w.split * per_split);
    w.tile_end = min(tiles, w.tile_begin + per_split);
    return w;
}

// Causal limit of row r of the block; padding rows (past the group's rows) see nothing.
__device__ __forceinline__ int row_limit(const AttentionParams& p, const Work& w, int r) {
    const int mg = w.row0 + r;
    return mg < p.rows ? w.first_limit + mg / p.heads_per_group : -1;
}

// The block's queries -> sQ (any io dtype -> T) in KA swizzled atoms; padding rows zero.
template <typename T, int KA>
__device__ __forceinline__ void load_queries(const AttentionParams& p, const Work& w, unsigned char* sQ, int tid) {
    constexpr int kPieces = kPrefillRows * KA * 8;
    for (int i = tid; i < kPieces; i += kThreads) {
        const int m = i / (KA * 8), pc = i - m * (KA * 8);
        const int mg = w.row0 + m;
        float v[8];
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, w.g, mg);
            load_elems8(p.q, p.q_dtype, row_offset(p.qa, w.b, qi, h) + pc * 8, 8, v);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = 0.f;
        }
        *reinterpret_cast<uint4*>(sQ + (pc >> 3) * kAtomBytes + swizzled_offset(m, pc & 7)) = pack_eight<T>(v);
    }
}

// Copies of tile `tile`'s keys ([k1 | k2], KA atoms) into dK and values into
// dV by the producer warpgroup (ptid: its thread): 8 threads per 128-byte
// atom row, kLoadPasses rows each, through the page table; slots past the
// sequence's end zero-filled.
template <typename T, int KA>
__device__ __forceinline__ void copy_tile(const AttentionParams& p, const Work& w, int tile, unsigned char* dK,
                                          unsigned char* dV, int ptid) {
    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    const int dk1 = p.k1.dim, piece = ptid & 7;
#pragma unroll
    for (int pass = 0; pass < kLoadPasses; ++pass) {
        const int r = (ptid >> 3) + pass * kRowsPerLoadPass;
        const int j = tile * kPrefillTile + r;
        const bool valid = j < w.length;
        const int64_t tb = valid ? token_base(w.table, j, p.page_size, p.page_shift) : 0;
        const int so = swizzled_offset(r, piece);
#pragma unroll
        for (int a = 0; a < KA; ++a) {
            const int c = a * 64 + piece * 8;
            const T* src = c < dk1 ? k1 + pool_offset(p.k1, tb, w.g) + c : k2 + pool_offset(p.k2, tb, w.g) + (c - dk1);
            cp_async_16(dK + a * kAtomBytes + so, valid ? src : k1, valid);
        }
#pragma unroll
        for (int a = 0; a < kValueAtoms; ++a) {
            const int c = a * 64 + piece * 8;
            cp_async_16(dV + a * kAtomBytes + so, valid ? vb + pool_offset(p.v, tb, w.g) + c : vb, valid);
        }
    }
}

// Zeroes the non-finite elements of value rows [first, first + rows) of a
// tile (16-byte pieces in the swizzled atoms: row r's piece q of an atom at
// q ^ (r % 8)) and sets their bits in `bad`. Called by a whole warp.
template <typename T>
__device__ __forceinline__ void scrub_value_rows(unsigned char* tV, uint32_t* bad, int first, int rows, int lane) {
    for (int i = lane; i < rows * kValueAtoms * 8; i += 32) {
        const int r = first + i / (kValueAtoms * 8), pc = i % (kValueAtoms * 8);
        uint4* at = reinterpret_cast<uint4*>(tV + (pc >> 3) * kAtomBytes + swizzled_offset(r, pc & 7));
        uint4 v = *at;
        if (scrub_pair<T>(v.x) | scrub_pair<T>(v.y) | scrub_pair<T>(v.z) | scrub_pair<T>(v.w)) {
            *at = v;
            atomicOr(bad + (r >> 5), 1u << (r & 31));
        }
    }
}

// s = Q K^T of the warpgroup's 64 rows against a tile's 128 keys (KA atoms
// of 64 columns), issued and committed (not waited for).
template <typename T, int KA>
__device__ __forceinline__ void issue_scores(float (&s)[64], uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
    for (int ks = 0; ks < KA * 4; ++ks) {
        const uint32_t off = (ks >> 2) * kAtomBytes + (ks & 3) * 32;
        wgmma_m64n128k16<T>(s, desc_advance(q_desc, off), desc_advance(k_desc, off), ks != 0);
    }
    wgmma_commit();
}

// o += P V over a tile's values (P as the A fragments of 8 products of 16
// tokens), issued and committed.
template <typename T>
__device__ __forceinline__ void issue_values(float (&o)[64], const uint32_t (&pa)[8][4], const unsigned char* tV) {
    const uint64_t v_desc = smem_desc_sw128(tV, kAtomBytes, kSwizzleGroupBytes);
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
        wgmma_m64n128k16_rs_bt<T>(o, pa[kk], desc_advance(v_desc, kk * 16 * kSwizzleRowBytes), 1);
    wgmma_commit();
}

// Keeps P's registers untouched (live) until its product has completed.
__device__ __forceinline__ void fence_fragments(uint32_t (&pa)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
}

// The thread's two rows: limits, running maxima of the raw scores, partial sums.
struct Rows {
    int lim_lo, lim_hi;
    float m_lo, m_hi, l_lo, l_hi;
};

// Scores past a row's limit -> -inf (select, never arithmetic: a NaN key
// cannot reach a row that may not see it). Accumulator element 4j+e holds
// column 8j + 2(lane % 4) + (e & 1) of the low (e < 2) or high row.
__device__ __forceinline__ void mask_scores(float (&s)[64], int tile0, int lane, const Rows& r) {
    const int cbase = tile0 + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (cbase + 8 * j + (e & 1) > ((e & 2) ? r.lim_hi : r.lim_lo)) s[4 * j + e] = -INFINITY;
}

// Online softmax of both rows on the raw scores, in place (quad-wide
// maxima; sums stay per thread): weights 2^(s * scale - m * scale) in one
// FMA, with the max taken as 0 while a row has seen only masked positions
// (-inf weighs 0, a NaN score stays NaN). Returns the factors the rows'
// earlier output must be rescaled by.
__device__ __forceinline__ float2 softmax_tile(float (&s)[64], Rows& r, float scale) {
    const float2 mx = fragment_row_max(s);
    const float new_lo = fmaxf(r.m_lo, mx.x), new_hi = fmaxf(r.m_hi, mx.y);
    const float alpha_lo = new_lo == -INFINITY ? 1.f : exp2_ftz((r.m_lo - new_lo) * scale);
    const float alpha_hi = new_hi == -INFINITY ? 1.f : exp2_ftz((r.m_hi - new_hi) * scale);
    r.m_lo = new_lo;
    r.m_hi = new_hi;
    const float off_lo = new_lo == -INFINITY ? 0.f : new_lo * scale;
    const float off_hi = new_hi == -INFINITY ? 0.f : new_hi * scale;
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        s[4 * j] = exp2_ftz(fmaf(s[4 * j], scale, -off_lo));
        s[4 * j + 1] = exp2_ftz(fmaf(s[4 * j + 1], scale, -off_lo));
        s[4 * j + 2] = exp2_ftz(fmaf(s[4 * j + 2], scale, -off_hi));
        s[4 * j + 3] = exp2_ftz(fmaf(s[4 * j + 3], scale, -off_hi));
        sum_lo += s[4 * j] + s[4 * j + 1];
        sum_hi += s[4 * j + 2] + s[4 * j + 3];
    }
    r.l_lo = r.l_lo * alpha_lo + sum_lo;
    r.l_hi = r.l_hi * alpha_hi + sum_hi;
    return make_float2(alpha_lo, alpha_hi);
}

// Scrubbed positions a row may see get probability NaN (after the sums, as
// in the other kernels: the output carries the NaN).
__device__ __forceinline__ void poison_scrubbed(float (&s)[64], const uint32_t* bad, int tile0, int lane,
                                                const Rows& r) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int col = 8 * j + 2 * (lane & 3) + (e & 1);
            const bool is_bad = (bad[col >> 5] >> (col & 31)) & 1u;
            if (is_bad && tile0 + col <= ((e & 2) ? r.lim_hi : r.lim_lo)) s[4 * j + e] = quiet_nan();
        }
}

__device__ __forceinline__ void rescale_rows(float (&o)[64], float2 alpha) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        o[4 * j] *= alpha.x;
        o[4 * j + 1] *= alpha.x;
        o[4 * j + 2] *= alpha.y;
        o[4 * j + 3] *= alpha.y;
    }
}

// P (in s) as the A fragments of the value product: for 16 tokens kk, the
// accumulator layout of two 8-column chunks is the A layout.
template <typename T>
__device__ __forceinline__ void pack_probabilities(const float (&s)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        pa[kk][0] = pack_pair(s[8 * kk], s[8 * kk + 1], static_cast<T*>(nullptr));
        pa[kk][1] = pack_pair(s[8 * kk + 2], s[8 * kk + 3], static_cast<T*>(nullptr));
        pa[kk][2] = pack_pair(s[8 * kk + 4], s[8 * kk + 5], static_cast<T*>(nullptr));
        pa[kk][3] = pack_pair(s[8 * kk + 6], s[8 * kk + 7], static_cast<T*>(nullptr));
    }
}

// Epilogue: row sums over the quad, then each of the thread's two rows
// (r_lo and r_lo + 8 of the block) normalized to o, or to the split's
// partial rows, and its lse.
__device__ __forceinline__ void write_rows(const AttentionParams& p, const Work& w, const float (&o)[64], Rows r,
                                           float scale, int r_lo, int lane) {
#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        r.l_lo += __shfl_xor_sync(0xffffffffu, r.l_lo, sh);
        r.l_hi += __shfl_xor_sync(0xffffffffu, r.l_hi, sh);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int mg = w.row0 + r_lo + 8 * half;
        if (mg >= p.rows) continue;
        const float l = half ? r.l_hi : r.l_lo, m = half ? r.m_hi : r.m_lo;
        const auto [qi, h] = query_head(p, w.g, mg);
        const int c0 = 2 * (lane & 3);
        if (p.num_splits == 1) {
            const int64_t at = row_offset(p.oa, w.b, qi, h);
#pragma unroll
            for (int j = 0; j < 16; ++j)
                store_pair(p.o, p.o_dtype, at + 8 * j + c0, normalized(o[4 * j + 2 * half], l),
                           normalized(o[4 * j + 2 * half + 1], l));
        } else {
            float* at = p.part_o + partial_row(p, w.split, w.b, qi, h) * kValueDim;
#pragma unroll
            for (int j = 0; j < 16; ++j)
                *reinterpret_cast<float2*>(at + 8 * j + c0) =
                    make_float2(normalized(o[4 * j + 2 * half], l), normalized(o[4 * j + 2 * half + 1], l));
        }
        if ((lane & 3) == 0) write_row_lse(p, w.split, w.b, qi, h, m * scale, l);
    }
}

}  // namespace gqla::cuda::prefill

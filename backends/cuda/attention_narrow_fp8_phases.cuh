// SPDX-License-Identifier: Apache-2.0
// The phases of the narrow-group decode kernel over 8-bit (e4m3) caches
// (attention_narrow_fp8_kernel.cuh) that differ from the 16-bit kernel's
// (attention_narrow_phases.cuh, which it shares for the rest): the copies of
// stored bytes and their scales, the query rows in f16 over a power of two,
// the score and value products on bytes widened in registers, the value
// scales, and the scrub of NaN bytes.
//
// Widening in registers. The stored bytes are read with the ldmatrix
// instructions of 16-bit tiles, which move pairs of bytes as one element,
// and each pair of e4m3 bytes becomes an f16 pair with one
// cvt.rn.f16x2.e4m3x2 (exact, subnormals and NaN included):
//   * keys (A of S^T = K Q^T, tokens x key columns): a lane holds 4
//     consecutive bytes of a token row, columns 4t..4t+3 of a 16-column
//     step. The product sums over the columns in any order, so the first
//     pair serves as the MMA's columns 2t, 2t+1 and the second as 2t+8,
//     2t+9; the query fragments are read in the same order (Q[r][4t..4t+3]).
//   * values (A of O^T += V^T P^T, value columns x tokens): ldmatrix.trans
//     of byte rows gives a lane the byte pairs (value columns 2g, 2g+1) of
//     tokens 2t and 2t+1; one byte permute regroups them by column, so the
//     tile's row g is value column 2g and its row g + 8 column 2g + 1
//     (Shape::FP8, which merge_warps follows). The tokens keep their order,
//     so P^T is the 16-bit kernel's.
// No tile of widened rows is stored: the slots hold half the bytes of a
// 16-bit ring, and the conversions run in the consumer's own instructions.
#pragma once

#include "attention_narrow_phases.cuh"
#include "fp8_e4m3.cuh"

namespace gqla::cuda::narrow_fp8 {

using narrow::Chunks;
using narrow::Lane;
using narrow::QueryRows;
using narrow::Widths;

// A warp's ring of R slots over stored bytes (narrow_fp8_layout): each slot
// holds half a chunk, 16 rows of K or V bytes `stride` apart, then their 16
// f32 scales.
struct ByteRing {
    unsigned char* base;  // slot 0
    int slot_bytes, stride;
    const unsigned char* k;  // the layer's K and V pools
    const unsigned char* v;
    int grp;
};

template <class S>
__device__ __forceinline__ unsigned char* slot_of(const ByteRing& rg, int half) {
    return rg.base + (half % S::R) * rg.slot_bytes;
}
__device__ __forceinline__ const float* slot_scales(const unsigned char* slot, int stride) {
    return reinterpret_cast<const float*>(slot + 16 * stride);
}

// Producer: copies half-chunk `half` (chunk half / 2: K rows when even, V
// rows when odd) and the rows' scales into its slot; f is its page-table
// read (narrow::page_of). Rows past the end read as zero bytes with zero
// scales, so they add nothing (and no stale scale reaches a maximum).
template <class S>
__device__ __forceinline__ void issue_half(const AttentionParams& p, const Chunks& ch, const ByteRing& rg,
                                           const Widths& d, int half, int64_t f) {
    const bool is_v = half & 1;
    unsigned char* dst = slot_of<S>(rg, half);
    float* sc = reinterpret_cast<float*>(dst + 16 * rg.stride);
    const PoolView& pv = is_v ? p.v : p.k1;
    const unsigned char* pool = is_v ? rg.v : rg.k;
    const int bytes = is_v ? d.dv : d.dk;
    const int lane = ch.lane;
    if (ch.aligned_pages) {
        const int j0 = narrow::chunk_first<S>(ch, half >> 1);
        const int valid_rows = f < 0 ? 0 : min(16, ch.length - j0);
        const int slot = p.page_shift >= 0 ? j0 & (p.page_size - 1) : j0 % p.page_size;
        const int64_t page = f < 0 ? 0 : f;
        copy_contiguous_byte_rows16(dst, rg.stride,
                                    pool + pool_offset(pv, (page << 32) | static_cast<uint32_t>(slot), rg.grp),
                                    pv.row_stride, bytes, valid_rows, lane);
        const unsigned char* scales = pool + pool_scale_offset(pv, page, rg.grp, p.page_size, slot);
        if (valid_rows == 16) {
            if (lane < 4) cp_async_16(sc + 4 * lane, scales + 16 * lane, true);
        } else if (lane < 16) {
            cp_async_4(sc + lane, scales + 4 * lane, lane < valid_rows);
        }
    } else {
        // Lane r < 16 holds row r's (page << 32 | slot), -1 past the end.
        const bool valid = f >= 0;
        copy_scattered_byte_rows16(dst, rg.stride, valid ? pool + pool_offset(pv, f, rg.grp) : nullptr, bytes, pool,
                                   lane);
        if (lane < 16) {
            const int64_t page = valid ? f >> 32 : 0, slot = valid ? f & 0xffffffff : 0;
            cp_async_4(sc + lane, pool + pool_scale_offset(pv, page, rg.grp, p.page_size, slot), valid);
        }
    }
}

// Producer prologue: halves 0..R-1, each its own commit group.
template <class S>
__device__ __forceinline__ void issue_first(const AttentionParams& p, const Chunks& ch, const ByteRing& rg,
                                            const Widths& d, const int64_t (&first_ids)[4]) {
#pragma unroll
    for (int h = 0; h < S::R; ++h) {
        if ((h >> 1) < ch.count) issue_half<S>(p, ch, rg, d, h, first_ids[h >> 1]);
        cp_async_commit();
    }
}

// Consumer: half `half` has landed (every commit group but the R - 1 newest).
template <class S>
__device__ __forceinline__ void wait_half() {
    cp_async_wait<S::R - 1>();
    __syncwarp();
}

// Done with half `done`'s slot: it takes half done + R where `more`.
template <class S>
__device__ __forceinline__ void release_half(const AttentionParams& p, const Chunks& ch, const ByteRing& rg,
                                             const Widths& d, int done, bool more, int64_t id) {
    __syncwarp();
    if (more) issue_half<S>(p, ch, rg, d, done + S::R, id);
    cp_async_commit();
}

// Query staging: the CTA's 8 rows, 16 threads a row, as f16 over the power
// of two 2^e that puts each row's largest finite magnitude in [2^14, 2^15)
// (f16 holds any query that way, with its full precision); 2^e kept in
// row_pow to scale the row's scores back. Pad rows and columns are zero.
template <class S>
__device__ __forceinline__ void stage_queries(const AttentionParams& p, __half* staged, float* row_pow, const Widths& d,
                                              const QueryRows& q, int tid) {
    static_assert(S::NT == 16 * kNarrowRows && S::RB == 1, "16 threads per query row, one row block");
    const int r = tid >> 4, sub = tid & 15;
    const bool real = r < q.cta_rows;
    int64_t q0 = 0;
    if (real) {
        const QueryHead qh = query_head(p, q.grp, q.cta_row0 + r);
        q0 = row_offset(p.qa, q.b, qh.qi, qh.h);
    }
    float amax = 0.f;
    for (int c = sub * 8; real && c < d.dk; c += 128) {
        float v[8];
        load_elems8(p.q, p.q_dtype, q0 + c, min(8, d.dk - c), v);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float a = fabsf(v[i]);
            if (a <= 3.40282347e38f) amax = fmaxf(amax, a);
        }
    }
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const int e = f16_query_exponent(amax);
    const int q_stride = d.dk16() + 8;
    for (int c = sub * 8; c < d.dk16(); c += 128) {
        float v[8];
        load_elems8(p.q, p.q_dtype, q0 + c, real ? max(0, min(8, d.dk - c)) : 0, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = ldexpf(v[i], -e);
        *reinterpret_cast<uint4*>(staged + r * q_stride + c) = pack_eight<__half>(v);
    }
    if (sub == 0) row_pow[r] = ldexpf(1.f, e);
}

// Q^T as B fragments in the keys' column order (see the top): b0 =
// Q[row fr][16ks + 4fc, +1], b1 = Q[row fr][16ks + 4fc + 2, +3].
template <class S>
__device__ __forceinline__ void load_query_fragments(uint32_t (&qb)[S::MAX_KS][2], const __half* staged,
                                                     const Widths& d, const Lane& ln) {
    const __half* qrow = staged + ln.fr * (d.dk16() + 8) + 4 * ln.fc;
#pragma unroll
    for (int ks = 0; ks < S::MAX_KS; ++ks) {
        const uint2 v = ks < d.k_steps() ? *reinterpret_cast<const uint2*>(qrow + 16 * ks) : make_uint2(0u, 0u);
        qb[ks][0] = v.x;
        qb[ks][1] = v.y;
    }
}

__device__ __forceinline__ uint32_t widen_low(uint32_t four) { return e4m3x2_to_f16x2(static_cast<uint16_t>(four)); }
__device__ __forceinline__ uint32_t widen_high(uint32_t four) {
    return e4m3x2_to_f16x2(static_cast<uint16_t>(four >> 16));
}

// Scores S^T = K Q^T of a chunk's 16 tokens from the stored key bytes in
// tK, widened in registers: one ldmatrix.x4 covers 32 key columns (two
// k-steps). s[e]: token fr (+8 for e >= 2), query row 2fc + (e & 1), before
// the key and query scales.
template <class S>
__device__ __forceinline__ void chunk_scores(float (&s)[4], const unsigned char* tK, const uint32_t (&qb)[S::MAX_KS][2],
                                             const Widths& d, int stride, int lane) {
    float s_even[4] = {0.f, 0.f, 0.f, 0.f}, s_odd[4] = {0.f, 0.f, 0.f, 0.f};
    // Lanes 0-7 / 8-15 / 16-23 / 24-31 address rows 0-7 / 8-15 of bytes
    // [0, 16) / [0, 16) / [16, 32) / [16, 32) of each 32-byte step.
    const unsigned char* krow = tK + ((lane & 7) + ((lane >> 3) & 1) * 8) * stride + (lane >> 4) * 16;
#pragma unroll
    for (int kp = 0; kp < S::MAX_KS / 2; ++kp) {
        if (2 * kp < d.k_steps()) {
            uint32_t r[4];
            ldmatrix_x4(r, krow + 32 * kp);
            const uint32_t a0[4] = {widen_low(r[0]), widen_low(r[1]), widen_high(r[0]), widen_high(r[1])};
            mma_16816<__half>(s_even, a0, qb[2 * kp][0], qb[2 * kp][1]);
            if (2 * kp + 1 < d.k_steps()) {
                const uint32_t a1[4] = {widen_low(r[2]), widen_low(r[3]), widen_high(r[2]), widen_high(r[3])};
                mma_16816<__half>(s_odd, a1, qb[2 * kp + 1][0], qb[2 * kp + 1][1]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] = s_even[e] + s_odd[e];
}

// The scores times their tokens' key scales (ksc: the K half's) and their
// rows' powers of two.
__device__ __forceinline__ void apply_key_scales(float (&s)[4], const float* ksc, const float (&rq)[2], int fr) {
    const float lo = ksc[fr], hi = ksc[fr + 8];
    s[0] *= lo * rq[0];
    s[1] *= lo * rq[1];
    s[2] *= hi * rq[0];
    s[3] *= hi * rq[1];
}

// Value scales (vsc: the V half's): the outputs so far rescaled through
// alpha to the chunk's power of two (ValuePower), and each probability
// multiplied by its token's scale over that power.
__device__ __forceinline__ void apply_value_scales(float (&s)[4], float (&alpha)[2], ValuePower& vp, const float* vsc,
                                                   int fr) {
    const float lo = vsc[fr], hi = vsc[fr + 8];
    float vmax = fmaxf(lo, hi);
    vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 4));
    vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 8));
    vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, 16));
    float inv;
    const float rescale = vp.advance(vmax, &inv);
    alpha[0] *= rescale;
    alpha[1] *= rescale;
    s[0] *= lo * inv;
    s[1] *= lo * inv;
    s[2] *= hi * inv;
    s[3] *= hi * inv;
}

// Value product O^T = alpha O^T + V^T P^T from the stored value bytes in tV
// (see the top): one ldmatrix.x4.trans covers 32 value columns (two tiles).
template <class S>
__device__ __forceinline__ void accumulate_values(float (&acc)[S::MAX_VT][4], const float (&s)[4],
                                                  const float (&alpha)[2], const unsigned char* tV, const Widths& d,
                                                  int stride, int lane) {
    const uint32_t pb0 = movmatrix_trans(pack_pair(s[0], s[1], static_cast<__half*>(nullptr)));
    const uint32_t pb1 = movmatrix_trans(pack_pair(s[2], s[3], static_cast<__half*>(nullptr)));
    const unsigned char* vrow = tV + ((lane & 7) + ((lane >> 3) & 1) * 8) * stride + (lane >> 4) * 16;
#pragma unroll
    for (int vp = 0; vp < S::MAX_VT / 2; ++vp) {
        if (2 * vp < d.v_tiles()) {
            uint32_t r[4];
            ldmatrix_x4_trans(r, vrow + 32 * vp);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = 2 * vp + half;
                if (i < d.v_tiles()) {
                    // [V[2t][2g], V[2t][2g+1], V[2t+1][2g], V[2t+1][2g+1]] -> by column.
                    const uint32_t lo = __byte_perm(r[2 * half], 0u, 0x3120);
                    const uint32_t hi = __byte_perm(r[2 * half + 1], 0u, 0x3120);
                    const uint32_t a[4] = {widen_low(lo), widen_high(lo), widen_low(hi), widen_high(hi)};
                    acc[i][0] *= alpha[0];
                    acc[i][1] *= alpha[1];
                    acc[i][2] *= alpha[0];
                    acc[i][3] *= alpha[1];
                    mma_16816<__half>(acc[i], a, pb0, pb1);
                }
            }
        }
    }
}

// Zeroes the NaN bytes (e4m3 has no infinity) of the 16 rows of `bytes`
// bytes (a multiple of 16) of a slot; returns (to every lane) a mask of the
// rows that had one. Called by the whole warp.
__device__ __forceinline__ uint32_t scrub_byte_rows(unsigned char* tile, int stride, int bytes, int lane) {
    const int per_row = bytes >> 4;
    uint32_t bad = 0;
    for (int piece = lane; piece < 16 * per_row; piece += 32) {
        const int r = piece / per_row, c = (piece - r * per_row) << 4;
        uint4* at = reinterpret_cast<uint4*>(tile + r * stride + c);
        uint4 v = *at;
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        uint32_t any = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            // A byte is NaN when its low 7 bits are all ones: +1 carries into bit 7.
            const uint32_t nan = ((w[k] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
            w[k] &= ~((nan >> 7) * 0xffu);
            any |= nan;
        }
        if (any) {
            *at = make_uint4(w[0], w[1], w[2], w[3]);
            bad |= 1u << r;
        }
    }
    return __reduce_or_sync(0xffffffffu, bad);
}

// Scrub of a tail chunk (tokens some row may not see): the slot's NaN value
// bytes become 0 and each row that may see such a token gets a NaN
// probability for it instead (nonfinite.cuh).
template <class S>
__device__ __forceinline__ void scrub_tail(float (&s)[4], unsigned char* tV, const Widths& d, int stride,
                                           const int (&limit)[2], int tok0, const Lane& ln) {
    const uint32_t bad = scrub_byte_rows(tV, stride, d.dv, ln.lane);
    __syncwarp();
    const int fr = ln.fr;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        if (((bad >> fr) & 1) && tok0 + fr <= limit[e]) s[e] = quiet_nan();
        if (((bad >> (fr + 8)) & 1) && tok0 + fr + 8 <= limit[e]) s[e + 2] = quiet_nan();
    }
}

}  // namespace gqla::cuda::narrow_fp8

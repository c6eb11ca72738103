// SPDX-License-Identifier: Apache-2.0
// The narrow-group decode kernel (attention_narrow_kernel.cuh) over 8-bit
// (e4m3) GQA caches, one f32 scale per (token, KV head) for K and for V
// (docs/fp8-cache.md): the same transposed products (8 query rows on the
// MMA's n side), per-warp rings, split ranges, causal limits, warp merge and
// epilogue, with
//   * slots of stored bytes plus their scales, copied by cp.async (half the
//     bytes of a 16-bit chunk per slot);
//   * the bytes widened to f16 in registers right before each MMA
//     (attention_narrow_fp8_phases.cuh), never through a widened tile;
//   * queries in f16 over a power of two per row, scores times their key
//     scales and the row's power;
//   * probabilities times their value scales over a per-chunk power of two,
//     which the outputs carry like the softmax maximum.
// One row block per CTA (kNarrowWarps warps), pages of any size (16-token
// runs copied as one base plus offsets where the page size is a multiple of
// 16), keys and values multiples of 16 wide; no clusters: splits merge in
// the combine pass.
#pragma once

#include "attention_narrow_fp8_phases.cuh"

namespace gqla::cuda {

// R: ring slots; DK, DV: key and value widths known at compile time (0:
// read from the launch).
template <int R, int DK = 0, int DV = 0>
__global__ void __launch_bounds__(kNarrowWarps * 32, 4)
    attention_narrow_fp8_kernel(const __grid_constant__ AttentionParams p) {
    using S = narrow::Shape<__half, R, NarrowRows::Padded, DK, DV, kNarrowWarps, 1, true>;
    extern __shared__ __align__(128) unsigned char smem[];
    const narrow::Widths d = narrow::widths<S>(p);
    const NarrowLayout L = narrow_fp8_layout(d.dk, d.dv, R, S::NW);
    const narrow::MergeSmem sm = narrow::merge_smem<S>(smem, L);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const narrow::Lane ln{tid, lane, warp, lane >> 2, lane & 3, warp, 0, true};
    const CtaWork w = cta_work(p, S::CTA_ROWS, S::TILE);
    const narrow::QueryRows q = narrow::query_rows<S>(p, w, 0);
    const narrow::Chunks ch = narrow::chunks_of<S>(p, w, ln);
    const int64_t first_ids[4] = {narrow::page_of<S>(p, w, ch, 0), narrow::page_of<S>(p, w, ch, 1),
                                  narrow::page_of<S>(p, w, ch, 2), narrow::page_of<S>(p, w, ch, 3)};
    narrow_fp8::ByteRing rg;
    rg.base = smem + warp * L.warp_bytes;
    rg.slot_bytes = L.slot_elems;
    rg.stride = L.k_stride;
    rg.k = static_cast<const unsigned char*>(p.k1.base);
    rg.v = static_cast<const unsigned char*>(p.v.base);
    rg.grp = q.grp;

    // The query rows pass through warp 0's first slot, before any copy.
    __half* staged = reinterpret_cast<__half*>(smem);
    float* row_pow = reinterpret_cast<float*>(smem + L.q_pow_off);
    narrow_fp8::stage_queries<S>(p, staged, row_pow, d, q, tid);
    narrow::store_row_outputs(p, q, sm.row_out, ln);
    __syncthreads();
    uint32_t qb[S::MAX_KS][2];
    narrow_fp8::load_query_fragments<S>(qb, staged, d, ln);
    const float rq[2] = {row_pow[2 * ln.fc], row_pow[2 * ln.fc + 1]};
    __syncthreads();  // the staged rows' slot takes its half next

    // Chunk c's K is half 2c, its V half 2c + 1; a slot whose product is done
    // takes half + R (as in the 16-bit kernel).
    narrow_fp8::issue_first<S>(p, ch, rg, d, first_ids);
    int limit[2];
    narrow::row_limits(limit, p, q, ch.length, ln.fc);
    const int first_hidden = narrow::first_hidden_token(p, q, ch.length);

    float acc[S::MAX_VT][4];
#pragma unroll
    for (int i = 0; i < S::MAX_VT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float run_m[2] = {-INFINITY, -INFINITY}, run_l[2] = {0.f, 0.f};
    ValuePower vp;

    int64_t ids[3] = {first_ids[1], first_ids[2], first_ids[3]};  // ids[i]: chunk c + 1 + i
    for (int c = 0; c < ch.count; ++c) {
        narrow_fp8::wait_half<S>();  // this chunk's K
        const unsigned char* tK = narrow_fp8::slot_of<S>(rg, 2 * c);
        unsigned char* tV = narrow_fp8::slot_of<S>(rg, 2 * c + 1);
        float s[4];
        narrow_fp8::chunk_scores<S>(s, tK, qb, d, rg.stride, lane);
        narrow_fp8::apply_key_scales(s, narrow_fp8::slot_scales(tK, rg.stride), rq, ln.fr);
        const int tok0 = narrow::chunk_first<S>(ch, c);
        float alpha[2];
        narrow::online_softmax(s, alpha, run_m, run_l, limit, tok0, ln.fr, p.scale_log2);
        narrow_fp8::release_half<S>(p, ch, rg, d, 2 * c, c + R / 2 < ch.count, ids[R / 2 - 1]);
        narrow_fp8::wait_half<S>();  // and its V

        if (tok0 + 16 > first_hidden && first_hidden < ch.length)
            narrow_fp8::scrub_tail<S>(s, tV, d, rg.stride, limit, tok0, ln);
        narrow_fp8::apply_value_scales(s, alpha, vp, narrow_fp8::slot_scales(tV, rg.stride), ln.fr);
        narrow_fp8::accumulate_values<S>(acc, s, alpha, tV, d, rg.stride, lane);
        narrow_fp8::release_half<S>(p, ch, rg, d, 2 * c + 1, c + (R + 1) / 2 < ch.count, ids[(R + 1) / 2 - 1]);
        ids[0] = ids[1];
        ids[1] = ids[2];
        ids[2] = narrow::page_of<S>(p, w, ch, c + 4);
    }
    cp_async_wait<0>();

    // The outputs back from over 2^v_exp (each warp's own power), then the
    // 16-bit kernel's merge and epilogue.
    const float unit = ldexpf(1.f, vp.v_exp);
#pragma unroll
    for (int i = 0; i < S::MAX_VT; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[i][k] *= unit;
    narrow::merge_warps<S>(sm, L.o_stride, acc, run_m, run_l, d, ln);
    narrow::write_output<S>(p, sm, L.o_stride, q, d.dv, ln);
}

}  // namespace gqla::cuda

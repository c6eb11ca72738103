// SPDX-License-Identifier: Apache-2.0
// Split-KV flash decoding with one independent stream of work per warp, for
// up to 16 query rows per group (GQA decode: n_rep * s_q <= 16) and values up
// to 128 wide. Each warp owns 16 of every 64 tokens: it copies its own K/V
// rows (cp.async, ST stages so ST-1 chunks are in flight while one is being
// computed, page ids fetched two chunks ahead of their copies), computes
// S = Q K^T on tensor cores, keeps the online softmax in registers and feeds
// P straight from the S accumulators into the P V MMA (no shared-memory
// round trip, no CTA barrier per tile). Warps merge their (m, l, O) once at
// the end. This keeps the SM issuing loads instead of waiting on barriers.
//
// Copies are coalesced: consecutive lanes take consecutive 16-byte pieces of
// a row (a 256-byte K row is 16 lanes), so one warp instruction reads two
// whole rows instead of a 32-byte slice of sixteen.
//
// A chunk holding tokens some row of the CTA may not see (the causal tail)
// has its value rows scrubbed before P V, see nonfinite.cuh.
//
// 8-bit caches (FP8 = true, GQA kind: K and V in e4m3 with one f32 scale per
// token and head, docs/fp8-cache.md): the stages hold the stored bytes and
// the chunk's scales, half the bytes of a bf16 chunk in flight; after its
// copy lands, the warp widens the chunk into one f16 tile with one
// cvt.f16x2.e4m3x2 per pair (exact: every e4m3 value, subnormals and NaN
// included, is an f16 value; widening through f32 to bf16 took four
// conversions a pair and ran at half the bf16 kernel's speed, bound by the
// conversion unit), and the products run on f16. So that f16's range holds
// any query, each query row is scaled by a power of two into [2^14, 2^15)
// and its scores by the inverse. The key scales multiply each token's
// scores; the value scales multiply its probabilities after their sum (the
// softmax denominator), divided by a power of two at least the chunk's
// largest value scale so that they stay <= 1, and the accumulated outputs
// carry that power of two (rescaled from chunk to chunk like the softmax
// maximum).
#pragma once

#include "attention_warp_phases.cuh"

namespace gqla::cuda {

template <typename T, int ST, bool FP8 = false>
__global__ void __launch_bounds__(kWarpKernelWarps * 32)
    attention_warp_kernel(const __grid_constant__ AttentionParams p) {
    using namespace decode_warp;
    constexpr int NW = kWarpKernelWarps, MAX_NT = kWarpKernelMaxDv / 8;
    static_assert(!FP8 || std::is_same<T, __half>::value, "8-bit caches widen to f16");
    extern __shared__ __align__(128) unsigned char smem[];
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = dk1 + dk2, dv = p.v.dim;
    const WarpLayout L = warp_layout(dk, dv, p.v_aliases_k1 != 0, ST, FP8);
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    T* sQ = reinterpret_cast<T*>(smem + L.q_off);
    float* sO = reinterpret_cast<float*>(smem + L.o_off);
    float* sWarpM = reinterpret_cast<float*>(smem + L.f_off);
    float* sWarpL = sWarpM + NW * 16;
    float* sRowL = sWarpL + NW * 16;
    float* sRowM = sRowL + 16;
    float* sRowQ = sRowM + 16;  // 8-bit caches: the power of two each query row was divided by

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const CtaWork w = cta_work(p, 16, kWarpKernelTile);
    const int rb = w.rb, length = w.length;
    const SplitRange range = w.range;

    stage_queries<T, FP8>(p, w, sQ, sRowQ, L.k_stride, dk, dk16, tid);
    // Warp-private stages; pad columns stay zero (cp.async never writes them).
    T* wK = reinterpret_cast<T*>(smem + L.kv_off + warp * L.warp_bytes);
    const int stage_elems = 16 * L.k_stride + (p.v_aliases_k1 ? 0 : 16 * L.v_stride);
    // 8-bit caches: stage s's stored bytes (keys, values, key and value scales).
    unsigned char* const wRaw = smem + L.kv_off + warp * L.warp_bytes + L.tile_bytes;
    WarpStages<T> ws;
    ws.tiles = wK;
    ws.raw = wRaw;
    ws.stage_elems = stage_elems;
    ws.raw_stage_bytes = L.raw_stage_bytes;
    ws.k_stride = L.k_stride;
    ws.v_stride = L.v_stride;
    ws.dk16 = dk16;
    ws.dv16 = dv16;
    zero_stage_pads<T, ST, FP8>(p, ws, dk, dv, lane);
    __syncthreads();

    // Causal limits of this lane's two accumulator rows.
    int limit[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        int mg = rb * 16 + (lane >> 2) + hr * 8;
        limit[hr] = (mg < p.rows) ? length - p.q_len + mg / p.heads_per_group : length - 1;
    }
    // First token some row of this CTA may not see (its first row has the
    // earliest limit; rows past the group's end see everything).
    const int first_hidden = rb * 16 < p.rows ? length - p.q_len + (rb * 16) / p.heads_per_group + 1 : length;

    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    const int my_row = lane & 15, my_half = lane >> 4;
    // This warp's chunk c covers tokens (range.begin + c) * 64 + warp * 16 + [0, 16).
    const int chunks = range.end - range.begin;
    const ChunkSources<T> src{k1, k2, vb, dk1, dk2, dv};

    float acc[MAX_NT][4];
#pragma unroll
    for (int i = 0; i < MAX_NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float run_m[2] = {-INFINITY, -INFINITY}, run_l[2] = {0.f, 0.f};  // l: this lane's partial sum
    // 8-bit caches: this lane's two query rows' scales, and the power of two
    // the accumulated outputs are divided by.
    Fp8Rows fp8;
    fp8.row_q[0] = fp8.row_q[1] = 1.f;
    if constexpr (FP8) {
        fp8.row_q[0] = sRowQ[lane >> 2];
        fp8.row_q[1] = sRowQ[(lane >> 2) + 8];
    }

    // Chunks 0..ST-2 in flight before the loop; page ids of the next two
    // chunks to issue are held in registers so their table loads (which can
    // queue behind the K/V traffic) have a whole iteration to land.
#pragma unroll
    for (int st = 0; st < ST - 1; ++st) {
        copy_chunk<T, FP8>(p, src, ws, st, chunk_row_base(p, w, st, warp, my_row, my_half), w.g, my_row, my_half, lane);
        cp_async_commit();
    }
    int64_t base_a = chunk_row_base(p, w, ST - 1, warp, my_row, my_half);
    int64_t base_b = chunk_row_base(p, w, ST, warp, my_row, my_half);
    for (int c = 0; c < chunks; ++c) {
        const int stage = c % ST;
        if (c + ST - 1 < chunks) copy_chunk<T, FP8>(p, src, ws, (c + ST - 1) % ST, base_a, w.g, my_row, my_half, lane);
        cp_async_commit();
        base_a = base_b;
        base_b = chunk_row_base(p, w, c + ST + 1, warp, my_row, my_half);
        cp_async_wait<ST - 1>();
        __syncwarp();
        T* tK = wK + (FP8 ? 0 : stage * stage_elems);
        T* tV = p.v_aliases_k1 ? tK : tK + 16 * L.k_stride;
        const int vstride = L.v_stride;
        const float* scales = FP8 ? ws.raw_scales(stage) : nullptr;  // [16] key scales, then [16] value scales
        if constexpr (FP8) widen_chunk(ws, stage, tK, tV, dk1, dv, lane);

        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        chunk_scores(s, sQ, wK, FP8 ? 0 : stage, stage_elems, L.k_stride, dk16, lane);
        const int tok0 = (range.begin + c) * kWarpKernelTile + warp * 16;
        float alpha[2];
        chunk_softmax<FP8>(s, alpha, run_m, run_l, fp8, limit, scales, p, tok0, lane);
        scrub_hidden_tokens(s, tV, vstride, dv, tok0, first_hidden, length, limit, lane);
        if constexpr (FP8) apply_value_scales(s, alpha, fp8, scales, lane);
        accumulate_values<T, MAX_NT>(acc, s, alpha, tV, vstride, dv16, lane);
        __syncwarp();  // the stage is refilled next iteration
    }
    cp_async_wait<0>();

    // Merge the warps: row max over warps, then each warp adds its rescaled O.
    const MergeRows merge{sWarpM, sWarpL, sRowL, sRowM};
    float scale[2];
    merge_row_stats<FP8>(scale, run_m, run_l, fp8.vp.v_exp, merge, tid);
    merge_outputs<MAX_NT>(sO, acc, scale, dv16, tid);
    write_rows(p, w, sO, merge, dv, dv16, tid);
}

}  // namespace gqla::cuda

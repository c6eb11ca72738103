// SPDX-License-Identifier: Apache-2.0
// The latent decode kernel's 64-row products over an 8-bit latent
// (latent_wgmma_fp8_rows_kernel; dispatched by latent_wgmma_kernel.cu for row
// blocks of more than 32 rows, e.g. DeepSeek-V3's 128 heads).
//
// The 16-bit kernel's 64-row layout fills shared memory with Q (72 KiB) and
// two 72 KiB stages of 64 tokens, leaving no room for the stored bytes a
// tile is widened from; the transposed kernel has that room, but at 128
// heads it runs four 32-row blocks a sequence, each widening every tile,
// and its 32-row products ran DeepSeek-V3 at 1.6x the 64-row ones' time
// (docs/fp8-cache.md). Here the stages hold half tiles of 32 tokens:
//   Q 72 KiB | three 36 KiB stages | P 8 KiB | two 16 KiB staging buffers
// (222 KiB). The work list stays in 64-token tiles (the planner's unit);
// the CTA walks their halves. Roles as in the 16-bit kernel:
//   WG0       S = Q K^T of a half tile (36 x m64n32k16), the causal tail's
//             scrub, the online softmax over its 32 tokens, P handed over
//             into one of two buffers (the two 32-column halves of the
//             16-bit kernel's P), so WG0 writes the next half tile's P
//             while WG1/WG2 still multiply with this one's.
//   WG1, WG2  O[:, 0:256] / O[:, 256:512] += P V (2 x m64n256k16), and,
//             while that product runs, the widening of the half tile two
//             ahead into the stage the previous product released: 8
//             threads a token row, one 64-column latent atom each (one
//             block scale a thread) and one 16-byte piece of the bf16 rope.
// A half tile's stored bytes are copied by cp.async into the staging buffer
// of its parity two half tiles before they are widened (each thread copies
// exactly the bytes it widens, so no barrier lies between), its rope rows
// straight into the stage with the hardware's arrival on the stage barrier,
// which completes with the 256 copy arrivals and the 256 widening ones.
// (Rope rows staged a half tile ahead in a third buffer instead, so that the
// barrier waits on no copy, measured the same: docs/fp8-cache.md.) The
// widening of a thread reads and writes its eight 16-byte pieces starting
// at piece (a + r) mod 8 (a: its atom, r: its row), so neither the staging
// reads nor the swizzled stage writes of a warp meet a bank conflict.
// The epilogue (row sums, lse, stores or the cluster merge) is the 16-bit
// kernel's; its merge scratch lies over Q and the stages, free by then.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "latent_wgmma_epilogue.cuh"
#include "latent_wgmma_fp8.cuh"

namespace gqla::cuda::latent {

constexpr int kHalfTile = kLatentTile / 2;                    // tokens per stage
constexpr int kHalfAtomBytes = kHalfTile * kSwizzleRowBytes;  // 32 rows x 64 columns
constexpr int kHalfStageBytes = kKeyAtoms * kHalfAtomBytes;   // latent atoms + the rope atom
constexpr int kHalfStages = 3;                                // scored, multiplied, being widened
constexpr int kHalfStagingBytes = kHalfTile * kLatentDim;     // one half tile's stored latent bytes
constexpr int kHalfThreadsPerRow = kFp8Threads / kHalfTile;   // 8: one atom and one rope piece each
static_assert(kHalfThreadsPerRow == kLatentAtoms && kHalfThreadsPerRow == kRopePieces, "one atom per thread");

// Shared memory of the 64-row 8-bit kernel: Q (64 x 576), three half-tile
// stages, P (the 64 x 64 layout of the 16-bit kernel, as two buffers of 32
// token columns), rescale / row max / row sum / limit [64] each, the second
// buffer's rescale [64], the tail masks [2][4], one mbarrier per stage, two
// staging buffers.
struct Fp8RowsSmem {
    static constexpr int kQAtomBytes = kLatentRows * kSwizzleRowBytes;
    static constexpr int kQOff = 0;
    static constexpr int kKOff = kQOff + kKeyAtoms * kQAtomBytes;
    static constexpr int kPOff = kKOff + kHalfStages * kHalfStageBytes;
    static constexpr int kXOff = kPOff + kQAtomBytes;
    static constexpr int kScale1Off = kXOff + 4 * 64 * 4;  // the second P buffer's rescale factors [64]
    static constexpr int kTailOff = kScale1Off + 64 * 4;
    static constexpr int kBarOff = kTailOff + 2 * 4 * 4;
    static constexpr int kStagingOff = (kBarOff + kHalfStages * 8 + 127) / 128 * 128;
    static constexpr int kBytes = kStagingOff + 2 * kHalfStagingBytes + 1024;  // + slack to align the base
    static_assert(kKOff % 1024 == 0 && kPOff % 1024 == 0 && kHalfStageBytes % 1024 == 0, "swizzle-period alignment");
    static_assert(kBytes <= 227 * 1024, "shared memory of one CTA");
    static_assert(kMergeOffsetsOff + kLatentRows * 8 <= kPOff, "the epilogue's merge scratch over Q and the stages");
};

// The half tiles a CTA walks: those of its split's tiles that hold tokens.
struct HalfRange {
    int begin, end;
};
__device__ __forceinline__ HalfRange half_range(const CtaWork& w) {
    const int with_tokens = (w.length + kHalfTile - 1) / kHalfTile;
    return HalfRange{2 * w.range.begin, max(2 * w.range.begin, min(2 * w.range.end, with_tokens))};
}
__device__ __forceinline__ int half_stage(const HalfRange& hr, int h) { return (h - hr.begin) % kHalfStages; }
__device__ __forceinline__ uint32_t half_phase(const HalfRange& hr, int h) {
    return static_cast<uint32_t>((h - hr.begin) / kHalfStages) & 1u;
}

// What a thread of WG1/WG2 (ftid = tid - 128: row ftid / 8 of every half
// tile, latent atom and rope piece ftid % 8) keeps between copying a half
// tile's bytes and widening them: its row's token handle (-1 past the end)
// and its atom's block scale for the next half tile to widen (cur) and the
// one after (ahead), and the row's token of the half tile after that.
struct Fp8RowStaged {
    int64_t cur_token, ahead_token, next;
    float cur_scale, ahead_scale;
};

// Half tile h's P buffer: its rescale factors, the barriers that hand it
// over (ready) and give it back (free), and its first token column of P.
struct PBuffer {
    float* scale;
    int ready, free, column;
};
__device__ __forceinline__ PBuffer p_buffer(const LatentShared& sh, float* scale1, const HalfRange& hr, int h) {
    return ((h - hr.begin) & 1) ? PBuffer{scale1, kBarPReadyOdd, kBarPFreeOdd, kHalfTile}
                                : PBuffer{sh.scale, kBarPReady, kBarPFree, 0};
}

__device__ __forceinline__ int64_t half_row_token(const AttentionParams& p, const CtaWork& w, const HalfRange& hr,
                                                  int h, int row) {
    const int j = h * kHalfTile + row;
    return h < hr.end && j < w.length ? cta_token(p, w, j) : -1;
}

// Half tile h's stored bytes of this thread's row and atom (64 bytes) by
// cp.async into the staging buffer of its parity (one commit group),
// the atom's block scale into `scale`, the row's token into `token`; the
// row's token of half tile h + 1 looked up into st.next.
__device__ __forceinline__ void stage_half(const AttentionParams& p, const CtaWork& w, const HalfRange& hr,
                                           unsigned char* staging, int h, int ftid, Fp8RowStaged& st, float& scale,
                                           int64_t& token) {
    const unsigned char* k1 = static_cast<const unsigned char*>(p.k1.base);
    const int r = ftid / kHalfThreadsPerRow, a = ftid % kHalfThreadsPerRow;
    token = st.next;
    const bool valid = token >= 0;
    const int64_t base = valid ? token : 0;
    const unsigned char* src = k1 + pool_offset(p.k1, base, w.g) + 64 * a;
    unsigned char* dst = staging + (h & 1) * kHalfStagingBytes + r * kLatentDim + 64 * a;
#pragma unroll
    for (int c = 0; c < 4; ++c) cp_async_16(dst + 16 * c, valid ? src + 16 * c : k1, valid);
    cp_async_commit();
    // The block scales of a row: 16 bytes at scale_offset + 16 * slot of its page.
    const int64_t page = base >> 32, slot = base & 0xffffffff;
    scale = valid ? __ldg(reinterpret_cast<const float*>(k1 + page * p.k1.page_stride + p.k1.scale_offset + 16 * slot +
                                                         4 * (a / 2)))
                  : 0.f;
    st.next = half_row_token(p, w, hr, h + 1, r);
}

// The staged bytes of this thread (row r, atom a) -> bf16 in the stage's
// atom a, times the block scale: eight 16-byte pieces, from piece (a + r) % 8.
__device__ __forceinline__ void widen_half(const unsigned char* staging, float scale, unsigned char* stage, int ftid) {
    const int r = ftid / kHalfThreadsPerRow, a = ftid % kHalfThreadsPerRow;
    const unsigned char* src = staging + r * kLatentDim + 64 * a;
    unsigned char* atom = stage + a * kHalfAtomBytes;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int piece = (i + a + r) & 7;
        const uint2 bytes = *reinterpret_cast<const uint2*>(src + 8 * piece);
        *reinterpret_cast<uint4*>(atom + swizzled_offset(r, piece)) = widen8_e4m3_scaled(bytes, scale);
    }
}

// Half tile h into its stage (free): the rope piece of this thread's row by
// cp.async (the hardware arrives on the stage barrier once it landed), the
// staged bytes widened (they were copied three commit groups back: the
// previous half tile's rope, the next half tile's bytes and this rope came
// after), the barrier told; then half tile h + 2's bytes into the staging
// buffer just read (or an empty group, which keeps that count).
__device__ __forceinline__ void fill_half(const AttentionParams& p, const CtaWork& w, const HalfRange& hr,
                                          const LatentShared& sh, int h, int ftid, Fp8RowStaged& st) {
    const int stage = half_stage(hr, h);
    unsigned char* dst = sh.stages + stage * kHalfStageBytes;
    {
        const __nv_bfloat16* k2 = static_cast<const __nv_bfloat16*>(p.k2.base);
        const int r = ftid / kHalfThreadsPerRow, piece = ftid % kHalfThreadsPerRow;
        const bool valid = st.cur_token >= 0;
        const __nv_bfloat16* src = k2 + pool_offset(p.k2, valid ? st.cur_token : 0, w.g) + 8 * piece;
        cp_async_16(dst + kLatentAtoms * kHalfAtomBytes + swizzled_offset(r, piece), valid ? src : k2, valid);
        cp_async_mbarrier_arrive_noinc(sh.bars + stage);
        cp_async_commit();
    }
    cp_async_wait<3>();
    widen_half(sh.staging + (h & 1) * kHalfStagingBytes, st.cur_scale, dst, ftid);
    mbarrier_arrive(sh.bars + stage);
    st.cur_token = st.ahead_token;
    st.cur_scale = st.ahead_scale;
    if (h + 2 < hr.end)
        stage_half(p, w, hr, sh.staging, h + 2, ftid, st, st.ahead_scale, st.ahead_token);
    else
        cp_async_commit();
}

// WG1/WG2 before the queries are staged: the stage barriers, and the first
// two half tiles' bytes in flight (with an empty group between them, the
// place of a previous rope copy in fill_half's count).
__device__ __forceinline__ void start_fp8_halves(const AttentionParams& p, const CtaWork& w, const HalfRange& hr,
                                                 const LatentShared& sh, int ftid, Fp8RowStaged& st) {
    if (ftid == 0) {
        for (int s = 0; s < kHalfStages; ++s) mbarrier_init(sh.bars + s, kFp8StageArrivals);
        mbarrier_init_fence();
    }
    named_barrier_sync(kBarStagesReady, kFp8Threads);  // every thread of WG1/WG2 arrives on them
    st.next = half_row_token(p, w, hr, hr.begin, ftid / kHalfThreadsPerRow);
    st.cur_token = st.ahead_token = -1;
    st.cur_scale = st.ahead_scale = 0.f;
    if (hr.begin < hr.end)
        stage_half(p, w, hr, sh.staging, hr.begin, ftid, st, st.cur_scale, st.cur_token);
    else
        cp_async_commit();
    cp_async_commit();
    if (hr.begin + 1 < hr.end)
        stage_half(p, w, hr, sh.staging, hr.begin + 1, ftid, st, st.ahead_scale, st.ahead_token);
    else
        cp_async_commit();
}

// WG0: S = Q K^T of the 64 rows and a half tile's 32 tokens (36 x
// m64n32k16), completed.
template <typename T>
__device__ __forceinline__ void multiply_scores_half(float (&s)[16], uint64_t q_desc, uint64_t k_desc) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kKeySteps; ++ks) {
        const uint32_t in_row = (ks & 3) * 32;
        wgmma_m64n32k16<T>(s, desc_advance(q_desc, (ks >> 2) * Fp8RowsSmem::kQAtomBytes + in_row),
                           desc_advance(k_desc, (ks >> 2) * kHalfAtomBytes + in_row), ks != 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s);
}

// WG0's half tile h: the scores once its stage is complete, the causal
// tail's scrub, the online softmax and P handed to WG1/WG2 (scale1: the
// second P buffer's rescale factors).
template <typename T>
__device__ __forceinline__ void score_half(const AttentionParams& p, const CtaWork& w, const HalfRange& hr,
                                           const LatentShared& sh, float* scale1, const Fragment& f, uint64_t q_desc,
                                           uint64_t k_desc, int first_hidden, int h, RowState& st) {
    const int stage = half_stage(hr, h);
    mbarrier_wait(sh.bars + stage, half_phase(hr, h));
    fence_proxy_async_smem();  // the widened rows were written through the generic proxy
    float s[16];
    multiply_scores_half<T>(s, q_desc, desc_advance(k_desc, stage * kHalfStageBytes));
    const int first = h * kHalfTile;
    const bool tail = in_tail<kHalfTile>(w, first_hidden, h);
    uint32_t bad = 0;
    if (tail)
        bad = share_tail_masks<T, kHalfTile>(sh.stages + stage * kHalfStageBytes, sh.tail_mask, h, first_hidden,
                                             w.length, f.warp, f.lane)
                  .x;
    mask_rows(s, st, first, f.c_lane);
    uint32_t pa[8];
    const float2 alpha = softmax_rows<T>(s, pa, st, first, f.c_lane, p.scale_log2, tail, bad, 0u);
    // P into the buffer of h's parity, once WG1/WG2's product of h - 2 read it.
    const PBuffer pb = p_buffer(sh, scale1, hr, h);
    hand_over_rows(sh.p, pb.scale, pa, alpha, h >= hr.begin + 2, f, pb.column, pb.free, pb.ready);
}

// kRows = 64 over an 8-bit latent (T = bf16 stages). The TMA maps are not
// read (8-bit tiles are copied and widened); the parameter keeps the
// launch's signature.
__global__ void __launch_bounds__(kLatentThreads, 1)
    latent_wgmma_fp8_rows_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ LatentTmaMaps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = __nv_bfloat16;
    extern __shared__ unsigned char smem_raw[];
    const LatentShared sh = latent_shared<Fp8RowsSmem>(smem_raw, true);
    float* scale1 = reinterpret_cast<float*>(sh.base + Fp8RowsSmem::kScale1Off);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3;
    const CtaWork w = cta_work(p, kLatentRows, kLatentTile);
    const HalfRange hr = half_range(w);
    const int ftid = tid - kWgThreads;  // its thread among WG1/WG2
    Fp8RowStaged staged;
    if (wg >= 1) start_fp8_halves(p, w, hr, sh, ftid, staged);  // the first bytes in flight
    const int first_hidden = stage_queries<T, kLatentRows>(p, w, sh, tid);

    const Fragment f = fragment_of(wi, lane);
    LatentShared epilogue = sh;  // the merge scratch: Q and the stages, free after the products
    epilogue.stages = sh.base;
    if (wg == 0) {
        const uint64_t q_desc = smem_desc_sw128(sh.q, 16, kSwizzleGroupBytes);
        const uint64_t k_desc = smem_desc_sw128(sh.stages, 16, kSwizzleGroupBytes);
        RowState st = row_state(sh.limit, f);
        for (int h = hr.begin; h < hr.end; ++h)
            score_half<T>(p, w, hr, sh, scale1, f, q_desc, k_desc, first_hidden, h, st);
        finish_score_rows(p, w, epilogue, st, f);
        return;
    }
    const int atom0 = (wg - 1) * 4;  // WG1/WG2: their four 64-column latent atoms
    const uint64_t p_desc = smem_desc_sw128(sh.p, 16, kSwizzleGroupBytes);
    const uint64_t v_desc = smem_desc_sw128(sh.stages + atom0 * kHalfAtomBytes, kHalfAtomBytes, kSwizzleGroupBytes);
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    for (int h = hr.begin; h < hr.end && h < hr.begin + 2; ++h) fill_half(p, w, hr, sh, h, ftid, staged);
    for (int h = hr.begin; h < hr.end; ++h) {
        // P of h written in the buffer of its parity (its stage complete before its scores).
        const PBuffer pb = p_buffer(sh, scale1, hr, h);
        named_barrier_sync(pb.ready, kLatentThreads);
        fence_proxy_async_smem();
        float2 alpha;
        if (row_factors(alpha, pb.scale, f)) rescale_rows(o, alpha);  // the running max moved
        issue_values_rows<T, kHalfTile>(o, desc_advance(p_desc, pb.column * 2),
                                        desc_advance(v_desc, half_stage(hr, h) * kHalfStageBytes));
        if (h + 2 < hr.end) {
            // Half tile h - 1's stage (both warpgroups' products of it done) takes h + 2
            // while the product of h runs.
            named_barrier_sync(kBarKEmpty, kFp8Threads);
            fill_half(p, w, hr, sh, h + 2, ftid, staged);
        }
        complete_values_rows(o);
        if (h + 2 < hr.end) named_barrier_arrive(pb.free, kLatentThreads);
    }
    end_values();  // WG0's row max / sum visible
    write_value_rows(p, w, epilogue, o, f, atom0);
#endif
}

}  // namespace gqla::cuda::latent

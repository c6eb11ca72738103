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

template <typename T, int ST, bool FP8 = false>
__global__ void __launch_bounds__(kWarpKernelWarps * 32)
    attention_warp_kernel(const __grid_constant__ AttentionParams p) {
    constexpr int NW = kWarpKernelWarps, NT = NW * 32, MAX_NT = kWarpKernelMaxDv / 8;
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
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const SplitRange range = w.range;

    if constexpr (FP8) {
        // 8 threads a row: the row's largest finite magnitude, then the row
        // divided by the power of two 2^e that puts it in [2^14, 2^15).
        static_assert(NT == 16 * 8, "8 threads per query row");
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
        int e = 0;
        if (amax > 0.f) {
            frexpf(amax, &e);  // amax < 2^e
            e -= 15;
        }
        for (int c = sub; c < dk16; c += 8)
            sQ[m * L.k_stride + c] =
                from_float<T>(real && c < dk ? ldexpf(load_elem(p.q, p.q_dtype, q0 + c), -e) : 0.f);
        if (sub == 0) sRowQ[m] = ldexpf(1.f, e);
    } else {
        for (int i = tid; i < 16 * dk16; i += NT) {
            int m = i / dk16, c = i - m * dk16, mg = rb * 16 + m;
            float v = 0.f;
            if (mg < p.rows && c < dk) {
                const auto [qi, h] = query_head(p, g, mg);
                v = load_elem(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + c);
            }
            sQ[m * L.k_stride + c] = from_float<T>(v);
        }
    }
    // Warp-private stages; pad columns stay zero (cp.async never writes them).
    T* wK = reinterpret_cast<T*>(smem + L.kv_off + warp * L.warp_bytes);
    const int stage_elems = 16 * L.k_stride + (p.v_aliases_k1 ? 0 : 16 * L.v_stride);
    // 8-bit caches: stage s's stored bytes (keys, values, key and value scales).
    unsigned char* const wRaw = smem + L.kv_off + warp * L.warp_bytes + L.tile_bytes;
    auto raw_k = [&](int stage) { return wRaw + stage * L.raw_stage_bytes; };
    auto raw_v = [&](int stage) { return raw_k(stage) + 16 * dk16; };
    auto raw_scales = [&](int stage) { return reinterpret_cast<float*>(raw_v(stage) + 16 * dv16); };
    for (int s = 0; s < (FP8 ? 1 : ST); ++s) {
        T* k = wK + s * stage_elems;
        for (int i = lane; i < 16 * (dk16 - dk); i += 32)
            k[(i / (dk16 - dk)) * L.k_stride + dk + i % (dk16 - dk)] = from_float<T>(0.f);
        if (!p.v_aliases_k1) {
            T* v = k + 16 * L.k_stride;
            for (int i = lane; i < 16 * (dv16 - dv); i += 32)
                v[(i / (dv16 - dv)) * L.v_stride + dv + i % (dv16 - dv)] = from_float<T>(0.f);
        }
    }
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
    auto chunk_token = [&](int c) { return (range.begin + c) * kWarpKernelTile + warp * 16 + my_row; };
    auto fetch_base = [&](int c) -> int64_t {
        int j = chunk_token(c);
        return (my_half == 0 && c < chunks && j < length) ? cta_token(p, w, j) : -1;
    };
    auto issue = [&](int stage, int64_t tb) {
        if constexpr (FP8) {
            // Stored bytes and this row's two scales (GQA kind: k2 absent).
            const bool valid = tb >= 0;
            const int64_t base = valid ? tb : 0;
            const int64_t page = base >> 32, slot = base & 0xffffffff;
            const unsigned char* kb = static_cast<const unsigned char*>(p.k1.base);
            const unsigned char* vbb = static_cast<const unsigned char*>(p.v.base);
            copy_scattered_byte_rows16(raw_k(stage), dk16, valid ? kb + pool_offset(p.k1, base, g) : nullptr, dk1, kb,
                                       lane);
            copy_scattered_byte_rows16(raw_v(stage), dv16, valid ? vbb + pool_offset(p.v, base, g) : nullptr, dv, vbb,
                                       lane);
            if (my_half == 0) {
                const int64_t scale_row = 4 * (int64_t(g) * p.page_size + slot);
                float* sc = raw_scales(stage);
                cp_async_4(sc + my_row, kb + page * p.k1.page_stride + p.k1.scale_offset + scale_row, valid);
                cp_async_4(sc + 16 + my_row, vbb + page * p.v.page_stride + p.v.scale_offset + scale_row, valid);
            }
            return;
        }
        T* k = wK + stage * stage_elems;
        T* v = k + 16 * L.k_stride;
        const bool valid = tb >= 0;
        const int64_t base = valid ? tb : 0;
        const SmemRows k_rows{L.k_stride, false}, v_rows{L.v_stride, false};
        copy_scattered_rows16(k, k_rows, 0, valid ? k1 + pool_offset(p.k1, base, g) : nullptr, dk1, k1, lane);
        if (dk2)
            copy_scattered_rows16(k, k_rows, dk1, valid ? k2 + pool_offset(p.k2, base, g) : nullptr, dk2, k2, lane);
        if (!p.v_aliases_k1)
            copy_scattered_rows16(v, v_rows, 0, valid ? vb + pool_offset(p.v, base, g) : nullptr, dv, vb, lane);
    };

    float acc[MAX_NT][4];
#pragma unroll
    for (int i = 0; i < MAX_NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float run_m[2] = {-INFINITY, -INFINITY}, run_l[2] = {0.f, 0.f};  // l: this lane's partial sum
    // 8-bit caches: this lane's two query rows' scales, and the power of two
    // the accumulated outputs are divided by.
    float row_q[2] = {1.f, 1.f};
    int v_exp = 0, v_exp_max = -1000;
    if constexpr (FP8) {
        row_q[0] = sRowQ[lane >> 2];
        row_q[1] = sRowQ[(lane >> 2) + 8];
    }

    // Chunks 0..ST-2 in flight before the loop; page ids of the next two
    // chunks to issue are held in registers so their table loads (which can
    // queue behind the K/V traffic) have a whole iteration to land.
#pragma unroll
    for (int st = 0; st < ST - 1; ++st) {
        issue(st, fetch_base(st));
        cp_async_commit();
    }
    int64_t base_a = fetch_base(ST - 1), base_b = fetch_base(ST);
    for (int c = 0; c < chunks; ++c) {
        const int stage = c % ST;
        if (c + ST - 1 < chunks) issue((c + ST - 1) % ST, base_a);
        cp_async_commit();
        base_a = base_b;
        base_b = fetch_base(c + ST + 1);
        cp_async_wait<ST - 1>();
        __syncwarp();
        const T* tK = wK + (FP8 ? 0 : stage * stage_elems);
        const T* tV = p.v_aliases_k1 ? tK : tK + 16 * L.k_stride;
        const int vstride = L.v_stride;
        const float* scales = FP8 ? raw_scales(stage) : nullptr;  // [16] key scales, then [16] value scales
        if constexpr (FP8) {
            const unsigned char* rk = raw_k(stage);
            const unsigned char* rv = raw_v(stage);
            // 8-byte pieces (widths are multiples of 8); the tile's pad
            // columns past the width stay zero.
            for (int piece = lane; piece < 2 * dk1; piece += 32) {  // 16 rows x dk1 / 8 pieces
                const int r = piece / (dk1 / 8), c = (piece - r * (dk1 / 8)) * 8;
                widen8_e4m3_to_f16(rk + r * dk16 + c, const_cast<T*>(tK) + r * L.k_stride + c);
            }
            for (int piece = lane; piece < 2 * dv; piece += 32) {
                const int r = piece / (dv / 8), c = (piece - r * (dv / 8)) * 8;
                widen8_e4m3_to_f16(rv + r * dv16 + c, const_cast<T*>(tV) + r * vstride + c);
            }
            __syncwarp();
        }

        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        const T* qrow = sQ + (lane & 15) * L.k_stride + (lane >> 4) * 8;
        const T* krow = tK + ((lane & 7) + ((lane >> 4) << 3)) * L.k_stride + ((lane >> 3) & 1) * 8;
        for (int kk = 0; kk < dk16; kk += 16) {
            uint32_t a[4], bk[4];
            ldmatrix_x4(a, qrow + kk);
            ldmatrix_x4(bk, krow + kk);
            mma_16816<T>(s[0], a, bk[0], bk[1]);
            mma_16816<T>(s[1], a, bk[2], bk[3]);
        }
        const int tok0 = (range.begin + c) * kWarpKernelTile + warp * 16;
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    int j = tok0 + n * 8 + (lane & 3) * 2 + e;
                    float score = s[n][hr * 2 + e];
                    if constexpr (FP8) score *= row_q[hr] * scales[n * 8 + (lane & 3) * 2 + e];
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
        // Tokens of the chunk some row may not see (loaded: before the end):
        // value rows scrubbed, NaN probabilities for the rows that may see a
        // scrubbed one.
        if (tok0 + 16 > first_hidden && first_hidden < length) {
            const uint32_t bad = scrub_rows(const_cast<T*>(tV), SmemRows{vstride, false}, 16, dv, lane);
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
        if constexpr (FP8) {
            // The chunk's power of two 2^ev > its largest value scale (at
            // least 2^-64 of the largest so far, so that the outputs divided
            // by it stay far inside f32's range); the outputs so far are
            // rescaled from the previous chunk's power.
            float vmax = scales[16 + (lane & 15)];
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
            int ev = v_exp;  // a chunk of slots past the end (zero scales) keeps it
            if (vmax > 0.f) {
                frexpf(vmax, &ev);  // vmax < 2^ev
                ev = max(ev, v_exp_max - 64);
            }
            v_exp_max = max(v_exp_max, ev);
            const float rescale = ldexpf(1.f, v_exp - ev), inv = ldexpf(1.f, -ev);
            alpha[0] *= rescale;
            alpha[1] *= rescale;
            v_exp = ev;
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] *= scales[16 + n * 8 + (lane & 3) * 2 + (e & 1)] * inv;
        }
        // S accumulators (m16n8 x2) are exactly the A fragment of P (m16k16).
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
        __syncwarp();  // the stage is refilled next iteration
    }
    cp_async_wait<0>();

    // Merge the warps: row max over warps, then each warp adds its rescaled O.
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        run_l[hr] += __shfl_xor_sync(0xffffffffu, run_l[hr], 1);
        run_l[hr] += __shfl_xor_sync(0xffffffffu, run_l[hr], 2);
        if ((lane & 3) == 0) {
            sWarpM[warp * 16 + (lane >> 2) + hr * 8] = run_m[hr];
            sWarpL[warp * 16 + (lane >> 2) + hr * 8] = run_l[hr];
        }
    }
    __syncthreads();
    float scale[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = (lane >> 2) + hr * 8;
        float M = -INFINITY;
        for (int w = 0; w < NW; ++w) M = fmaxf(M, sWarpM[w * 16 + r]);
        scale[hr] = (run_m[hr] == -INFINITY) ? 0.f : ldexpf(exp2_ftz(run_m[hr] - M), FP8 ? v_exp : 0);
        if (warp == 0 && (lane & 3) == 0) {
            float tot = 0.f;
            for (int w = 0; w < NW; ++w) tot += rescaled_sum(sWarpM[w * 16 + r], sWarpL[w * 16 + r], M);
            sRowL[r] = tot;
            sRowM[r] = M;
        }
    }
    for (int i = tid; i < 16 * dv16; i += NT) sO[i] = 0.f;
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
    for (int i = tid; i < 16 * dv; i += NT) {
        const int m = i / dv, col = i - m * dv, mg = rb * 16 + m;
        if (mg >= p.rows) continue;
        const float l = sRowL[m];
        const auto [qi, h] = query_head(p, g, mg);
        write_output(p, split, b, qi, h, col, normalized(sO[m * dv16 + col], l));
    }
    if (tid < 16) {
        const int mg = rb * 16 + tid;
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, g, mg);
            write_row_lse(p, split, b, qi, h, sRowM[tid], sRowL[tid]);
        }
    }
}

}  // namespace gqla::cuda

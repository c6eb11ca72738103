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
#pragma once

#include "attention_common.cuh"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"
#include "row_copies.cuh"

namespace gqla::cuda {

constexpr int kWarpKernelWarps = 4;
constexpr int kWarpKernelTile = 16 * kWarpKernelWarps;  // tokens per CTA step
constexpr int kWarpKernelMaxDv = 128;
constexpr int kWarpKernelMinStages = 2;
constexpr int kWarpKernelMaxStages = 4;

struct WarpLayout {
    int k_stride, v_stride, q_off, kv_off, warp_bytes, o_off, f_off, bytes;
};

__host__ __device__ inline int max_int(int a, int b) { return a > b ? a : b; }
__host__ __device__ inline WarpLayout warp_layout(int dk, int dv, bool alias, int stages) {
    WarpLayout L{};
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    L.k_stride = dk16 + 8;
    L.v_stride = alias ? L.k_stride : dv16 + 8;
    const int stage_bytes = 16 * L.k_stride * 2 + (alias ? 0 : 16 * L.v_stride * 2);
    L.q_off = 0;
    L.kv_off = (16 * L.k_stride * 2 + 127) / 128 * 128;
    L.warp_bytes = stages * stage_bytes;
    // The merged O reuses the K/V stages: it is only written after every warp
    // has finished its tokens.
    L.o_off = L.kv_off;
    L.f_off = L.kv_off + max_int(kWarpKernelWarps * L.warp_bytes, 16 * dv16 * 4);
    L.bytes = L.f_off + (2 * kWarpKernelWarps * 16 + 2 * 16) * 4;  // per-warp m, l; merged l, m
    return L;
}

template <typename T, int ST>
__global__ void __launch_bounds__(kWarpKernelWarps * 32)
    attention_warp_kernel(const __grid_constant__ AttentionParams p) {
    constexpr int NW = kWarpKernelWarps, NT = NW * 32, MAX_NT = kWarpKernelMaxDv / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = dk1 + dk2, dv = p.v.dim;
    const WarpLayout L = warp_layout(dk, dv, p.v_aliases_k1 != 0, ST);
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    T* sQ = reinterpret_cast<T*>(smem + L.q_off);
    float* sO = reinterpret_cast<float*>(smem + L.o_off);
    float* sWarpM = reinterpret_cast<float*>(smem + L.f_off);
    float* sWarpL = sWarpM + NW * 16;
    float* sRowL = sWarpL + NW * 16;
    float* sRowM = sRowL + 16;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const CtaWork w = cta_work(p, 16, kWarpKernelTile);
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const int32_t* table = w.table;
    const SplitRange range = w.range;

    for (int i = tid; i < 16 * dk16; i += NT) {
        int m = i / dk16, c = i - m * dk16, mg = rb * 16 + m;
        float v = 0.f;
        if (mg < p.rows && c < dk) {
            const auto [qi, h] = query_head(p, g, mg);
            v = load_elem(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + c);
        }
        sQ[m * L.k_stride + c] = from_float<T>(v);
    }
    // Warp-private stages; pad columns stay zero (cp.async never writes them).
    T* wK = reinterpret_cast<T*>(smem + L.kv_off + warp * L.warp_bytes);
    const int stage_elems = 16 * L.k_stride + (p.v_aliases_k1 ? 0 : 16 * L.v_stride);
    for (int s = 0; s < ST; ++s) {
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
        return (my_half == 0 && c < chunks && j < length) ? token_base(table, j, p.page_size, p.page_shift) : -1;
    };
    auto issue = [&](int stage, int64_t tb) {
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
        const T* tK = wK + stage * stage_elems;
        const T* tV = p.v_aliases_k1 ? tK : tK + 16 * L.k_stride;
        const int vstride = L.v_stride;

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
                    float v = (j <= limit[hr]) ? s[n][hr * 2 + e] * p.scale_log2 : -INFINITY;
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
        scale[hr] = (run_m[hr] == -INFINITY) ? 0.f : exp2_ftz(run_m[hr] - M);
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

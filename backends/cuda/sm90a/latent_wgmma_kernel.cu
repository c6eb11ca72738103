// Absorb-path decode over the latent cache on Hopper warpgroup MMAs.
//
// One CTA = one sequence x 64 query rows (heads x s_q) x one split of the
// tokens; two warpgroups (WG0, WG1). Per 64-token tile:
//   S = Q K^T    WG w computes the scores of tokens [32w, 32w+32) for all 64
//                rows (m64n32k16 over the 576-wide key: 36 wgmmas), so the
//                score work is split, not repeated.
//   softmax      row maxima are exchanged through shared memory; both WGs
//                then hold the same running max, so each keeps its own
//                partial row sums and they are added once at the end.
//   O += P V     P (64 x 64, bf16/f16) goes to shared memory; WG w owns
//                value columns [256w, 256w+256): m64n256k16 with the latent
//                tile itself as the transposed B operand (V = C, no copy).
// Tiles are copied with 16-byte cp.async into the 128B-swizzled layout
// wgmma reads, two stages in flight (2 x 72 KiB + Q 72 KiB of shared memory).
// Partial outputs and log2-sum-exp go through write_output/write_row_lse, so
// the split combine kernel and the output addressing are the common ones.
//
// What bounds it (H200, clock64 phase counts, B=64, T=16384): ~5900 cycles
// per tile, of which the two products take ~2200 at the tensor peak and the
// rest is the softmax/exchange between them plus waiting for the next tile:
// with two stages only one 72 KiB tile is in flight per SM, so the load
// latency is exposed. Moving the copies under the scores' MMAs and splitting
// the scores over the key dim instead of the tokens changed nothing; the
// next steps are TMA loads and two WGs working on different tiles
// (softmax of one overlapping the MMAs of the other).
#include "../attention_common.cuh"
#include "../cuda_status.hpp"
#include "../latent_wgmma.hpp"
#include "wgmma_primitives.cuh"

namespace gqla::cuda {

namespace {

constexpr int kLatentDim = 512;                 // value width = latent width
constexpr int kAtomBytes = kLatentRows * kSwizzleRowBytes;  // 64 rows x 64 columns
constexpr int kRopeDim = 64;
constexpr int kKeyAtoms = (kLatentDim + kRopeDim) / 64;  // 9: compile-time trip counts keep wgmma asynchronous
constexpr int kStages = 2;
constexpr int kQOff = 0;
constexpr int kKOff = kQOff + kKeyAtoms * kAtomBytes;
constexpr int kStageBytes = kKeyAtoms * kAtomBytes;
constexpr int kPOff = kKOff + kStages * kStageBytes;
constexpr int kXOff = kPOff + kAtomBytes;           // row max [2][64], row sum [2][64], limit [64]
constexpr int kSmemUsed = kXOff + (2 * 64 + 2 * 64 + 64) * 4;
constexpr int kSmemBytes = kSmemUsed + 1024;        // slack to align the base to the swizzle period
static_assert(kLatentRows == 64 && kLatentTile == 64 && kLatentThreads == 256, "tiling constants");

template <typename T>
__device__ __forceinline__ uint32_t pack_two(float lo, float hi) {
    return pack_pair(lo, hi, static_cast<T*>(nullptr));
}

template <typename T>
__global__ void __launch_bounds__(kLatentThreads, 1) latent_wgmma_kernel(const __grid_constant__ AttentionParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    unsigned char* sQ = smem + kQOff;
    unsigned char* sK = smem + kKOff;
    unsigned char* sP = smem + kPOff;
    float* sMax = reinterpret_cast<float*>(smem + kXOff);
    float* sSum = sMax + 2 * 64;
    int* sLimit = reinterpret_cast<int*>(sSum + 2 * 64);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const CtaWork w = cta_work(p, kLatentRows, kLatentTile);
    const int rb = w.rb, g = w.g, b = w.b, split = w.split, length = w.length;
    const int32_t* table = w.table;
    const SplitRange range = w.range;

    // Queries -> shared memory (any dtype -> T), swizzled, padding rows zero.
    // Pieces are loaded in batches before any is stored, so the 18 pieces of
    // a thread cost three memory latencies, not eighteen.
    constexpr int kQPieces = kLatentRows * kKeyAtoms * 8, kQBatch = 6;
    static_assert(kQPieces % (kLatentThreads * kQBatch) == 0, "whole batches of query pieces");
    for (int i0 = tid; i0 < kQPieces; i0 += kLatentThreads * kQBatch) {
        float v[kQBatch][8];
#pragma unroll
        for (int k = 0; k < kQBatch; ++k) {
            const int i = i0 + k * kLatentThreads;
            const int m = i / (kKeyAtoms * 8), piece = i - m * (kKeyAtoms * 8);
            const int mg = rb * kLatentRows + m;
            int64_t off = 0;
            if (mg < p.rows) {
                const int qi = mg / p.heads_per_group, h = g * p.heads_per_group + (mg - qi * p.heads_per_group);
                off = row_offset(p.qa, b, qi, h) + piece * 8;
            }
            load_elems8(p.q, p.q_dtype, off, mg < p.rows ? 8 : 0, v[k]);
        }
#pragma unroll
        for (int k = 0; k < kQBatch; ++k) {
            const int i = i0 + k * kLatentThreads;
            const int m = i / (kKeyAtoms * 8), piece = i - m * (kKeyAtoms * 8);
            *reinterpret_cast<uint4*>(sQ + (piece >> 3) * kAtomBytes + swizzled_offset(m, piece & 7)) = pack_eight<T>(v[k]);
        }
    }
    for (int m = tid; m < kLatentRows; m += kLatentThreads) {
        const int mg = rb * kLatentRows + m;
        sLimit[m] = (mg < p.rows) ? length - p.q_len + mg / p.heads_per_group : length - 1;
    }
    const int wi = (tid >> 5) & 3;

    // Copies: 8 threads per token row (piece = tid % 8 of every 128-byte
    // atom row), rows tid/8 and tid/8 + 32 of the tile.
    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const int piece = tid & 7, row0 = tid >> 3;
    auto fetch_bases = [&](int tile, int64_t tb[2]) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int j = tile * kLatentTile + row0 + 32 * i;
            tb[i] = (tile < range.end && j < length) ? token_base(table, j, p.page_size, p.page_shift) : -1;
        }
    };
    auto issue_tile = [&](int stage, const int64_t tb[2]) {
        unsigned char* dst = sK + stage * kStageBytes;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = row0 + 32 * i;
            const bool valid = tb[i] >= 0;
            const int64_t base = valid ? tb[i] : 0;
            const T* s1 = k1 + pool_offset(p.k1, base, g) + piece * 8;
            const int off = swizzled_offset(r, piece);
#pragma unroll
            for (int a = 0; a < kLatentDim / 64; ++a)
                cp_async_16(dst + a * kAtomBytes + off, valid ? s1 + a * 64 : k1, valid);
            const T* s2 = k2 + pool_offset(p.k2, base, g) + piece * 8;
            cp_async_16(dst + (kLatentDim / 64) * kAtomBytes + off, valid ? s2 : k2, valid);
        }
    };

    int64_t tb_next[2];
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
        fetch_bases(range.begin + st, tb_next);
        if (range.begin + st < range.end) issue_tile(st, tb_next);
        cp_async_commit();
    }
    fetch_bases(range.begin + kStages, tb_next);

    // Scores of one tile (64 rows x this WG's 32 tokens, all 36 k-steps),
    // issued asynchronously: committed, not waited for. Splitting the tokens
    // (not the key dim) keeps the two WGs' scores independent; a k-split
    // variant (m64n64, halves added through shared memory) measured the same.
    float s[16];
    auto issue_scores = [&](const unsigned char* tK) {
        wgmma_fence();
#pragma unroll 4
        for (int ks = 0; ks < kKeyAtoms * 4; ++ks) {
            const int off = (ks >> 2) * kAtomBytes + (ks & 3) * 32;
            wgmma_m64n32k16<T>(s, smem_desc_sw128(sQ + off, 16, kSwizzleGroupBytes),
                               smem_desc_sw128(tK + off + wg * 32 * kSwizzleRowBytes, 16, kSwizzleGroupBytes), ks != 0);
        }
        wgmma_commit();
    };

    // Accumulator fragment of wgmma m64nN: this thread holds rows r0 and r0 + 8,
    // columns 8j + 2*(lane % 4) + {0, 1} in registers 4j + {0, 1} / 4j + {2, 3}.
    const int r0 = wi * 16 + (lane >> 2), r1 = r0 + 8;
    const int c_lane = 2 * (lane & 3);
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) s[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    // Software pipeline: the scores of tile t+1 are issued right behind the
    // P V product of tile t, so the tensor cores run both back to back while
    // the softmax of the next tile waits only for its own scores.
    // wgmma issue stays unconditional (a branch around it makes ptxas
    // serialize every wgmma): an empty split scores stale shared memory and
    // never reads the result.
    cp_async_wait<kStages - 1>();
    fence_proxy_async_smem();  // this thread's copies and Q stores -> wgmma's proxy
    __syncthreads();
    issue_scores(sK);
    wgmma_wait<0>();
    fence_accumulators(s);
    const int lim0 = sLimit[r0], lim1 = sLimit[r1];

    for (int tile = range.begin; tile < range.end; ++tile) {
        const int stage = (tile - range.begin) % kStages;
        unsigned char* tK = sK + stage * kStageBytes;

        // This WG's 32 tokens of the tile: sc[4j + k], j = n8 block (a copy:
        // s is the accumulator of the next tile's scores).
        float sc[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) sc[i] = s[i];

        float mx0 = -INFINITY, mx1 = -INFINITY;
        const int j_base = tile * kLatentTile + wg * 32 + c_lane;
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int jj = j_base + 8 * j + e;
                sc[4 * j + e] = jj <= lim0 ? sc[4 * j + e] * p.scale_log2 : -INFINITY;
                sc[4 * j + 2 + e] = jj <= lim1 ? sc[4 * j + 2 + e] * p.scale_log2 : -INFINITY;
                mx0 = fmaxf(mx0, sc[4 * j + e]);
                mx1 = fmaxf(mx1, sc[4 * j + 2 + e]);
            }
#pragma unroll
        for (int off = 1; off < 4; off <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        if ((lane & 3) == 0) { sMax[wg * 64 + r0] = mx0; sMax[wg * 64 + r1] = mx1; }
        __syncthreads();  // maxima visible
        const float n0 = fmaxf(m0, fmaxf(mx0, sMax[(wg ^ 1) * 64 + r0]));
        const float n1 = fmaxf(m1, fmaxf(mx1, sMax[(wg ^ 1) * 64 + r1]));
        const float alpha0 = n0 == -INFINITY ? 1.f : exp2f(m0 - n0);
        const float alpha1 = n1 == -INFINITY ? 1.f : exp2f(m1 - n1);
        m0 = n0;
        m1 = n1;
        float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float e[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float mk = k < 2 ? n0 : n1;
                e[k] = mk == -INFINITY ? 0.f : exp2f(sc[4 * j + k] - mk);
            }
            sum0 += e[0] + e[1];
            sum1 += e[2] + e[3];
            const int c = wg * 32 + 8 * j + c_lane;  // token column of P
            *reinterpret_cast<uint32_t*>(sP + swizzled_offset(r0, c >> 3) + (c & 7) * 2) = pack_two<T>(e[0], e[1]);
            *reinterpret_cast<uint32_t*>(sP + swizzled_offset(r1, c >> 3) + (c & 7) * 2) = pack_two<T>(e[2], e[3]);
        }
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
        fence_proxy_async_smem();
        __syncthreads();  // both halves of P written, maxima read

        // O = alpha O + P V over this WG's 256 value columns (async).
#pragma unroll
        for (int i = 0; i < 128; ++i) o[i] *= (i & 2) ? alpha1 : alpha0;
        fence_accumulators(o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kLatentTile / 16; ++kk) {
            const uint64_t da = smem_desc_sw128(sP + kk * 32, 16, kSwizzleGroupBytes);
            const uint64_t db = smem_desc_sw128(tK + (wg * 4) * kAtomBytes + kk * 16 * kSwizzleRowBytes, kAtomBytes,
                                                kSwizzleGroupBytes);
            wgmma_m64n256k16_bt<T>(o, da, db, 1);
        }
        wgmma_commit();

        // Scores of the next tile behind it (after the last tile: of a stale
        // stage, unused).
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();  // every thread's copies of tile + 1 landed
        issue_scores(sK + ((tile + 1 - range.begin) % kStages) * kStageBytes);

        // Refill this stage while the scores run: issuing 18 copies per
        // thread costs about as long as the scores' MMAs (H200 clock counts).
        wgmma_wait<1>();
        fence_accumulators(o);
        __syncthreads();  // P V of this tile done in both WGs: stage and P free
        if (tile + kStages < range.end) issue_tile(stage, tb_next);
        cp_async_commit();
        fetch_bases(tile + kStages + 1, tb_next);
        wgmma_wait<0>();
        fence_accumulators(s);
    }
    cp_async_wait<0>();

    // Row sums: the 4 lanes of a row, then the two warpgroups.
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    if ((lane & 3) == 0) { sSum[wg * 64 + r0] = l0; sSum[wg * 64 + r1] = l1; }
    __syncthreads();
    const float L0 = sSum[r0] + sSum[64 + r0], L1 = sSum[r1] + sSum[64 + r1];
    const int mg0 = rb * kLatentRows + r0, mg1 = rb * kLatentRows + r1;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int mg = half ? mg1 : mg0;
        if (mg >= p.rows) continue;
        const float L = half ? L1 : L0;
        const float inv = L > 0.f ? 1.f / L : 0.f;
        const int qi = mg / p.heads_per_group, h = g * p.heads_per_group + (mg - qi * p.heads_per_group);
#pragma unroll
        for (int j = 0; j < 32; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                write_output(p, split, b, qi, h, wg * 256 + 8 * j + c_lane + e, o[4 * j + 2 * half + e] * inv);
        if (wg == 0 && (lane & 3) == 0) write_row_lse(p, split, b, qi, h, half ? m1 : m0, L);
    }
#endif
}

const void* kernel_for(gqla_dtype cache) {
    return cache == GQLA_DTYPE_F16 ? reinterpret_cast<const void*>(&latent_wgmma_kernel<__half>)
                                   : reinterpret_cast<const void*>(&latent_wgmma_kernel<__nv_bfloat16>);
}

}  // namespace

bool latent_wgmma_available(int device) {
    int major = 0, minor = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
    check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "compute capability");
    return major == 9 && minor == 0;  // sm_90a code runs on exactly this architecture
}

bool latent_wgmma_fits(const AttentionParams& p) {
    return p.v_aliases_k1 && p.k1.dim == kLatentDim && p.v.dim == kLatentDim && p.k2.dim == kRopeDim &&
           (p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16);
}

int latent_wgmma_smem_bytes() { return kSmemBytes; }

void prepare_latent_wgmma_kernel() {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
        check_cuda(cudaFuncSetAttribute(kernel_for(t), cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes),
                   "cudaFuncSetAttribute(latent_wgmma_kernel)");
}

void launch_latent_wgmma(gqla_dtype cache, const AttentionParams& p, dim3 grid, cudaStream_t stream) {
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(kernel_for(cache), grid, dim3(kLatentThreads), args, static_cast<size_t>(kSmemBytes),
                                stream),
               "launch latent_wgmma_kernel");
}

}  // namespace gqla::cuda

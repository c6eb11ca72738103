// SPDX-License-Identifier: Apache-2.0
// Prefill attention on Hopper warpgroup MMAs (see prefill_wgmma.hpp).
//
// One CTA = one sequence x one group x 128 query rows (heads x tokens, head
// fastest) x one split of the key tiles those rows may see. Two warpgroups,
// 64 rows each, share every K/V tile of 128 tokens:
//   S = Q K^T     m64n128k16 per 16 key columns, Q and K in shared memory
//   softmax       online, f32, log2 domain, on the accumulators: each
//                 thread holds two rows' 32 scores, a quad holds the row
//   O += P V      m64n128k16 per 16 tokens, P straight from the score
//                 accumulators (registers), V read MN-major (transposed)
// Tiles come by 16-byte cp.async through the page table into the 128B
// swizzle wgmma reads (any page size, slots past the end zero-filled), two
// stages: tile t + 1 loads while tile t is multiplied. Only the tiles that
// hold a position some row of the block may not see are masked (select,
// never arithmetic); tiles past the last row's limit are never loaded.
// Row blocks are scheduled latest-queries first: they see the most tiles.
// Non-finite values (see nonfinite.cuh): in the masked tiles, the value rows
// of positions the block's first row may not see are scrubbed in shared
// memory, and each row that may see a scrubbed position gets probability NaN
// for it, so a NaN/Inf reaches exactly the outputs that attend to it.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../attention_common.cuh"
#include "../cuda_status.hpp"
#include "../nonfinite.cuh"
#include "../prefill_wgmma.hpp"
#include "../tma_primitives.cuh"
#include "wgmma_primitives.cuh"

namespace gqla::cuda {

namespace {

constexpr int kThreads = 256;                                    // two warpgroups
constexpr int kValueDim = 128;
constexpr int kValueAtoms = kValueDim / 64;
constexpr int kAtomBytes = kPrefillTile * kSwizzleRowBytes;      // 64 columns x 128 rows (tokens or query rows)
static_assert(kPrefillRows == kPrefillTile, "Q atoms and K/V atoms share one size");
constexpr int kRowsPerLoadPass = kThreads / 8;                   // 8 threads x 16 bytes per 64-column atom row
constexpr int kLoadPasses = kPrefillTile / kRowsPerLoadPass;

// 128-wide keys defer each tile's P V to the next iteration, after that
// tile's S = Q K^T is issued, so the softmax of a tile runs on the CUDA cores
// while the tensor cores multiply the previous tile's values; that keeps
// three tiles in shared memory (192-wide keys do not fit three: they
// multiply in order, two stages).
template <int KA>
constexpr bool kDeferPV = KA == 2;
template <int KA>
constexpr int kStages = kDeferPV<KA> ? 3 : 2;

// Shared memory: Q, then per stage K and V, then the scrubbed-token mask.
// Every atom is 1024-byte aligned (the swizzle period), as wgmma requires.
template <int KA>
struct PrefillSmem {
    static constexpr int kQBytes = KA * kAtomBytes;
    static constexpr int kKBytes = KA * kAtomBytes;
    static constexpr int kVBytes = kValueAtoms * kAtomBytes;
    static constexpr int kStageBytes = kKBytes + kVBytes;
    static constexpr int kStagesOff = kQBytes;
    static constexpr int kBadOff = kStagesOff + kStages<KA> * kStageBytes;
    static constexpr int kBytes = kBadOff + 64 + 1024;  // + alignment slack of the dynamic base
};

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    return pack_pair(lo, hi, static_cast<T*>(nullptr));
}

// KA: 64-column atoms of a key row (2: 128 wide, 3: 192 wide).
template <typename T, int KA>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_kernel(const __grid_constant__ AttentionParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using L = PrefillSmem<KA>;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    unsigned char* sQ = smem;
    uint32_t* sBad = reinterpret_cast<uint32_t*>(smem + L::kBadOff);
    auto stage_k = [&](int st) { return smem + L::kStagesOff + st * L::kStageBytes; };
    auto stage_v = [&](int st) { return smem + L::kStagesOff + st * L::kStageBytes + L::kKBytes; };

    allow_dependent_launch();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = tid >> 7, warp_in_wg = warp & 3;

    // Work: heaviest row blocks (latest queries) first.
    const int groups = p.num_heads / p.heads_per_group;
    const int row_blocks = (p.rows + kPrefillRows - 1) / kPrefillRows;
    const int rb = row_blocks - 1 - static_cast<int>(blockIdx.x) / groups;
    const int g = static_cast<int>(blockIdx.x) % groups;
    const int bl = blockIdx.y, seq_slot = p.slots[bl];
    const int b = p.batch_offset + bl;
    const int split = blockIdx.z;
    const int length = __ldg(p.lengths + seq_slot);
    const int32_t* table = p.page_tables + static_cast<int64_t>(seq_slot) * p.table_stride;
    const int first_limit = length - p.q_len;  // query qi sees positions <= first_limit + qi
    const int row0 = rb * kPrefillRows;
    const int last_row = min(p.rows, row0 + kPrefillRows) - 1;
    const int block_min_limit = first_limit + row0 / p.heads_per_group;
    const int block_max_limit = min(first_limit + last_row / p.heads_per_group, length - 1);
    const int tiles = block_max_limit >= 0 ? block_max_limit / kPrefillTile + 1 : 0;
    const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
    const int tile_begin = min(tiles, split * per_split);
    const int tile_end = min(tiles, tile_begin + per_split);

    // This thread's two accumulator rows (of the CTA's 128) and their limits.
    const int r_lo = wg * 64 + warp_in_wg * 16 + (lane >> 2), r_hi = r_lo + 8;
    auto limit_of = [&](int r) {
        const int mg = row0 + r;
        return mg < p.rows ? first_limit + mg / p.heads_per_group : -1;  // padding rows see nothing
    };
    const int lim_lo = limit_of(r_lo), lim_hi = limit_of(r_hi);

    // Queries -> shared memory (any io dtype -> T), swizzled; padding rows zero.
    constexpr int kQPieces = kPrefillRows * KA * 8;
    for (int i = tid; i < kQPieces; i += kThreads) {
        const int m = i / (KA * 8), pc = i - m * (KA * 8);
        const int mg = row0 + m;
        float v[8];
        if (mg < p.rows) {
            const auto [qi, h] = query_head(p, g, mg);
            load_elems8(p.q, p.q_dtype, row_offset(p.qa, b, qi, h) + pc * 8, 8, v);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = 0.f;
        }
        *reinterpret_cast<uint4*>(sQ + (pc >> 3) * kAtomBytes + swizzled_offset(m, pc & 7)) = pack_eight<T>(v);
    }

    // K/V tile loads: 8 threads per 128-byte atom row, kLoadPasses rows each.
    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    const int dk1 = p.k1.dim;
    const int piece = tid & 7;
    auto issue_tile = [&](int tile, int st) {
        unsigned char* dK = stage_k(st);
        unsigned char* dV = stage_v(st);
#pragma unroll
        for (int pass = 0; pass < kLoadPasses; ++pass) {
            const int r = (tid >> 3) + pass * kRowsPerLoadPass;
            const int j = tile * kPrefillTile + r;
            const bool valid = j < length;
            const int64_t tb = valid ? token_base(table, j, p.page_size, p.page_shift) : 0;
            const int so = swizzled_offset(r, piece);
#pragma unroll
            for (int a = 0; a < KA; ++a) {
                const int c = a * 64 + piece * 8;
                const T* src = c < dk1 ? k1 + pool_offset(p.k1, tb, g) + c : k2 + pool_offset(p.k2, tb, g) + (c - dk1);
                cp_async_16(dK + a * kAtomBytes + so, valid ? src : k1, valid);
            }
#pragma unroll
            for (int a = 0; a < kValueAtoms; ++a) {
                const int c = a * 64 + piece * 8;
                cp_async_16(dV + a * kAtomBytes + so, valid ? vb + pool_offset(p.v, tb, g) + c : vb, valid);
            }
        }
    };

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;
    // Running maxima of the raw scores and this thread's partial sums.
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    const float scale = p.scale_log2;
    uint32_t pa[8][4];  // P of a tile as the A fragments of its 8 products of 16 tokens

    // O += P V over a stage's values (P in pa), issued and committed.
    auto issue_pv = [&](int st) {
        const uint64_t v_desc = smem_desc_sw128(stage_v(st), kAtomBytes, kSwizzleGroupBytes);
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
            wgmma_m64n128k16_rs_bt<T>(o, pa[kk], desc_advance(v_desc, kk * 16 * kSwizzleRowBytes), 1);
        wgmma_commit();
    };
    // Keeps P's registers untouched (live) until its product has completed.
    auto fence_p = [&] {
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
    };

    if (tile_begin < tile_end) issue_tile(tile_begin, 0);
    cp_async_commit();
    fence_proxy_async_smem();  // Q stores -> wgmma's proxy (published by the first barrier)

    const uint64_t q_desc = smem_desc_sw128(sQ + wg * 64 * kSwizzleRowBytes, 16, kSwizzleGroupBytes);
    // One tile; with_pv: the previous tile's deferred product goes behind its
    // S (a compile-time flag: no branch around the products, whose
    // accumulators must not pass through control flow or ptxas serializes
    // every wgmma of the kernel).
    auto step = [&](const int tile, auto with_pv) {
        constexpr bool pv_pending = decltype(with_pv)::value;
        const int st = (tile - tile_begin) % kStages<KA>;
        if constexpr (kDeferPV<KA>) {
            // Tile t landed; after the barrier every thread is done with
            // iteration t - 1, whose product read tile t - 2's values: its
            // stage takes tile t + 1.
            cp_async_wait<0>();
            fence_proxy_async_smem();  // this thread's copies -> wgmma's proxy
            __syncthreads();
            if (tile + 1 < tile_end) issue_tile(tile + 1, (tile + 1 - tile_begin) % kStages<KA>);
            cp_async_commit();
        } else {
            // The other stage was consumed in the previous iteration (closing barrier).
            if (tile + 1 < tile_end) issue_tile(tile + 1, st ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
            fence_proxy_async_smem();
            __syncthreads();
        }

        const int tile0 = tile * kPrefillTile;
        // Positions of the tile the block's first row may not see, loaded
        // (before the end): their value rows are scrubbed.
        const int hidden_begin = max(tile0, block_min_limit + 1), hidden_end = min(tile0 + kPrefillTile, length);
        const bool scrub = hidden_begin < hidden_end;
        if (scrub) {
            if (tid < kPrefillTile / 32) sBad[tid] = 0;
            __syncthreads();
            // Each warp scrubs a run of the hidden rows, 16-byte pieces in the
            // swizzled atoms (row r's piece q of an atom at q ^ (r % 8)).
            const int n = hidden_end - hidden_begin;
            const int per_warp = (n + kThreads / 32 - 1) / (kThreads / 32);
            const int first = hidden_begin - tile0 + warp * per_warp;
            const int rows_here = min(per_warp, hidden_end - tile0 - first);
            unsigned char* tV = stage_v(st);
            for (int i = lane; i < rows_here * kValueAtoms * 8; i += 32) {
                const int r = first + i / (kValueAtoms * 8), pc = i % (kValueAtoms * 8);
                uint4* at = reinterpret_cast<uint4*>(tV + (pc >> 3) * kAtomBytes + swizzled_offset(r, pc & 7));
                uint4 v = *at;
                if (scrub_pair<T>(v.x) | scrub_pair<T>(v.y) | scrub_pair<T>(v.z) | scrub_pair<T>(v.w)) {
                    *at = v;
                    atomicOr(sBad + (r >> 5), 1u << (r & 31));
                }
            }
            fence_proxy_async_smem();  // scrubbed rows -> wgmma's proxy
            __syncthreads();
        }

        // S = Q K^T over the key atoms; with deferral, then the previous
        // tile's O += P V behind it.
        float s[64];
        const uint64_t k_desc = smem_desc_sw128(stage_k(st), 16, kSwizzleGroupBytes);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KA * 4; ++ks) {
            const uint32_t off = (ks >> 2) * kAtomBytes + (ks & 3) * 32;
            wgmma_m64n128k16<T>(s, desc_advance(q_desc, off), desc_advance(k_desc, off), ks != 0);
        }
        wgmma_commit();
        if constexpr (pv_pending) {
            issue_pv((tile - 1 - tile_begin) % kStages<KA>);
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        fence_accumulators(s);

        // Mask only where some row of the block may not see (select, never
        // arithmetic: a NaN key cannot reach a row that may not see it).
        if (tile0 + kPrefillTile - 1 > block_min_limit) {
            const int cbase = tile0 + 2 * (lane & 3);
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (cbase + 8 * j + (e & 1) > ((e & 2) ? lim_hi : lim_lo)) s[4 * j + e] = -INFINITY;
        }

        // Online softmax of both rows on the raw scores (quad-wide maxima;
        // sums stay per thread): weights 2^(s * scale - m * scale) in one
        // FMA, with the max taken as 0 while a row has seen only masked
        // positions (-inf weighs 0, a NaN score stays NaN).
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            mx_lo = fmaxf(mx_lo, fmaxf(s[4 * j], s[4 * j + 1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
#pragma unroll
        for (int sh = 1; sh <= 2; sh <<= 1) {
            mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, sh));
            mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, sh));
        }
        const float new_lo = fmaxf(m_lo, mx_lo), new_hi = fmaxf(m_hi, mx_hi);
        const float alpha_lo = new_lo == -INFINITY ? 1.f : exp2_ftz((m_lo - new_lo) * scale);
        const float alpha_hi = new_hi == -INFINITY ? 1.f : exp2_ftz((m_hi - new_hi) * scale);
        m_lo = new_lo;
        m_hi = new_hi;
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
        l_lo = l_lo * alpha_lo + sum_lo;
        l_hi = l_hi * alpha_hi + sum_hi;
        // Scrubbed positions a row may see: probability NaN (after the sums,
        // as in the other kernels: the output carries the NaN).
        if (scrub) {
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = 8 * j + 2 * (lane & 3) + (e & 1);
                    const bool bad = (sBad[col >> 5] >> (col & 31)) & 1u;
                    if (bad && tile0 + col <= ((e & 2) ? lim_hi : lim_lo)) s[4 * j + e] = quiet_nan();
                }
        }

        // The previous tile's product is done: O and P may change.
        if constexpr (pv_pending) {
            wgmma_wait<0>();
            fence_accumulators(o);
            fence_p();
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            o[4 * j] *= alpha_lo;
            o[4 * j + 1] *= alpha_lo;
            o[4 * j + 2] *= alpha_hi;
            o[4 * j + 3] *= alpha_hi;
        }
        // P as register A fragments, 16 tokens per product.
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            pa[kk][0] = pack2<T>(s[8 * kk], s[8 * kk + 1]);
            pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
        }
        if constexpr (!kDeferPV<KA>) {
            fence_accumulators(o);
            wgmma_fence();
            issue_pv(st);
            wgmma_wait<0>();
            fence_accumulators(o);
            fence_p();
            __syncthreads();  // both warpgroups are done with this stage
        }
    };
    using Immediate = std::integral_constant<bool, false>;
    using Deferred = std::integral_constant<bool, kDeferPV<KA>>;
    if (tile_begin < tile_end) step(tile_begin, Immediate{});
    for (int tile = tile_begin + 1; tile < tile_end; ++tile) step(tile, Deferred{});
    if constexpr (kDeferPV<KA>) {
        if (tile_end > tile_begin) {  // the last tile's product
            fence_accumulators(o);
            wgmma_fence();
            issue_pv((tile_end - 1 - tile_begin) % kStages<KA>);
            wgmma_wait<0>();
            fence_accumulators(o);
            fence_p();
        }
    }
    cp_async_wait<0>();

    // Epilogue: row sums over the quad, normalized rows and lse.
#pragma unroll
    for (int sh = 1; sh <= 2; sh <<= 1) {
        l_lo += __shfl_xor_sync(0xffffffffu, l_lo, sh);
        l_hi += __shfl_xor_sync(0xffffffffu, l_hi, sh);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int mg = row0 + (half ? r_hi : r_lo);
        if (mg >= p.rows) continue;
        const float l = half ? l_hi : l_lo, m = half ? m_hi : m_lo;
        const auto [qi, h] = query_head(p, g, mg);
        const int c0 = 2 * (lane & 3);
        if (p.num_splits == 1) {
            const int64_t at = row_offset(p.oa, b, qi, h);
#pragma unroll
            for (int j = 0; j < 16; ++j)
                store_pair(p.o, p.o_dtype, at + 8 * j + c0, normalized(o[4 * j + 2 * half], l),
                           normalized(o[4 * j + 2 * half + 1], l));
        } else {
            float* at = p.part_o + partial_row(p, split, b, qi, h) * kValueDim;
#pragma unroll
            for (int j = 0; j < 16; ++j)
                *reinterpret_cast<float2*>(at + 8 * j + c0) =
                    make_float2(normalized(o[4 * j + 2 * half], l), normalized(o[4 * j + 2 * half + 1], l));
        }
        if ((lane & 3) == 0) write_row_lse(p, split, b, qi, h, m * scale, l);
    }
#endif
}

template <int KA>
const void* kernel_for(gqla_dtype cache) {
    return cache == GQLA_DTYPE_F16 ? reinterpret_cast<const void*>(&prefill_wgmma_kernel<__half, KA>)
                                   : reinterpret_cast<const void*>(&prefill_wgmma_kernel<__nv_bfloat16, KA>);
}

const void* kernel_for(gqla_dtype cache, int key_dim) {
    return key_dim == 192 ? kernel_for<3>(cache) : kernel_for<2>(cache);
}

}  // namespace

bool prefill_wgmma_available(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

bool prefill_wgmma_fits(const AttentionParams& p) {
    const int dk = p.k1.dim + p.k2.dim;
    return (p.cache_dtype == GQLA_DTYPE_BF16 || p.cache_dtype == GQLA_DTYPE_F16) && !p.v_aliases_k1 &&
           p.v.dim == kValueDim && (dk == 128 || dk == 192) && p.k1.dim % 8 == 0 && p.k2.dim % 8 == 0 &&
           p.heads_per_group > 0 && p.num_heads % p.heads_per_group == 0;
}

int prefill_wgmma_smem_bytes(int key_dim) {
    return key_dim == 192 ? PrefillSmem<3>::kBytes : PrefillSmem<2>::kBytes;
}

void prepare_prefill_wgmma_kernels() {
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16})
        for (int dk : {128, 192})
            check_cuda(cudaFuncSetAttribute(kernel_for(t, dk), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            prefill_wgmma_smem_bytes(dk)),
                       "cudaFuncSetAttribute(prefill_wgmma_kernel)");
}

void launch_prefill_wgmma(gqla_dtype cache, const AttentionParams& p, dim3 grid, cudaStream_t stream) {
    const int dk = p.k1.dim + p.k2.dim;
    void* args[] = {const_cast<AttentionParams*>(&p)};
    check_cuda(cudaLaunchKernel(kernel_for(cache, dk), grid, dim3(kThreads), args,
                                static_cast<size_t>(prefill_wgmma_smem_bytes(dk)), stream),
               "launch prefill_wgmma_kernel");
}

}  // namespace gqla::cuda

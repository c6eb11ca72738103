// SPDX-License-Identifier: Apache-2.0
// Split-KV flash decoding for groups of few query rows (GQA decode:
// n_rep * s_q), 8 per CTA, keys up to 256 and values up to 128 wide. Groups
// of more rows take one CTA per 8 rows; those CTAs read the same K/V, the
// later ones mostly from L2 (or one CTA holds 2-4 such row blocks sharing
// its K/V rings: below).
//
// Decode attention of a few rows per group is bound by how many instructions
// each byte of K/V costs, not by the tensor cores: with 16-row MMAs three
// quarters of every product would be padding. So the products are transposed
// to put the 8 query rows on the MMA's n = 8 side:
//   S^T (16 tok x 8 rows) = K (16 tok x 16 d, A from smem) . Q^T (B, registers)
//   O^T (16 dv x 8 rows) += V^T (A, ldmatrix.trans) . P^T (B)
// and P^T goes from the S^T accumulators to a B operand with two movmatrix
// transposes, in registers. Per 16 tokens x 128 dims: 8 + 8 MMAs, half of the
// 16-row formulation, and half the accumulator registers to rescale.
//
// Work split: each warp owns 16 of every 16 NW tokens and streams them
// through its own ring of R cp.async slots (no CTA barrier per tile); warps
// merge their (m, l, O) once at the end. NW is 4 (several CTAs per SM), or
// 16 in wide CTAs (one per SM, 128-wide keys and values, 3 slots): there
// the warps of an SM share a row block's tokens and merge them in shared
// memory, so a grid of about one row block per SM needs no combine pass.
// A slot holds half a chunk: the K rows or the V rows of 16 tokens, so a
// slot frees as soon as its product is done and the ring keeps R - 1 halves
// in flight for the price of R. Three slots keep a chunk in flight with a
// quarter less shared memory than two whole (K, V) stages, which lets 16
// warps share an SM instead of 12.
// When the page size is a multiple of 16, a warp's 16 tokens are 16
// consecutive rows of one page, so the copy is a single base address plus
// fixed offsets; otherwise each row is looked up.
// Groups of 9-32 rows (s_q > 1) can also run as one CTA of RB row blocks
// (RB x NW / RB warps): the warps of a token lane, one per row block, share
// one ring. Its first warp loads the halves; each warp counts itself done
// with a slot on the slot's empty barrier, which the loading warp waits on
// before it refills the slot. So each K/V byte leaves L2 once for all the
// group's rows rather than once per row block (GQA 32/8 at s_q = 8: 32 rows,
// four blocks whose separate CTAs moved four times the K/V through L2).
// On Hopper those 16 rows are also one TMA box per 64 columns: in the
// TmaBoxes layout lane 0 issues a half with 2-4 tensor loads that complete
// on the slot's mbarrier, instead of every lane issuing 16-byte cp.async
// copies and their address arithmetic (8 per lane for 128-wide rows). Halves
// with rows past the sequence's end still go through zero-filling cp.async,
// which arrive on the same barrier.
// In a chunk holding tokens some row of the warp may not see (the causal
// tail), the V rows are scrubbed before O^T += V^T P^T (see nonfinite.cuh):
// in the slot, or with shared rings in the warp's V^T fragments.
#pragma once

#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "cluster_merge.cuh"
#include "mma_primitives.cuh"
#include "nonfinite.cuh"
#include "row_copies.cuh"
#include "tma_primitives.cuh"

namespace gqla::cuda {

struct NarrowLayout {
    int k_stride, v_stride;  // elements between rows of a K / V slot
    int block;               // elements between 64-column groups (see SmemRows)
    int slot_elems, warp_bytes, o_off, f_off, bar_off, bytes;
    int merge_off;  // a cluster launch's merge region (kNarrowClusterMergeBytes more)
    int o_stride;   // floats between rows of a warp's (or the merged) O
    bool swizzle, boxes;
};

// Rows a multiple of 64 elements can be swizzled (see SmemRows) instead of
// padded by 8 elements (either way ldmatrix rows hit distinct banks). The
// swizzle saves shared memory (GQLA's 192-wide keys fit 3 CTAs per SM instead
// of 2) but costs registers (the swizzled offsets stay live), so the planner
// takes whichever layout fits more CTAs.
__host__ __device__ inline bool narrow_can_swizzle(int dk, int dv) { return dk % 64 == 0 && dv % 64 == 0; }

// TmaBoxes also needs the first key part's width a multiple of 64 (its
// boxes and the second part's must not share a column group).
// row_blocks: row blocks per CTA, whose warps share warps / row_blocks rings.
__host__ __device__ inline NarrowLayout narrow_layout(int dk, int dv, int slots, NarrowRows rows, int warps,
                                                      int row_blocks = 1) {
    NarrowLayout L{};
    const int rings = warps / row_blocks;
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    L.swizzle = rows != NarrowRows::Padded && narrow_can_swizzle(dk, dv);
    L.boxes = rows == NarrowRows::TmaBoxes && L.swizzle;
    L.k_stride = L.boxes ? 64 : L.swizzle ? dk : dk16 + 8;
    L.v_stride = L.boxes ? 64 : L.swizzle ? dv : dv16 + 8;
    L.block = L.boxes ? 16 * 64 : 64;
    // A slot serves as K rows or V rows in turn (odd R), so it fits either
    // (boxes: 16 rows x 64 columns each, as many as the wider of the two).
    const int k_row = L.boxes ? dk : L.k_stride, v_row = L.boxes ? dv : L.v_stride;
    L.slot_elems = 16 * (k_row > v_row ? k_row : v_row);
    L.warp_bytes = slots * L.slot_elems * 2;
    // Each warp's rescaled O, then the merged O, reuse the slots once every
    // warp is done with them. Rows 4 floats longer than dv16: the fragment
    // stores of a warp (rows 2fc, 2fc + 1; columns fr + 16i) hit distinct banks.
    L.o_off = 0;
    L.o_stride = dv16 + 4;
    const int kv_bytes = rings * L.warp_bytes, o_bytes = (warps + 1) * kNarrowRows * L.o_stride * 4;
    L.f_off = (kv_bytes > o_bytes ? kv_bytes : o_bytes);
    // Row maxima and sums per warp and per row, then each row's output offset (int64).
    const int cta_rows = kNarrowRows * row_blocks;
    L.bar_off = L.f_off + (2 * warps * kNarrowRows + 2 * cta_rows) * 4 + cta_rows * 8;  // a multiple of 8
    L.bytes = L.bar_off;
    // Boxes: one mbarrier per slot (shared rings: and one the slot's readers
    // count down), and slack to align the base to the 1024-byte period of
    // the 128B swizzle (slots are multiples of 2 KiB).
    const int bar_bytes = L.boxes ? rings * slots * 8 * (row_blocks > 1 ? 2 : 1) : 0;
    if (L.boxes) L.bytes += bar_bytes + 1024;
    // Past the barriers, within the slack kNarrowClusterMergeBytes adds.
    L.merge_off = (L.bar_off + bar_bytes + 15) / 16 * 16;
    return L;
}

// TMA boxes: registers for 4 CTAs (16 warps) per SM with 3 slots, which is
// what 128-wide rows fit in shared memory; deeper rings fit 3 at most. The
// copy layouts state no minimum (0): an explicit 1 let ptxas spend more
// registers (the swizzled 3-slot ring 164 -> 180, 3 -> 2 CTAs per SM).
// 16-warp CTAs (one per SM) get the same 128 registers per thread.
// DK, DV: key and value widths known at compile time (NarrowDims): the step
// loops lose their guards, the layout's offsets become immediates and the
// unused query fragments their registers. 0: widths read from the launch.
// NW: warps per CTA (kNarrowWarps, or kNarrowWideWarps for wide CTAs).
// RB: row blocks per CTA, whose warps share NW / RB rings (TMA boxes only).
template <typename T, int R, NarrowRows ROWS, int DK = 0, int DV = 0, int NW = kNarrowWarps, int RB = 1>
__global__ void __launch_bounds__(NW * 32, NW != kNarrowWarps             ? 1
                                           : ROWS == NarrowRows::TmaBoxes ? (R == 3 ? 4 : 3)
                                                                          : 0)
    attention_narrow_kernel(const __grid_constant__ AttentionParams p, const __grid_constant__ NarrowTmaMaps maps) {
    // TW token lanes (a ring each), each read by RB warps (one per row block).
    constexpr int TW = NW / RB;
    constexpr int NT = NW * 32, TILE = 16 * TW, MAX_KS = kNarrowMaxDk / 16, MAX_VT = kNarrowMaxDv / 16;
    constexpr bool SWZ = ROWS != NarrowRows::Padded, TMA = ROWS == NarrowRows::TmaBoxes;
    static_assert(RB == 1 || (TMA && RB <= TW && NW % RB == 0),
                  "shared rings: TMA boxes, and a ring per row block to stage its query rows in");
    constexpr int BLOCK = TMA ? 16 * 64 : 64;  // NarrowLayout::block
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = TMA ? smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023) : smem_raw;
    const int dk1 = p.k1.dim, dk2 = p.k2.dim, dk = DK ? DK : dk1 + dk2, dv = DV ? DV : p.v.dim;
    const int dk16 = (dk + 15) / 16 * 16, dv16 = (dv + 15) / 16 * 16;
    const int k_steps = dk16 / 16, v_tiles = dv16 / 16;
    const NarrowLayout L = narrow_layout(dk, dv, R, ROWS, NW, RB);
    float* sWarpO = reinterpret_cast<float*>(smem + L.o_off);  // [NW][kNarrowRows][o_stride]
    float* sO = sWarpO + NW * kNarrowRows * L.o_stride;        // merged, for the cluster merge
    float* sWarpM = reinterpret_cast<float*>(smem + L.f_off);
    float* sWarpL = sWarpM + NW * kNarrowRows;
    constexpr int CTA_ROWS = kNarrowRows * RB;
    float* sRowL = sWarpL + NW * kNarrowRows;
    float* sRowM = sRowL + CTA_ROWS;
    int64_t* sRowOut = reinterpret_cast<int64_t*>(sRowM + CTA_ROWS);  // 8-byte aligned: f_off + 64 (NW + RB)

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int fr = lane >> 2, fc = lane & 3;  // fragment row / column pair of this lane
    // Token lane and row block of this warp; the row block 0 warp of a lane loads its ring.
    // (Constants for one row block: its kernels keep the code they had before shared rings.)
    const int tw = RB == 1 ? warp : warp % TW, rbw = RB == 1 ? 0 : warp / TW;
    const bool loads = RB == 1 || rbw == 0;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L.bar_off) + tw * R;  // TMA: slot i completes on bars[i]
    // Shared rings: slot i is free again once empties[i] counts RB readers done.
    uint64_t* empties = reinterpret_cast<uint64_t*>(smem + L.bar_off) + TW * R + tw * R;
    if constexpr (TMA) {  // each ring's slot barriers, before its first copy
        if (loads && lane == 0) {
            for (int i = 0; i < R; ++i) mbarrier_init(bars + i, 1);
            if constexpr (RB > 1)
                for (int i = 0; i < R; ++i) mbarrier_init(empties + i, RB);
            mbarrier_init_fence();
        }
        __syncwarp();
    }
    // grid.x = groups x CTA row blocks: this warp's rows are the group's rows
    // [row0, row0 + rows_here), kNarrowRows of them but in the group's last
    // block (none past it); the CTA's are [cta_row0, cta_row0 + cta_rows).
    const CtaWork w = cta_work(p, CTA_ROWS, TILE);
    const int grp = w.g, b = w.b, split = w.split, length = w.length;
    const int cta_row0 = w.rb * CTA_ROWS, cta_rows = min(CTA_ROWS, p.rows - cta_row0);
    const int row0 = cta_row0 + rbw * kNarrowRows, rows_here = max(0, min(kNarrowRows, p.rows - row0));
    auto row_qh = [&](int r) { return query_head(p, grp, row0 + r); };          // warp row -> (query token, head)
    auto cta_row_qh = [&](int r) { return query_head(p, grp, cta_row0 + r); };  // CTA row -> (query token, head)
    const int32_t* table = w.table;
    const SplitRange range = w.range;

    // Sparse launches gather single rows (the host never gives them TMA maps).
    const bool aligned_pages = TMA || ((p.page_size & 15) == 0 && !w.list);  // the host maps only such pages
    const int chunks = range.end - range.begin;
    // This warp's chunk c covers tokens (range.begin + c) * TILE + tw * 16 + [0, 16).
    auto chunk_first = [&](int c) { return (range.begin + c) * TILE + tw * 16; };
    // Aligned pages: the page id of the chunk (all lanes); otherwise lane r < 16
    // fetches the (page << 32 | slot) of row r. -1: nothing to read (or a
    // warp that does not load its ring).
    auto fetch = [&](int c) -> int64_t {
        const int j0 = chunk_first(c);
        if (c >= chunks || j0 >= length || !loads) return -1;
        if (aligned_pages) return __ldg(table + (p.page_shift >= 0 ? j0 >> p.page_shift : j0 / p.page_size));
        const int j = j0 + (lane & 15);
        return (lane < 16 && j < length) ? cta_token(p, w, j) : -1;
    };
    // The page ids of the first chunks: the first halves' copies wait for them.
    const int64_t first_ids[4] = {fetch(0), fetch(1), fetch(2), fetch(3)};

    // Warp-private ring. With padded dims a slot's pad columns are read as K
    // (times zero queries) or V (into output columns never written), after
    // the slot held the other role. Key pads must be finite (0 x NaN would
    // be a NaN score), but a former V half leaves its values there, which
    // may be anything: each K half zero-fills its pad piece. Value pads only
    // reach output columns never written. The ring starts zeroed.
    // With TMA boxes its first R - 1 halves are issued as soon as their page
    // ids arrive, before the query rows are staged: the prologue's two
    // memory latencies (page ids, then K/V) no longer wait for the query
    // rows and two CTA barriers. The last slot of warp 0 holds the staged
    // query rows meanwhile, so every warp issues its half R - 1 after them.
    T* wbase = reinterpret_cast<T*>(smem + tw * L.warp_bytes);
    auto slot_of = [&](int half) { return wbase + (half % R) * L.slot_elems; };

    const T* k1 = static_cast<const T*>(p.k1.base);
    const T* k2 = static_cast<const T*>(p.k2.base);
    const T* vb = static_cast<const T*>(p.v.base);
    auto log2_pieces = [](int dim) {
        const int n = dim >> 3;
        return (n & (n - 1)) == 0 ? __ffs(n) - 1 : -1;
    };
    const int shift1 = log2_pieces(dk1), shift2 = dk2 ? log2_pieces(dk2) : 0, shiftv = log2_pieces(dv);
    const SmemRows k_rows{L.k_stride, SWZ, BLOCK}, v_rows{L.v_stride, SWZ, BLOCK};
    // Half-chunk `half` = chunk half / 2: its K rows (even) or V rows (odd).
    auto issue_half = [&](int half, int64_t f) {
        const int c = half >> 1;
        const bool is_v = half & 1;
        T* dst = slot_of(half);
        uint64_t* bar = bars + half % R;  // TMA layout only
        if (aligned_pages) {
            const int j0 = chunk_first(c);
            const int valid_rows = f < 0 ? 0 : min(16, length - j0);
            const int slot = p.page_shift >= 0 ? j0 & (p.page_size - 1) : j0 % p.page_size;
            if constexpr (TMA) {
                if (valid_rows == 16) {
                    if (lane == 0) {
                        // Boxes of 64 columns x 16 rows; box x of a part lands at column x of the slot.
                        auto load_part = [&](const CUtensorMap& map, PoolRows rows, int dim, int col0) {
                            const int y = static_cast<int>(f) * rows.page_rows + grp * rows.group_rows + slot;
                            for (int x = 0; x < dim; x += 64) tma_load_2d(dst + (col0 + x) * 16, &map, x, y, bar);
                        };
                        mbarrier_arrive_expect_tx(bar, 16 * (is_v ? dv : dk) * 2);
                        if (is_v) {
                            load_part(maps.v, maps.v_rows, dv, 0);
                        } else {
                            load_part(maps.k1, maps.k1_rows, dk1, 0);
                            load_part(maps.k2, maps.k2_rows, dk2, dk1);
                        }
                    }
                    return;
                }
                // Rows past the end: zero-filling copies below, then every
                // lane's copies and lane 0's arrival complete the phase.
            }
            const int64_t tb = (f < 0 ? 0 : (f << 32)) | static_cast<uint32_t>(slot);
            if (is_v) {
                copy_contiguous_rows16(dst, v_rows, 0, vb + pool_offset(p.v, tb, grp), p.v.row_stride, dv, shiftv,
                                       valid_rows, lane);
            } else {
                copy_contiguous_rows16(dst, k_rows, 0, k1 + pool_offset(p.k1, tb, grp), p.k1.row_stride, dk1, shift1,
                                       valid_rows, lane);
                if (dk2)
                    copy_contiguous_rows16(dst, k_rows, dk1, k2 + pool_offset(p.k2, tb, grp), p.k2.row_stride, dk2,
                                           shift2, valid_rows, lane);
                if (dk16 != dk)
                    copy_contiguous_rows16(dst, k_rows, dk, k1, 0, 8, 0, 0, lane);  // zero key pad (see the ring)
            }
            if constexpr (TMA) {
                cp_async_mbarrier_arrive(bar);
                __syncwarp();
                if (lane == 0) mbarrier_arrive(bar);
            }
        } else {
            const bool valid = f >= 0;
            if (is_v) {
                copy_scattered_rows16(dst, v_rows, 0, valid ? vb + pool_offset(p.v, f, grp) : nullptr, dv, vb, lane);
            } else {
                copy_scattered_rows16(dst, k_rows, 0, valid ? k1 + pool_offset(p.k1, f, grp) : nullptr, dk1, k1, lane);
                if (dk2)
                    copy_scattered_rows16(dst, k_rows, dk1, valid ? k2 + pool_offset(p.k2, f, grp) : nullptr, dk2, k2,
                                          lane);
                if (dk16 != dk)  // zero key pad (see the ring)
                    copy_scattered_rows16(dst, k_rows, dk, static_cast<const T*>(nullptr), 8, k1, lane);
            }
        }
    };

    // Halves 0..R-1 in flight before the loop: with TMA boxes the first
    // R - 1 now, the others after the query rows. Chunk c's K is half 2c, its
    // V half 2c + 1; when a half's product is done its slot takes half + R.
    // (The cp.async layouts issue all of them after the query rows: their
    // copy addressing, live across the staging, would cost registers and,
    // without launch bounds, CTAs per SM.)
    constexpr int EARLY = TMA ? R - 1 : 0;
    auto issue_first = [&](int first, int end) {
        if (!loads) return;
        if (dk16 != dk || dv16 != dv) {
            uint4* z = reinterpret_cast<uint4*>(slot_of(first));
            for (int i = lane; i < (end - first) * L.slot_elems / 8; i += 32) z[i] = make_uint4(0, 0, 0, 0);
        }
        __syncwarp();  // zeros before any copy into the same bytes
#pragma unroll
        for (int h = first; h < end; ++h) {
            if ((h >> 1) < chunks) issue_half(h, first_ids[h >> 1]);
            cp_async_commit();
        }
    };
    issue_first(0, EARLY);
    unsigned char* merge_region = smem + L.merge_off;
    if (p.cluster_merge) cluster_merge_begin(merge_region, cta_rows, dv);

    // Q^T as B fragments: b0 = Q[row fr][16ks + 2fc, +1], b1 = the same +8.
    // The group's rows are staged through shared memory (row block k's in
    // ring k's last slot, free until its half R - 1) with whole-piece vector
    // loads, so the prologue waits for one memory latency rather than for
    // each lane's elements. (A slot holds 16 rows of at least dk16 + 8
    // elements; a row block is 8 such rows.)
    uint32_t qb[MAX_KS][2];
    {
        auto staged_rows = [&](int block) {
            return reinterpret_cast<T*>(smem + block * L.warp_bytes) + (R - 1) * L.slot_elems;
        };
        const int q_stride = dk16 + 8, pieces = dk16 / 8;
        for (int i = tid; i < CTA_ROWS * pieces; i += NT) {
            const int r = i / pieces, c = (i - r * pieces) * 8;
            float v[8];
            int64_t qoff = 0;
            int n = 0;
            if (r < cta_rows) {
                const QueryHead qh = cta_row_qh(r);
                qoff = row_offset(p.qa, b, qh.qi, qh.h) + c;
                n = min(8, dk - c);
            }
            load_elems8(p.q, p.q_dtype, qoff, n, v);
            *reinterpret_cast<uint4*>(staged_rows(r / kNarrowRows) + (r % kNarrowRows) * q_stride + c) =
                pack_eight<T>(v);
        }
        // Where each row's output goes (o, or this split's partial row): once
        // per row rather than per element, and here, where registers are free.
        if (tid < cta_rows) {
            const QueryHead qh = cta_row_qh(tid);
            sRowOut[tid] = p.num_splits == 1 || p.cluster_merge ? row_offset(p.oa, b, qh.qi, qh.h)
                                                                : partial_row(p, split, b, qh.qi, qh.h) * p.v.dim;
        }
        __syncthreads();
        const T* qrow = staged_rows(rbw) + fr * q_stride + 2 * fc;
#pragma unroll
        for (int ks = 0; ks < MAX_KS; ++ks) {
            qb[ks][0] = ks < k_steps ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16) : 0u;
            qb[ks][1] = ks < k_steps ? *reinterpret_cast<const uint32_t*>(qrow + ks * 16 + 8) : 0u;
        }
        if constexpr (TMA) fence_proxy_async_smem();  // these reads of sQ before TMA writes into the same bytes
        __syncthreads();                              // the rings' last slots take their halves next
    }
    issue_first(EARLY, R);
    // Causal limit of this lane's two query rows (columns 2fc, 2fc+1 of S^T).
    int limit[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int row = 2 * fc + e;
        limit[e] = row < rows_here ? length - p.q_len + row_qh(row).qi : length - 1;
    }
    // First token some row of this warp may not see (its first row has the
    // earliest limit; rows past the group's end see everything).
    const int first_hidden = rows_here > 0 ? length - p.q_len + row_qh(0).qi + 1 : length;

    float acc[MAX_VT][4];
#pragma unroll
    for (int i = 0; i < MAX_VT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float run_m[2] = {-INFINITY, -INFINITY}, run_l[2] = {0.f, 0.f};  // l: this lane's partial sum

    // Page ids of chunks c+1..c+3 are held in registers so their table loads
    // (which can queue behind the K/V traffic) have an iteration to land.
    int64_t ids[3] = {first_ids[1], first_ids[2], first_ids[3]};  // ids[i]: chunk c + 1 + i
    // Waits until half `half` has landed in its slot (cp.async: every group
    // but the R - 1 newest, which are the halves after it).
    auto wait_half = [&](int half) {
        if constexpr (TMA) {
            mbarrier_wait(bars + half % R, (half / R) & 1);
        } else {
            cp_async_wait<R - 1>();
            __syncwarp();
        }
    };
    // This warp is done reading half `done`'s slot: the slot takes half
    // done + R where `more`. With shared rings the warp counts itself out on
    // the slot's empty barrier and the loading warp waits for every reader.
    auto refill = [&](int done, bool more, int64_t id) {
        __syncwarp();
        if constexpr (RB > 1) {
            if (lane == 0) mbarrier_arrive(empties + done % R);
            if (loads && more) mbarrier_wait(empties + done % R, (done / R) & 1);
        }
        if (loads && more) issue_half(done + R, id);
        cp_async_commit();
    };
    for (int c = 0; c < chunks; ++c) {
        wait_half(2 * c);  // this chunk's K
        const T* tK = slot_of(2 * c);
        const T* tV = slot_of(2 * c + 1);

        // S^T = K Q^T: A = K rows (16 tokens) from smem, B = Q^T registers.
        // Even and odd k-steps in two accumulators: half the dependent chain.
        float s[4] = {0.f, 0.f, 0.f, 0.f}, s_odd[4] = {0.f, 0.f, 0.f, 0.f};
        // Lane l reads row l % 16, piece 2 ks + l / 16 (swizzled: ^ row % 8,
        // which only permutes the pieces within each group of 8, i.e. 4 ks):
        // 4 row pointers, the group as an immediate offset.
        const T* krow[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            krow[j] = tK + (lane & 15) * L.k_stride + (((2 * j + (lane >> 4)) ^ (SWZ ? lane & 7 : 0)) << 3);
#pragma unroll
        for (int ks = 0; ks < MAX_KS; ++ks) {
            if (ks < k_steps) {
                uint32_t a[4];
                ldmatrix_x4(a, krow[ks & 3] + (ks >> 2) * BLOCK);
                mma_16816<T>(ks % 2 ? s_odd : s, a, qb[ks][0], qb[ks][1]);
            }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) s[e] += s_odd[e];
        // s[e]: token fr (+8 for e >= 2), query row 2fc + (e & 1).
        const int tok0 = chunk_first(c);
        float alpha[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int j_lo = tok0 + fr, j_hi = j_lo + 8;
            float lo = (j_lo <= limit[e]) ? s[e] * p.scale_log2 : -INFINITY;
            float hi = (j_hi <= limit[e]) ? s[e + 2] * p.scale_log2 : -INFINITY;
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
        // K slot done: it takes half 2c + R (chunk c + R/2). Then wait for V.
        refill(2 * c, c + R / 2 < chunks, ids[R / 2 - 1]);
        wait_half(2 * c + 1);  // and its V

        // A = V^T tiles by ldmatrix.trans of V rows.
        // Lane l reads row l % 8 + 8 (l / 16), piece 2i + (l / 8) % 2 (the
        // same swizzle as K), and holds V^T rows (value columns) fr, fr + 8
        // of tokens 2fc, 2fc + 1 (a[0], a[1]) and 2fc + 8, 2fc + 9 (a[2], a[3]).
        const T* vrow[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            vrow[j] = tV + ((lane & 7) + ((lane >> 4) << 3)) * L.v_stride +
                      (((2 * j + ((lane >> 3) & 1)) ^ (SWZ ? lane & 7 : 0)) << 3);
        // Tokens some row may not see, loaded (before the end): which have a
        // non-finite value, and a NaN probability for each such token a row
        // may see. A warp-private ring's slot is scrubbed in place (the
        // product below stays as it is); shared rings' slots are read by the
        // other row blocks' warps too, whose rows may see those values, so
        // there each warp scrubs its own V^T fragments in the product.
        const bool tail = tok0 + 16 > first_hidden && first_hidden < length;
        if (tail) {
            uint32_t bad = 0;
            if constexpr (RB == 1) {
                bad = scrub_rows(const_cast<T*>(tV), v_rows, 16, dv, lane);
                if constexpr (TMA) fence_proxy_async_smem();  // these writes before TMA refills the slot
                __syncwarp();
            } else {
#pragma unroll
                for (int i = 0; i < MAX_VT; ++i) {
                    if (i < v_tiles) {
                        uint32_t a[4];
                        ldmatrix_x4_trans(a, vrow[i & 3] + (i >> 2) * BLOCK);
                        // (Value columns only: pad rows of V^T may hold a former K half.)
                        const bool lo_col = i * 16 + fr < dv, hi_col = i * 16 + fr + 8 < dv;
                        const uint32_t first =
                            (lo_col ? scrub_pair<T>(a[0]) : 0u) | (hi_col ? scrub_pair<T>(a[1]) : 0u);
                        const uint32_t second =
                            (lo_col ? scrub_pair<T>(a[2]) : 0u) | (hi_col ? scrub_pair<T>(a[3]) : 0u);
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
        // O^T = alpha O^T + V^T P^T, P^T (tokens x rows) going to a B operand
        // (k = tokens, n = rows) by transposing its two 8x8 halves in registers.
        const uint32_t pb0 = movmatrix_trans(pack_pair(s[0], s[1], static_cast<T*>(nullptr)));
        const uint32_t pb1 = movmatrix_trans(pack_pair(s[2], s[3], static_cast<T*>(nullptr)));
#pragma unroll
        for (int i = 0; i < MAX_VT; ++i) {
            if (i < v_tiles) {
                acc[i][0] *= alpha[0];
                acc[i][1] *= alpha[1];
                acc[i][2] *= alpha[0];
                acc[i][3] *= alpha[1];
                uint32_t a[4];
                ldmatrix_x4_trans(a, vrow[i & 3] + (i >> 2) * BLOCK);
                if constexpr (RB > 1) {
                    if (tail) {
#pragma unroll
                        for (int k = 0; k < 4; ++k) scrub_pair<T>(a[k]);
                    }
                }
                mma_16816<T>(acc[i], a, pb0, pb1);
            }
        }
        // V slot done: it takes half 2c + 1 + R (chunk c + (R+1)/2).
        refill(2 * c + 1, c + (R + 1) / 2 < chunks, ids[(R + 1) / 2 - 1]);
        ids[0] = ids[1];
        ids[1] = ids[2];
        ids[2] = fetch(c + 4);
    }
    cp_async_wait<0>();

    // Merge the warps of each row block (its TW token lanes): per query row,
    // max over warps; each warp stores its rescaled O^T in its own rows
    // (which reuse the K/V slots), then every thread sums a column over the
    // warps: two CTA barriers in all. CTA row rbw * kNarrowRows + r is row r
    // of the warps rbw * TW .. rbw * TW + TW - 1.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 4);
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 8);
        run_l[e] += __shfl_xor_sync(0xffffffffu, run_l[e], 16);
        if (fr == 0) {
            sWarpM[warp * kNarrowRows + 2 * fc + e] = run_m[e];
            sWarpL[warp * kNarrowRows + 2 * fc + e] = run_l[e];
        }
    }
    __syncthreads();
    const int w0 = rbw * TW;  // first warp of this row block
    float scale[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int r = 2 * fc + e;
        float M = -INFINITY;
        for (int w = w0; w < w0 + TW; ++w) M = fmaxf(M, sWarpM[w * kNarrowRows + r]);
        scale[e] = (run_m[e] == -INFINITY) ? 0.f : exp2_ftz(run_m[e] - M);
        if (tw == 0 && fr == 0) {
            float tot = 0.f;
            for (int w = w0; w < w0 + TW; ++w)
                tot += rescaled_sum(sWarpM[w * kNarrowRows + r], sWarpL[w * kNarrowRows + r], M);
            sRowL[rbw * kNarrowRows + r] = tot;
            sRowM[rbw * kNarrowRows + r] = M;
        }
    }
    {
        float* own = sWarpO + warp * kNarrowRows * L.o_stride;
#pragma unroll
        for (int i = 0; i < MAX_VT; ++i) {
            if (i >= v_tiles) continue;
            const int col = i * 16 + fr;
            own[(2 * fc) * L.o_stride + col] = acc[i][0] * scale[0];
            own[(2 * fc + 1) * L.o_stride + col] = acc[i][1] * scale[1];
            own[(2 * fc) * L.o_stride + col + 8] = acc[i][2] * scale[0];
            own[(2 * fc + 1) * L.o_stride + col + 8] = acc[i][3] * scale[1];
        }
    }
    __syncthreads();
    // Column sums over a row block's warps, in warp order (m: CTA row).
    auto merged = [&](int m, int col) {
        const int first = RB == 1 ? 0 : (m / kNarrowRows) * TW, r = RB == 1 ? m : m % kNarrowRows;
        float v = 0.f;
        for (int w = first; w < first + TW; ++w) v += sWarpO[(w * kNarrowRows + r) * L.o_stride + col];
        return v;
    };
    // Rows x columns spread over all threads (wide CTAs have more threads
    // than a row has columns).
    if (p.cluster_merge) {  // the splits of this row block are the CTAs of one cluster (RB == 1)
        for (int e = tid; e < cta_rows * dv; e += NT) {
            const int m = e / dv, col = e - m * dv;
            sO[m * L.o_stride + col] = merged(m, col);
        }
        __syncthreads();
        merge_splits_in_cluster(p, merge_region, cta_rows, dv, L.o_stride, sO, sRowM, sRowL, sRowOut, [&](int r) {
            const QueryHead qh = cta_row_qh(r);
            return lse_index(p, b, qh.qi, qh.h);
        });
        return;
    }
    for (int e = tid; e < cta_rows * dv; e += NT) {
        const int m = e / dv, col = e - m * dv;
        const float l = sRowL[m];
        const int64_t out = sRowOut[m] + col;
        const float v = normalized(merged(m, col), l);
        if (p.num_splits == 1)
            store_elem(p.o, p.o_dtype, out, v);
        else
            p.part_o[out] = v;
    }
    if (tid < cta_rows) {
        const QueryHead qh = cta_row_qh(tid);
        write_row_lse(p, split, b, qh.qi, qh.h, sRowM[tid], sRowL[tid]);
    }
}

}  // namespace gqla::cuda

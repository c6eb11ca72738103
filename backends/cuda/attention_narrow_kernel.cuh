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

#include "attention_narrow_layout.cuh"
#include "attention_narrow_phases.cuh"

namespace gqla::cuda {

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
    using S = narrow::Shape<T, R, ROWS, DK, DV, NW, RB>;
    static_assert(RB == 1 || (S::TMA && RB <= S::TW && NW % RB == 0),
                  "shared rings: TMA boxes, and a ring per row block to stage its query rows in");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char* smem = S::TMA ? smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023) : smem_raw;
    const narrow::Widths d = narrow::widths<S>(p);
    const NarrowLayout L = narrow_layout(d.dk, d.dv, R, ROWS, NW, RB);
    const narrow::MergeSmem sm = narrow::merge_smem<S>(smem, L);
    // This thread's place; the token lane and row block of its warp are
    // constants for one row block (its kernels keep the code they had before
    // shared rings). Derived in the kernel body, where the compiler sees
    // them come from threadIdx (from a function's result its address
    // arithmetic, and so its registers, come out differently).
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tw = RB == 1 ? warp : warp % S::TW, rbw = RB == 1 ? 0 : warp / S::TW;
    const narrow::Lane ln{tid, lane, warp, lane >> 2, lane & 3, tw, rbw, RB == 1 || rbw == 0};
    narrow::init_ring_barriers<S>(smem, L, ln);
    const CtaWork w = cta_work(p, S::CTA_ROWS, S::TILE);
    const narrow::QueryRows q = narrow::query_rows<S>(p, w, ln.rbw);

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
    const narrow::Chunks ch = narrow::chunks_of<S>(p, w, ln);
    // The page ids of the first chunks: the first halves' copies wait for them.
    const int64_t first_ids[4] = {narrow::page_of<S>(p, w, ch, 0), narrow::page_of<S>(p, w, ch, 1),
                                  narrow::page_of<S>(p, w, ch, 2), narrow::page_of<S>(p, w, ch, 3)};
    T* wbase = reinterpret_cast<T*>(smem + ln.tw * L.warp_bytes);
    const narrow::Ring<T> rg = narrow::ring_of<S>(p, wbase, smem, L, d, q.grp, ln.tw);

    // Halves 0..R-1 in flight before the loop: with TMA boxes the first
    // R - 1 now, the others after the query rows. Chunk c's K is half 2c, its
    // V half 2c + 1; when a half's product is done its slot takes half + R.
    // (The cp.async layouts issue all of them after the query rows: their
    // copy addressing, live across the staging, would cost registers and,
    // without launch bounds, CTAs per SM.)
    constexpr int EARLY = S::TMA ? R - 1 : 0;
    narrow::issue_first<S>(p, maps, ch, rg, d, first_ids, 0, EARLY);
    if (p.cluster_merge) cluster_merge_begin(sm.cluster, q.cta_rows, d.dv);

    // The group's rows are staged through shared memory (row block k's in
    // ring k's last slot, free until its half R - 1), so the prologue waits
    // for one memory latency rather than for each lane's elements. (A slot
    // holds 16 rows of at least dk16 + 8 elements; a row block is 8 such
    // rows.) The rows' output offsets are stored here too, once per row
    // rather than per element, where registers are free.
    uint32_t qb[S::MAX_KS][2];
    narrow::stage_queries<S>(p, smem, L, d, q, ln.tid);
    narrow::store_row_outputs(p, q, sm.row_out, ln);
    narrow::load_query_fragments<S>(qb, smem, L, d, ln);
    narrow::issue_first<S>(p, maps, ch, rg, d, first_ids, EARLY, R);
    int limit[2];
    narrow::row_limits(limit, p, q, ch.length, ln.fc);
    const int first_hidden = narrow::first_hidden_token(p, q, ch.length);

    float acc[S::MAX_VT][4];
#pragma unroll
    for (int i = 0; i < S::MAX_VT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float run_m[2] = {-INFINITY, -INFINITY}, run_l[2] = {0.f, 0.f};  // l: this lane's partial sum

    // Page ids of chunks c+1..c+3 are held in registers so their table loads
    // (which can queue behind the K/V traffic) have an iteration to land.
    int64_t ids[3] = {first_ids[1], first_ids[2], first_ids[3]};  // ids[i]: chunk c + 1 + i
    for (int c = 0; c < ch.count; ++c) {
        narrow::wait_half<S>(rg, 2 * c);  // this chunk's K
        const T* tK = narrow::slot_of<S>(rg, 2 * c);
        const T* tV = narrow::slot_of<S>(rg, 2 * c + 1);
        float s[4];
        narrow::chunk_scores<S>(s, tK, qb, d, L.k_stride, ln.lane);
        const int tok0 = narrow::chunk_first<S>(ch, c);
        float alpha[2];
        narrow::online_softmax(s, alpha, run_m, run_l, limit, tok0, ln.fr, p.scale_log2);
        // K slot done: it takes half 2c + R (chunk c + R/2). Then wait for V.
        narrow::release_half<S>(p, maps, ch, rg, d, 2 * c, c + R / 2 < ch.count, ids[R / 2 - 1]);
        narrow::wait_half<S>(rg, 2 * c + 1);  // and its V

        const T* vrow[4];
        narrow::value_rows<S>(vrow, tV, L.v_stride, ln.lane);
        // The causal tail: V rows some row may not see are scrubbed first.
        const bool tail = tok0 + 16 > first_hidden && first_hidden < ch.length;
        if (tail) narrow::scrub_tail<S>(s, tV, vrow, rg.v_rows, d, limit, tok0, ln);
        narrow::accumulate_values<S>(acc, s, alpha, vrow, d, tail);
        // V slot done: it takes half 2c + 1 + R (chunk c + (R+1)/2).
        narrow::release_half<S>(p, maps, ch, rg, d, 2 * c + 1, c + (R + 1) / 2 < ch.count, ids[(R + 1) / 2 - 1]);
        ids[0] = ids[1];
        ids[1] = ids[2];
        ids[2] = narrow::page_of<S>(p, w, ch, c + 4);
    }
    cp_async_wait<0>();

    narrow::merge_warps<S>(sm, L.o_stride, acc, run_m, run_l, d, ln);
    narrow::write_output<S>(p, sm, L.o_stride, q, d.dv, ln);
}

}  // namespace gqla::cuda

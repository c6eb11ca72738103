// SPDX-License-Identifier: Apache-2.0
// The K/V rings of the narrow-group decode kernel (attention_narrow_kernel.cuh):
// the shape of an instantiation, a thread's place, where a warp's chunks
// lie, and the copies of K and V halves into a ring's slots with the waits
// and releases that order them.
#pragma once

#include "attention_common.cuh"
#include "attention_kernels.hpp"
#include "attention_narrow_layout.cuh"
#include "mma_primitives.cuh"
#include "row_copies.cuh"
#include "tma_primitives.cuh"

namespace gqla::cuda::narrow {

// Compile-time shape of a kernel instantiation (attention_narrow_kernel says
// what R, ROWS, DK, DV, NW and RB are). FP8: the 8-bit-cache kernel
// (attention_narrow_fp8_kernel.cuh), whose value tiles hold value columns
// 2r and 2r + 1 in their rows r and r + 8 (T: __half, what it widens to).
template <typename T_, int R_, NarrowRows ROWS_, int DK_, int DV_, int NW_, int RB_, bool FP8_ = false>
struct Shape {
    using T = T_;
    static constexpr int R = R_, DK = DK_, DV = DV_, NW = NW_, RB = RB_;
    static constexpr bool FP8 = FP8_;
    // TW token lanes (a ring each), each read by RB warps (one per row block).
    static constexpr int TW = NW / RB;
    static constexpr int NT = NW * 32, TILE = 16 * TW, MAX_KS = kNarrowMaxDk / 16, MAX_VT = kNarrowMaxDv / 16;
    static constexpr bool SWZ = ROWS_ != NarrowRows::Padded, TMA = ROWS_ == NarrowRows::TmaBoxes;
    static constexpr int BLOCK = TMA ? 16 * 64 : 64;  // NarrowLayout::block
    static constexpr int CTA_ROWS = kNarrowRows * RB;
};

// Key and value widths (fixed by the instantiation, or read from the launch)
// and their 16-column steps (derived where used, so the compiler sees how).
struct Widths {
    int dk1, dk2, dk, dv;
    __device__ __forceinline__ int dk16() const { return (dk + 15) / 16 * 16; }
    __device__ __forceinline__ int dv16() const { return (dv + 15) / 16 * 16; }
    __device__ __forceinline__ int k_steps() const { return dk16() / 16; }
    __device__ __forceinline__ int v_tiles() const { return dv16() / 16; }
};

// The widths of a launch.
template <class S>
__device__ __forceinline__ Widths widths(const AttentionParams& p) {
    Widths d;
    d.dk1 = p.k1.dim;
    d.dk2 = p.k2.dim;
    d.dk = S::DK ? S::DK : d.dk1 + d.dk2;
    d.dv = S::DV ? S::DV : p.v.dim;
    return d;
}

// This thread's place in the CTA.
struct Lane {
    int tid, lane, warp;
    int fr, fc;  // fragment row / column pair of this lane
    int tw;      // this warp's token lane (its ring)
    int rbw;     // and row block
    bool loads;  // the row block 0 warp of a token lane loads its ring
};

// Token lane tw's slot barriers: slot i completes on full[i] (TMA boxes).
template <class S>
__device__ __forceinline__ uint64_t* full_barriers(unsigned char* smem, const NarrowLayout& L, int tw) {
    return reinterpret_cast<uint64_t*>(smem + L.bar_off) + tw * S::R;
}

// Shared rings: token lane tw's slot i is free again once empty[i] counts RB readers done.
template <class S>
__device__ __forceinline__ uint64_t* empty_barriers(unsigned char* smem, const NarrowLayout& L, int tw) {
    return reinterpret_cast<uint64_t*>(smem + L.bar_off) + S::TW * S::R + tw * S::R;
}

// TMA boxes: each ring's slot barriers, before its first copy.
template <class S>
__device__ __forceinline__ void init_ring_barriers(unsigned char* smem, const NarrowLayout& L, const Lane& ln) {
    if constexpr (S::TMA) {
        uint64_t* full = full_barriers<S>(smem, L, ln.tw);
        uint64_t* empty = empty_barriers<S>(smem, L, ln.tw);
        if (ln.loads && ln.lane == 0) {
            for (int i = 0; i < S::R; ++i) mbarrier_init(full + i, 1);
            if constexpr (S::RB > 1)
                for (int i = 0; i < S::R; ++i) mbarrier_init(empty + i, S::RB);
            mbarrier_init_fence();
        }
        __syncwarp();
    }
}

// Where a warp's chunks lie: chunk c covers tokens
// (range_begin + c) * TILE + tw * 16 + [0, 16) of the sequence.
struct Chunks {
    int range_begin, count;  // the split's first tile, and its tiles
    int length;              // tokens of the sequence
    int tw, lane;
    bool aligned_pages;  // a warp's 16 tokens are 16 consecutive rows of one page
    bool loads;          // this warp loads its ring
};

// The chunks of the calling warp.
template <class S>
__device__ __forceinline__ Chunks chunks_of(const AttentionParams& p, const CtaWork& w, const Lane& ln) {
    Chunks ch;
    // Sparse launches gather single rows (the host never gives them TMA maps).
    ch.aligned_pages = S::TMA || ((p.page_size & 15) == 0 && !w.list);  // the host maps only such pages
    ch.count = w.range.end - w.range.begin;
    ch.range_begin = w.range.begin;
    ch.length = w.length;
    ch.tw = ln.tw;
    ch.lane = ln.lane;
    ch.loads = ln.loads;
    return ch;
}

// A token lane's ring of R slots, each holding half a chunk (the K rows or
// the V rows of 16 tokens), and the pools its rows are copied from.
template <typename T>
struct Ring {
    T* base;          // slot 0 (slot_elems elements a slot)
    uint64_t* full;   // TMA: slot i completes on full[i]
    uint64_t* empty;  // shared rings: slot i is free again once empty[i] counts RB readers done
    int slot_elems;
    const T* k1;
    const T* k2;
    const T* vb;
    int grp;
    int shift1, shift2, shiftv;  // log2 of the 8-element pieces of a key part / a value row, or -1
    SmemRows k_rows, v_rows;
};

// log2 of a width's 8-element pieces, or -1 where not a power of 2.
__device__ __forceinline__ int log2_pieces(int dim) {
    const int n = dim >> 3;
    return (n & (n - 1)) == 0 ? __ffs(n) - 1 : -1;
}

// The ring of token lane tw (its slots from `base`), with its slot barriers.
template <class S>
__device__ __forceinline__ Ring<typename S::T> ring_of(const AttentionParams& p, typename S::T* base,
                                                       unsigned char* smem, const NarrowLayout& L, const Widths& d,
                                                       int grp, int tw) {
    using T = typename S::T;
    Ring<T> rg;
    rg.base = base;
    rg.full = full_barriers<S>(smem, L, tw);
    rg.empty = empty_barriers<S>(smem, L, tw);
    rg.slot_elems = L.slot_elems;
    rg.k1 = static_cast<const T*>(p.k1.base);
    rg.k2 = static_cast<const T*>(p.k2.base);
    rg.vb = static_cast<const T*>(p.v.base);
    rg.grp = grp;
    rg.shift1 = log2_pieces(d.dk1);
    rg.shift2 = d.dk2 ? log2_pieces(d.dk2) : 0;
    rg.shiftv = log2_pieces(d.dv);
    rg.k_rows = SmemRows{L.k_stride, S::SWZ, S::BLOCK};
    rg.v_rows = SmemRows{L.v_stride, S::SWZ, S::BLOCK};
    return rg;
}

// The first token of the warp's chunk c.
template <class S>
__device__ __forceinline__ int chunk_first(Chunks ch, int c) {
    return (ch.range_begin + c) * S::TILE + ch.tw * 16;
}

// The slot of half-chunk `half`.
template <class S>
__device__ __forceinline__ typename S::T* slot_of(const Ring<typename S::T>& rg, int half) {
    return rg.base + (half % S::R) * rg.slot_elems;
}

// Page-table read for chunk c. Aligned pages: the page id of the chunk (all
// lanes); otherwise lane r < 16 fetches the (page << 32 | slot) of row r.
// -1: nothing to read (or a warp that does not load its ring).
template <class S>
__device__ __forceinline__ int64_t page_of(const AttentionParams& p, const CtaWork& w, Chunks ch, int c) {
    const int j0 = chunk_first<S>(ch, c);
    if (c >= ch.count || j0 >= ch.length || !ch.loads) return -1;
    if (ch.aligned_pages) return __ldg(w.table + (p.page_shift >= 0 ? j0 >> p.page_shift : j0 / p.page_size));
    const int j = j0 + (ch.lane & 15);
    return (ch.lane < 16 && j < ch.length) ? cta_token(p, w, j) : -1;
}

// Boxes of 64 columns x 16 rows of one key or value part, from row y of its
// pool view: box x lands at column col0 + x of the slot.
template <typename T>
__device__ __forceinline__ void load_boxes(T* dst, const CUtensorMap& map, int y, int dim, int col0, uint64_t* bar) {
    for (int x = 0; x < dim; x += 64) tma_load_2d(dst + (col0 + x) * 16, &map, x, y, bar);
}

// The pool view's row of a page's slot for a group.
__device__ __forceinline__ int box_row(PoolRows rows, int64_t page, int grp, int slot) {
    return static_cast<int>(page) * rows.page_rows + grp * rows.group_rows + slot;
}

// Producer: copies half-chunk `half` = chunk half / 2, its K rows (even) or
// V rows (odd), into its slot; f is its page-table read (page_of).
template <class S>
__device__ __forceinline__ void issue_half(const AttentionParams& p, const NarrowTmaMaps& maps, Chunks ch,
                                           const Ring<typename S::T>& rg, const Widths& d, int half, int64_t f) {
    using T = typename S::T;
    const int c = half >> 1;
    const bool is_v = half & 1;
    T* dst = slot_of<S>(rg, half);
    uint64_t* bar = rg.full + half % S::R;  // TMA layout only
    const int lane = ch.lane;
    if (ch.aligned_pages) {
        const int j0 = chunk_first<S>(ch, c);
        const int valid_rows = f < 0 ? 0 : min(16, ch.length - j0);
        const int slot = p.page_shift >= 0 ? j0 & (p.page_size - 1) : j0 % p.page_size;
        if constexpr (S::TMA) {
            if (valid_rows == 16) {
                if (lane == 0) {
                    mbarrier_arrive_expect_tx(bar, 16 * (is_v ? d.dv : d.dk) * 2);
                    if (is_v) {
                        load_boxes(dst, maps.v, box_row(maps.v_rows, f, rg.grp, slot), d.dv, 0, bar);
                    } else {
                        load_boxes(dst, maps.k1, box_row(maps.k1_rows, f, rg.grp, slot), d.dk1, 0, bar);
                        load_boxes(dst, maps.k2, box_row(maps.k2_rows, f, rg.grp, slot), d.dk2, d.dk1, bar);
                    }
                }
                return;
            }
            // Rows past the end: zero-filling copies below, then every
            // lane's copies and lane 0's arrival complete the phase.
        }
        const int64_t tb = (f < 0 ? 0 : (f << 32)) | static_cast<uint32_t>(slot);
        if (is_v) {
            copy_contiguous_rows16(dst, rg.v_rows, 0, rg.vb + pool_offset(p.v, tb, rg.grp), p.v.row_stride, d.dv,
                                   rg.shiftv, valid_rows, lane);
        } else {
            copy_contiguous_rows16(dst, rg.k_rows, 0, rg.k1 + pool_offset(p.k1, tb, rg.grp), p.k1.row_stride, d.dk1,
                                   rg.shift1, valid_rows, lane);
            if (d.dk2)
                copy_contiguous_rows16(dst, rg.k_rows, d.dk1, rg.k2 + pool_offset(p.k2, tb, rg.grp), p.k2.row_stride,
                                       d.dk2, rg.shift2, valid_rows, lane);
            if (d.dk16() != d.dk)  // zero key pad (see the ring in attention_narrow_kernel)
                copy_contiguous_rows16(dst, rg.k_rows, d.dk, rg.k1, 0, 8, 0, 0, lane);
        }
        if constexpr (S::TMA) {
            cp_async_mbarrier_arrive(bar);
            __syncwarp();
            if (lane == 0) mbarrier_arrive(bar);
        }
    } else {
        const bool valid = f >= 0;
        if (is_v) {
            copy_scattered_rows16(dst, rg.v_rows, 0, valid ? rg.vb + pool_offset(p.v, f, rg.grp) : nullptr, d.dv, rg.vb,
                                  lane);
        } else {
            copy_scattered_rows16(dst, rg.k_rows, 0, valid ? rg.k1 + pool_offset(p.k1, f, rg.grp) : nullptr, d.dk1,
                                  rg.k1, lane);
            if (d.dk2)
                copy_scattered_rows16(dst, rg.k_rows, d.dk1, valid ? rg.k2 + pool_offset(p.k2, f, rg.grp) : nullptr,
                                      d.dk2, rg.k2, lane);
            if (d.dk16() != d.dk)  // zero key pad (see the ring in attention_narrow_kernel)
                copy_scattered_rows16(dst, rg.k_rows, d.dk, static_cast<const T*>(nullptr), 8, rg.k1, lane);
        }
    }
}

// Producer prologue: halves [first, end) of the ring's first R, each its own
// commit group; first_ids[c] is chunk c's page-table read. With padded
// widths the slots are zeroed first.
template <class S>
__device__ __forceinline__ void issue_first(const AttentionParams& p, const NarrowTmaMaps& maps, Chunks ch,
                                            const Ring<typename S::T>& rg, const Widths& d,
                                            const int64_t (&first_ids)[4], int first, int end) {
    if (!ch.loads) return;
    if (d.dk16() != d.dk || d.dv16() != d.dv) {
        uint4* z = reinterpret_cast<uint4*>(slot_of<S>(rg, first));
        for (int i = ch.lane; i < (end - first) * rg.slot_elems / 8; i += 32) z[i] = make_uint4(0, 0, 0, 0);
    }
    __syncwarp();  // zeros before any copy into the same bytes
#pragma unroll
    for (int h = first; h < end; ++h) {
        if ((h >> 1) < ch.count) issue_half<S>(p, maps, ch, rg, d, h, first_ids[h >> 1]);
        cp_async_commit();
    }
}

// Consumer: waits until half `half` has landed in its slot (cp.async: every
// group but the R - 1 newest, which are the halves after it).
template <class S>
__device__ __forceinline__ void wait_half(const Ring<typename S::T>& rg, int half) {
    if constexpr (S::TMA) {
        mbarrier_wait(rg.full + half % S::R, (half / S::R) & 1);
    } else {
        cp_async_wait<S::R - 1>();
        __syncwarp();
    }
}

// This warp is done reading half `done`'s slot: the slot takes half
// done + R where `more` (id: that half's page-table read). With shared rings
// the warp counts itself out on the slot's empty barrier and the loading
// warp waits for every reader.
template <class S>
__device__ __forceinline__ void release_half(const AttentionParams& p, const NarrowTmaMaps& maps, Chunks ch,
                                             const Ring<typename S::T>& rg, const Widths& d, int done, bool more,
                                             int64_t id) {
    __syncwarp();
    if constexpr (S::RB > 1) {
        if (ch.lane == 0) mbarrier_arrive(rg.empty + done % S::R);
        if (ch.loads && more) mbarrier_wait(rg.empty + done % S::R, (done / S::R) & 1);
    }
    if (ch.loads && more) issue_half<S>(p, maps, ch, rg, d, done + S::R, id);
    cp_async_commit();
}

}  // namespace gqla::cuda::narrow

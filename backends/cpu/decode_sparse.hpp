// SPDX-License-Identifier: Apache-2.0
// Sparse (top-k) attention on the CPU backend (gqla_decode_args.indices):
// every query row lists the cache positions it attends. Per query, the
// listed positions it may see are taken a block at a time, and the ISA
// table's tile kernels run over the block with no causal limit: the GQA
// form's kernel reads each position's rows where they lie (gathered tokens,
// GqaItem::k1_rows), the absorb form's kernel reads a per-thread staging
// buffer laid out like one cache page (same dtype) into which the block's
// latent rows are copied. Each block's (acc, m, l) is folded into the
// query's running state through the log-sum-exp. A query's list may be cut
// into pieces that run on different threads and merge the same way.
//
// Memory: the staging, the kernels' scratch and the call's shared arrays
// (query table, split partials, the absorb path's projections) live in
// buffers owned by the thread that makes the call, allocated by its first
// sparse call and grown when a later call needs more; they are freed when
// that thread exits. Nothing is allocated by a call that fits them.
#pragma once

#include <cstdint>

#include "backends/cpu/aligned_buffer.hpp"
#include "backends/cpu/call_rows.hpp"
#include "backends/cpu/cpu_context.hpp"
#include "backends/cpu/softmax_constants.hpp"

namespace gqla::cpu {

// Entry point from cpu_decode: a->indices.data != NULL.
gqla_status decode_sparse(CpuContext* ctx, const gqla_decode_args* a);

// The two forms (decode_sparse_gqa.cpp, decode_sparse_absorb.cpp).
gqla_status sparse_gqa_form(CpuContext* ctx, const gqla_decode_args* a);
gqla_status sparse_absorb(CpuContext* ctx, const gqla_decode_args* a);

namespace sparse {

// Positions attended at once: one kernel "page" (a few hundred KiB of rows
// at most, which stay in L2).
constexpr int kBlock = 256;
// Rows (queries x heads) of one chunk of queries: bounds the shared arrays.
constexpr int64_t kChunkRows = 2048;
// List entries below which a query's list is not cut into pieces.
constexpr int64_t kMinPiece = 256;
constexpr int kMaxPieces = 16;
// Rows ahead of the one being copied whose lines are prefetched.
constexpr int kPrefetchAhead = 8;

constexpr float kMaxFloor = -1e30f;  // empty running maximum, as the kernels start theirs

// One query row of the call: sequence b, its query k, the last position it
// may see and its list of topk entries.
struct Query {
    int32_t b, k;
    int64_t limit;
    const int32_t* list;
};

// Fills q[0, total_q) in row order (row = seqs[b].q_row + k).
void fill_queries(const gqla_decode_args* a, Query* q);

// How a chunk of queries is cut into items: `pieces` per query, piece p of
// a query covering list entries [topk * p / pieces, topk * (p + 1) / pieces).
int plan_pieces(int64_t queries, int32_t topk, int threads);

// Most split pieces of one chunk (queries x pieces when pieces > 1): a
// chunk is split only when it has fewer than 4 * threads queries, and then
// into ceil(4 * threads / queries) pieces at most, under 8 * threads in all.
inline int64_t partial_slots(int threads) { return threads > 1 ? 8 * int64_t(threads) : 0; }

// Copies up to kBlock visible entries (0 <= j <= limit) of list[*i, end)
// into out, advancing *i past what it read; returns how many.
int next_visible(const int32_t* list, int64_t* i, int64_t end, int64_t limit, int32_t* out);

// Page and slot of each position of a block, found once per block and
// used for every pool and group it is staged from.
struct Located {
    int n = 0;
    int64_t page[kBlock];
    int64_t slot[kBlock];
};
void locate(const int32_t* page_table, int64_t page_size, const int32_t* pos, int n, Located* out);

// Address of the row of position t in a pool segment: page * page_elems +
// group offset + slot * width elements of `es` bytes from `base`.
inline const char* row_at(const char* base, const Located& l, int t, int64_t page_elems, int64_t group_elems,
                          int64_t width, size_t es) {
    return base + (l.page[t] * page_elems + group_elems + l.slot[t] * width) * static_cast<int64_t>(es);
}

// Copies one cache row (a few hundred bytes): inline 16-byte moves instead
// of a memcpy call per row, which cost as much as the copy itself.
inline void copy_row(void* dst, const void* src, size_t bytes) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t o = 0;
    for (; o + 64 <= bytes; o += 64) __builtin_memcpy(d + o, s + o, 64);
    for (; o + 16 <= bytes; o += 16) __builtin_memcpy(d + o, s + o, 16);
    for (; o < bytes; ++o) d[o] = s[o];
}

// Prefetches the lines of `bytes` bytes at p into L2.
inline void prefetch_bytes(const void* p, int64_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 2);
}

// Thread-owned buffers of one calling thread (see the file comment).
struct Buffers {
    AlignedBuffer shared;      // the call's arrays
    AlignedBuffer per_thread;  // one area per pool participant
};
Buffers& buffers();
// Grows b to at least `bytes`; false when that fails (b keeps its contents).
bool reserve(AlignedBuffer& b, size_t bytes);

}  // namespace sparse
}  // namespace gqla::cpu

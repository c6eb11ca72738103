// SPDX-License-Identifier: Apache-2.0
// What the GQA-form calls share, over the cache (decode_gqa.cpp) and over
// latent pieces up-projected per call (gqa_transient.cpp): cutting a call
// into chunks of (sequence, KV group, query range) units and those into
// kernel tiles, the queries of a tile as scaled f32 rows, the row limits,
// the per-thread scratch and the writing of finished rows.
#pragma once

#include <cstdint>

#include "backends/cpu/call_rows.hpp"
#include "backends/cpu/cpu_context.hpp"
#include "backends/cpu/kernel_table.hpp"
#include "backends/cpu/softmax_constants.hpp"

namespace gqla::cpu {

struct GqaChunk {
    GqaUnit* units = nullptr;
    GqaTile* tiles = nullptr;
    int32_t num_units = 0;
    int32_t num_tiles = 0;
    int64_t rows = 0;
};

// Walks a call chunk by chunk. Units take whole (sequence, group) query runs
// while they fit; a run with more rows than a chunk holds is cut into the
// fewest equal query ranges that fit. Sequences with at most kNarrowQueries
// queries give one narrow tile per unit, longer ones wide tiles of
// kWideRows rows.
class GqaChunker {
public:
    GqaChunker(const CpuContext* ctx, const CallRows& rows, float* workspace);
    // The next chunk, in the workspace; false when the call is done.
    bool next(GqaChunk& c);

private:
    const CallRows& rows_;
    const PathWorkspace& W_;
    int32_t batch_, groups_, n_rep_;
    GqaUnit* units_;
    GqaTile* tiles_;
    int32_t b_ = 0, g_ = 0, k0_ = 0;
    int32_t part_queries_ = 0;  // queries per range of the current run
};

// Per-thread scratch of a GQA-form item.
struct GqaThreadArea {
    float* scratch;  // the kernel's (WorkspaceLayout::attend_floats)
    float* acc;      // [tile_rows][dv] of an unsplit tile
    float* m;
    float* l;
    int64_t* limit;  // [tile_rows]
};
GqaThreadArea gqa_thread_area(const CpuContext* ctx, int tid);

// The kernel for a tile over rows of dtype `dt`: rows in lanes or in
// register tiles.
inline GqaAttendFn gqa_kernel(const CpuContext* ctx, const GqaTile& t, gqla_dtype dt) {
    return t.wide ? ctx->kernels->gqa_attend_wide[dt - 1] : ctx->kernels->gqa_attend[dt - 1];
}
// ... over the cache.
inline GqaAttendFn gqa_kernel(const CpuContext* ctx, const GqaTile& t) {
    return gqa_kernel(ctx, t, ctx->desc.cache_dtype);
}

// Queries of the chunk's tiles as f32 rows [chunk row][dk], pre-multiplied by
// scale * log2(e), on the context's threads.
void load_chunk_queries(CpuContext* ctx, const CallRows& rows, const GqaChunk& c, int dk, float* q32);

// limit[i]: last position row tile.row0 + i of unit u may see, minus `shift`.
void tile_limits(const CallRows& rows, int n_rep, const GqaUnit& u, const GqaTile& t, int64_t shift, int64_t* limit);

// Writes the rows of a tile from unnormalised acc [rows][dv], m, l (log2
// domain) to o and lse.
void write_tile_output(const CallRows& rows, int n_rep, const GqaUnit& u, const GqaTile& t, int dv, const float* acc,
                       const float* m, const float* l, gqla_dtype io);

// state (+)= a tile's result through the log-sum-exp (log2 domain), for
// `rows` rows whose acc rows are `dv` apart (gqa_transient.cpp).
void fold_into_state(int rows, int dv, const float* acc, const float* m, const float* l, float* s_acc, float* s_m,
                     float* s_l);

// Up-projects n (<= kExpandTokens) latent rows of dtype cdt through group g's
// W_UKV into out [n][d_c + d_v] f32, with the expansion kernel or, when only
// W^T is kept in f32, the table's GEMM (scratch as expand_scratch_floats and
// n * r floats). The transient and the sparse GQA forms both use it.
void expand_latent_rows(const CpuContext* ctx, const LayerWeights& lw, int g, int n, const void* const* latent,
                        gqla_dtype cdt, float* out, float* scratch);

}  // namespace gqla::cpu

// SPDX-License-Identifier: Apache-2.0
// State of one CUDA session: paged pools in the layout of backend_api.h,
// weights, device-side sequence tables, the decode workspace sized at create,
// staging for host tensors, the stream and the cuBLAS handles.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attention_kernels.hpp"
#include "attention_params.hpp"
#include "batched_gemm.hpp"
#include "core/backend_api.h"
#include "device_buffer.hpp"
#include "latent_wgmma.hpp"

namespace gqla::cuda {

struct Session {
    gqla_backend_desc desc{};
    int device = 0;
    int sm_count = 0;
    int smem_optin = 0;

    cudaStream_t stream = nullptr;  // the legacy default stream unless the caller set one
    cublasHandle_t cublas = nullptr;
    DeviceBuffer cublas_workspace;  // fixed, so cuBLAS allocates nothing (graph capture)
    BatchedGemmRunner gemms;        // the absorb projections (cuBLASLt; off: GQLA_CUDA_CUBLASLT=0)

    // Always-kept cache: GQA kind K, V; GQLA kind C, KR.
    DeviceBuffer pool_a, pool_b;
    // GQLA expanded cache KC, VE (while the GQA path is enabled).
    DeviceBuffer pool_kc, pool_ve;
    // GQLA: W_UKV per layer, [G*(d_c+d_v)][r] in the projection dtype
    // (projection_dtype below), read by the absorb projections and by the
    // expansion GEMM alike. With head_weights, one copy of a group's block
    // per head of the group, [H*(d_c+d_v)][r] (head h holds group h / n_rep's):
    // the absorb projections then run batched over heads, reading q and
    // writing o where they lie, as for MLA (one head per group), instead of
    // through the group-major pack and unpack passes. It costs n_rep times
    // the weights' memory (LLaMA-3-8B-GQLA: 6 MiB a layer instead of 1.5);
    // GQLA_CUDA_HEAD_WEIGHTS=0 keeps one block per group.
    std::vector<DeviceBuffer> weights;
    bool head_weights = false;
    // Copies kept of a group's block (n_rep with head_weights, else 1), and
    // the heads each block serves (n_rep, or 1 with head_weights).
    int weight_copies() const;
    int heads_per_weight_block() const;

    // Device mirrors of the core's tables, read by decode at run (or replay) time.
    DeviceBuffer page_tables;  // int32 [max_sequences][table_stride]
    DeviceBuffer lengths;      // int32 [num_layers][max_sequences]
    int64_t table_stride = 0;
    std::vector<std::vector<int32_t>> host_pages;    // what the device holds, per slot
    std::vector<std::vector<int32_t>> host_lengths;  // per slot, per layer

    // Decode workspace, sized at create for the most query rows of one call:
    // query_token_capacity(desc) tokens x H heads. Since calls carry any mix
    // of query counts (ragged calls, prefill chunks), desc.max_q_tokens bounds
    // the sum of a call's q_lens; max_batch x max_q_len would size every call
    // for its largest sequence's count times the batch.
    int64_t max_rows = 0;
    DeviceBuffer q_stage, o_stage, lse_stage;  // host-tensor staging
    int64_t part_rows = 0;                     // (split, b, qi, h) rows the partials hold
    DeviceBuffer part_o, part_lse2;            // split partials
    bool trace = false;                        // GQLA_CUDA_TRACE=1: print launch plans
    int max_splits = 0;                        // GQLA_CUDA_MAX_SPLITS caps the split heuristic
    bool dependent_launch = false;             // combine as a programmatic dependent (cc 9.0+; off: GQLA_CUDA_PDL=0)
    // The splits of a row block merge in a thread-block cluster instead of
    // the combine pass (narrow kernel: up to kMaxClusterSplits; latent
    // kernel: latent_clusters below; cc 9.0+; off: GQLA_CUDA_CLUSTER_MERGE=0).
    // Whether a narrow cluster shape fits, by (dtype, ring slots, row
    // layout, dims, warps, shared memory, splits).
    bool use_cluster_merge = false;
    std::map<std::array<int, 7>, bool> cluster_fits;
    DeviceBuffer q_nope, q_att, o_att, o_proj;  // absorb path

    // Expansion workspace (latent rows in, expanded rows out), chunked.
    int32_t expand_chunk = 0;
    DeviceBuffer expand_in, expand_out;

    // GQLA, the GQA_TRANSIENT form (transient_pool.cpp): one layer of
    // expanded pages, [page][G][P][d_c] and [page][G][P][d_v] like one layer
    // slab of KC / VE and with their page numbering, that each such call
    // fills from the latent rows of its sequences and then reads. Allocated
    // by the first such call (so sessions that never use the form do not pay
    // for it), kept for the session's life, counted as workspace.
    DeviceBuffer transient_kc, transient_ve;
    DeviceBuffer transient_tokens;  // int64 [expand_chunk]: token indices of one expansion chunk
    // Narrow-kernel TMA maps per layer: keys and values from the transient
    // pool's single layer, the rope part from that layer's KR.
    std::vector<NarrowTmaMaps> transient_maps;

    // GQA kind, 8-bit cache: prefill launches of several row blocks per
    // group read their sequences' pages widened once to bf16
    // (fp8_widening.hpp): keys [page][G][P][D] and values [page][G][P][Dv]
    // for widened_pages pages, the launch's page table and lengths. Grow
    // with the largest such call; counted as workspace.
    DeviceBuffer widened_k, widened_v, widened_table, widened_lengths;
    int64_t widened_pages = 0;
    // TMA maps of widened_k/v where the device has TMA (cc >= 9.0) and
    // GQLA_CUDA_NARROW_TMA is on; valid 0: tiles copied by cp.async.
    bool widened_tma = false;
    NarrowTmaMaps widened_maps{};

    // Sparse calls (sparse_lists.hpp; grow with the largest call seen):
    // host index lists staged, then each query row's visible tokens.
    DeviceBuffer sparse_indices;               // int32 [total_q][topk]
    DeviceBuffer sparse_tokens;                // int64 [total_q][topk]: page << 32 | slot
    DeviceBuffer sparse_counts;                // int32 [total_q]
    DeviceBuffer sparse_pool_rows;             // int64 [total_q][topk]: rows a sparse GQA_TRANSIENT call expands
    std::vector<gqla_decode_seq> sparse_rows;  // host: one launch sequence per query row (decode_paths.cpp)

    // Append staging (grows with the largest append seen).
    DeviceBuffer row_tokens, staged_a, staged_b;
    PinnedBuffer pinned;
    cudaEvent_t pinned_free = nullptr;     // recorded after the last copy that read `pinned`
    cudaEvent_t stream_handoff = nullptr;  // the old stream's queued work, at a stream switch (switch_stream)

    std::string error;

    // Per-variant occupancy, cached by shared-memory size (slot numbering:
    // decode_plan.cpp).
    struct Occupancy {
        int smem = -1;
        NarrowDims dims = NarrowDims::Runtime;
        int blocks = 0;
    };
    static constexpr int kOccupancySlots = 19;
    Occupancy occupancy[kOccupancySlots][2];
    // Kernel choices: the GQLA_CUDA_* knobs (read once, tuning.hpp) and the
    // device. GQLA_CUDA_NARROW_KERNEL=0 / GQLA_CUDA_WARP_KERNEL=0 /
    // GQLA_CUDA_LATENT_WGMMA=0 turn those kernels off; GQLA_CUDA_STAGES=n
    // pins their depth (0: planned).
    bool use_narrow_kernel = true;
    bool use_warp_kernel = true;
    // sm_90a latent kernel for the absorb path (off: GQLA_CUDA_LATENT_WGMMA=0)
    // and its per-layer TMA maps (empty, i.e. copies only: GQLA_CUDA_LATENT_TMA=0).
    bool use_latent_wgmma = false;
    // Its clusters of n splits (2..kMaxLatentClusterSplits) resident at once,
    // where use_cluster_merge (cluster_merge_pays).
    std::array<int, kMaxLatentClusterSplits + 1> latent_clusters{};
    std::vector<LatentTmaMaps> latent_maps;
    // Row blocks of at most kLatentRowsTransposed rows (e.g. 32 heads at s_q
    // 1) on the latent kernel's transposed variant: GQLA_CUDA_LATENT_TRANSPOSED
    // = 0 never, 1 (default) where a sequence has at most that many rows, 2
    // always (every sequence's rows in blocks of kLatentRowsTransposed).
    int latent_transposed = 1;
    // sm_90a prefill kernel for GQA-form launches of many query rows per
    // group (off: GQLA_CUDA_PREFILL_WGMMA=0).
    bool use_prefill_wgmma = false;
    bool prefill_turns = true;  // the prefill kernel's consumers take turns (Tuning::prefill_turns)
    // 8-bit GQA caches: prefill launches widen their pages once
    // (fp8_widening.hpp): -1 those of at least kFp8WidenMinRowBlocks row
    // blocks per group, 0 none, 1 every launch the prefill kernel takes
    // (GQLA_CUDA_FP8_WIDEN unset, 0, other).
    int fp8_widening = -1;
    // Absorb with one head per weight block (MLA, or head_weights) and q in
    // the cache dtype, its tokens evenly spaced: the query projection and
    // the latent kernel read q where it lies, no pack pass (off:
    // GQLA_CUDA_QUERY_IN_PLACE=0).
    bool use_query_in_place = true;
    // The latent kernel as a programmatic dependent of the query projection
    // (where dependent_launch; off: GQLA_CUDA_LATENT_PDL=0).
    bool latent_dependent_launch = false;
    int pinned_stages = 0;
    int narrow_swizzle = -1;  // GQLA_CUDA_NARROW_SWIZZLE: -1 planned, 0 padded rows, 1 swizzled where the dims allow
    int narrow_wide = -1;     // GQLA_CUDA_NARROW_WIDE: -1 planned, 0 never, 1 wherever compiled (fit_wide_ctas)
    // Groups of 2-4 row blocks in one CTA whose row blocks share the K/V
    // rings (narrow_shared_compiled): GQLA_CUDA_NARROW_SHARED -1 planned
    // (fit_shared_rings), 0 never, 1 wherever compiled.
    int narrow_shared = -1;
    // Most rows per group (n_rep * s_q) the narrow kernel takes, 8 per CTA
    // (GQLA_CUDA_NARROW_MAX_ROWS, >= 8; 8 leaves larger groups to the 16-row kernels).
    int narrow_max_rows = kNarrowMaxRowsDefault;
    // TMA maps of each layer's narrow-kernel pools (GQA kind: K, V; GQLA: the
    // expanded KC, VE and KR while the GQA path is enabled). Empty where
    // TMA is unavailable (compute capability < 9.0, GQLA_CUDA_NARROW_TMA=0).
    bool narrow_tma = false;
    std::vector<NarrowTmaMaps> narrow_maps;
    // Its TMA layout's kernels compiled for the layer's key/value widths,
    // where there is one (NarrowDims; off: GQLA_CUDA_NARROW_FIXED_DIMS=0).
    bool use_narrow_fixed_dims = true;
};

// How one pool stores its rows: the element dtype and, for 8-bit pools,
// how many f32 scales each (group, slot) row carries (docs/fp8-cache.md).
// Most pools are in the cache dtype with one scale per row; a GQLA session
// with an 8-bit cache keeps its latent in blocks of kFp8LatentBlock elements
// with a scale each and its rope key in bf16, and its GQA_TRANSIENT rows are
// in the projection dtype.
struct PoolFormat {
    gqla_dtype dtype;
    int32_t scale_cols;  // f32 scales per row; 0 for 16- and 32-bit pools
};
PoolFormat cache_format(const Session& s);      // K, V and the expanded KC, VE
PoolFormat latent_format(const Session& s);     // C
PoolFormat rope_format(const Session& s);       // KR
PoolFormat transient_format(const Session& s);  // the GQA_TRANSIENT form's KC, VE

// Elements per token row of each pool and the layer/page strides.
// 8-bit pools: a page is its rows, 64-byte aligned, then scale_cols f32
// scales per (group, slot) at scale_offset (the scale of block b of row
// (g, slot) at 4 * ((g * page_size + slot) * scale_cols + b)), the page
// rounded up to 64.
struct PoolGeometry {
    int64_t layer_stride, page_stride, group_stride;
    int32_t row_stride;
    int64_t scale_offset = 0;
    size_t elem_bytes = 0;

    size_t layer_bytes() const { return static_cast<size_t>(layer_stride) * elem_bytes; }
    size_t page_bytes() const { return static_cast<size_t>(page_stride) * elem_bytes; }
    // Layer `layer` of a pool of this geometry.
    template <class Byte>
    Byte* layer_base(Byte* pool, int64_t layer) const {
        return pool + static_cast<size_t>(layer) * layer_bytes();
    }
};
PoolGeometry pool_geometry(const Session& s, int64_t groups, int32_t dim, PoolFormat format);
inline PoolGeometry pool_geometry(const Session& s, int64_t groups, int32_t dim) {
    return pool_geometry(s, groups, dim, cache_format(s));
}

// Pool view of `layer` for the decode kernels.
PoolView pool_view(const Session& s, const DeviceBuffer& pool, int layer, int64_t groups, int32_t dim,
                   bool shared_by_groups, PoolFormat format);
inline PoolView pool_view(const Session& s, const DeviceBuffer& pool, int layer, int64_t groups, int32_t dim,
                          bool shared_by_groups) {
    return pool_view(s, pool, layer, groups, dim, shared_by_groups, cache_format(s));
}

// Bytes of a pool of every layer.
size_t pool_bytes(const Session& s, int64_t groups, int32_t dim, PoolFormat format);

// TMA maps of every layer for the narrow kernel over these key and value
// pools (GQA kind: K and V; GQLA: the expanded KC and VE, with the session's
// KR as the second key part). single_layer: keys and values hold one layer
// (the transient pool), read at layer 0 for every layer's map. Empty when
// the session does not use them or a pool is not allocated.
std::vector<NarrowTmaMaps> narrow_maps_for(const Session& s, const DeviceBuffer& keys, const DeviceBuffer& values,
                                           bool single_layer = false);

// Query tokens one call may carry (the decode workspaces hold that many
// times H rows): desc.max_q_tokens, or max_batch x max_q_len where a
// description leaves it 0 (as the core's config default does).
int64_t query_token_capacity(const gqla_backend_desc& d);

// The absorb projections and the expansion GEMM take their operands (W,
// queries, latent rows and outputs) in the cache dtype, with f32
// accumulation: for 16-bit caches half the weight traffic and memory of f32
// and tensor-core GEMMs, at a rounding the cache's own rounding already
// dominates; f32 caches keep f32 products (no TF32: their tolerance is 1e-5).
// An 8-bit cache's projections run in bf16 (its latent rows widened with
// their block scales first).
inline gqla_dtype projection_dtype(const Session& s) {
    return s.desc.cache_dtype == GQLA_DTYPE_FP8_E4M3 ? GQLA_DTYPE_BF16 : s.desc.cache_dtype;
}
inline cudaDataType_t cuda_type(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_BF16:
            return CUDA_R_16BF;
        case GQLA_DTYPE_F16:
            return CUDA_R_16F;
        default:
            return CUDA_R_32F;
    }
}
inline cudaDataType_t projection_cuda_type(const Session& s) { return cuda_type(projection_dtype(s)); }

// Waits until the pinned staging buffer may be overwritten, then grows it.
void* acquire_pinned(Session& s, size_t bytes);
void release_pinned(Session& s);  // records pinned_free on the stream

Session* create_session(const gqla_backend_desc& desc);
void destroy_session(Session* s);

// Makes the session's device current for the calling thread.
void bind_device(const Session& s);

// Queues the session's later work on `next`, after the work it queued on its
// current stream (appends still copying rows, page-table updates): those
// write the cache that the next decode reads, and a stream that does not
// synchronize with the old one (cudaStreamNonBlocking) would race them.
// Unchanged on error.
void switch_stream(Session& s, cudaStream_t next);

}  // namespace gqla::cuda

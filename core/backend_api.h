/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend_api.h — the internal interface between the gqla core and a compute
 * backend (CPU, built into libgqla.so; CUDA, a module libgqla_cuda.so loaded
 * at run time with dlopen). Plain C so the module boundary does not depend on
 * C++ ABI details. Versioned: the core refuses a module whose abi_version
 * differs from GQLA_BACKEND_ABI_VERSION.
 *
 * Division of labour
 *   core    : validates every argument, owns sequences, page tables, lengths,
 *             the page allocator (ref-counted pages, copy-on-write), path
 *             selection and all-or-nothing rollback. It never touches cache
 *             memory.
 *   backend : owns memory on its device (cache pools, weights, workspace),
 *             writes cache rows, expands latents, copies pages and computes
 *             decode attention. It trusts the core's validation.
 *
 * Cache layout (all pools allocated by the backend at create / enable time;
 * P = page_size, "page" = a page id in [0, num_pages)). Element type is the
 * cache dtype. One page id names the same token slots in every layer and in
 * every pool.
 *   GQA kind
 *     K [layer][page][G][P][D]      V [layer][page][G][P][Dv]
 *   GQLA kind (always; C only while desc.keep_latent == 1)
 *     C [layer][page][P][r]         KR [layer][page][P][d_r]
 *   GQLA kind, expanded (only while enabled)
 *     KC [layer][page][G][P][d_c]   VE [layer][page][G][P][d_v]
 * Token t of a sequence lives in page page_table[t / P], slot t % P.
 * An 8-bit cache (GQLA_DTYPE_FP8_E4M3) adds f32 scales per token beside
 * these pools, in a layout the backend chooses (docs/fp8-cache.md): one per
 * (token, KV head) for K and V, one per (token, 128 elements of r) for C,
 * one per (token, group) for KC and VE; KR is then bf16.
 * A shard (config group_begin/group_count) is described to the backend as
 * the smaller layer it serves: num_heads and num_kv_heads are the shard's,
 * and W_UKV holds the shard's groups only.
 */
#ifndef GQLA_CORE_BACKEND_API_H
#define GQLA_CORE_BACKEND_API_H

#include <stddef.h>
#include <stdint.h>

#include "gqla/gqla.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GQLA_BACKEND_ABI_VERSION 6u

/* Optional features a backend declares in gqla_backend_vtable.features. The
 * core refuses (UNSUPPORTED, naming the backend) a session or call that
 * needs a feature its backend lacks, so a backend never sees it. */
#define GQLA_BACKEND_FEATURE_FP8_CACHE 1u   /* desc.cache_dtype GQLA_DTYPE_FP8_E4M3 */
#define GQLA_BACKEND_FEATURE_SPARSE 2u      /* gqla_decode_args.indices */
#define GQLA_BACKEND_FEATURE_DROP_LATENT 4u /* desc.keep_latent == 0 */
#define GQLA_BACKEND_FEATURE_SPARSE_FP8 8u  /* indices over an FP8_E4M3 cache */
/* set_expanded(1) (the kept expanded cache of the GQLA GQA path) with an
 * FP8_E4M3 cache; without it such a session runs the absorb path and the
 * GQA_TRANSIENT form only. */
#define GQLA_BACKEND_FEATURE_FP8_EXPANDED 16u
/* ABI 6: read_rows and append of stored FP8_E4M3 rows with their scales
 * (gqla_read_args / gqla_append_args a_scales, b_scales): sequence export
 * and import of an 8-bit cache. */
#define GQLA_BACKEND_FEATURE_FP8_ROWS 32u

/* Name of the function libgqla_cuda.so exports:
 *   const gqla_backend_vtable* gqla_cuda_backend_get(uint32_t abi_version);
 * It returns NULL when abi_version differs from the module's. */
#define GQLA_CUDA_BACKEND_ENTRY "gqla_cuda_backend_get"

/* A strided view of an activation tensor as the backend sees it: up to 4
 * dims, strides in elements, innermost stride 1 (checked by the core). The
 * pointer is in the memory space `on_device` says (1: the backend's device
 * memory, 0: host memory; a CUDA backend copies host inputs itself). */
typedef struct gqla_view {
    void* data;
    gqla_dtype dtype;
    int32_t on_device;
    int32_t ndim;
    int64_t shape[4];
    int64_t strides[4];
} gqla_view;

/* Everything the backend needs to size itself; fixed for a session's life. */
typedef struct gqla_backend_desc {
    gqla_kind kind;
    int32_t num_heads, num_kv_heads;        /* H, G */
    int32_t head_dim, value_dim;            /* GQA: D, Dv. GQLA: value_dim = d_v */
    int32_t latent_dim, nope_dim, rope_dim; /* GQLA: r, d_c, d_r */
    int32_t num_layers;
    gqla_dtype cache_dtype, io_dtype;
    float softmax_scale; /* resolved (never 0) */
    int32_t page_size;
    int64_t num_pages;
    int32_t max_sequences, max_batch, max_q_len;
    int64_t max_q_tokens; /* most query rows of one call (sum of q_lens) */
    int32_t device_index;
    int32_t num_threads; /* resolved (>= 1) */
    /* ABI 3. GQLA: 1 = the latent pool C exists. 0 = it does not: appends
     * carry c for the expanded rows only (write_expanded is always 1), the
     * expanded pools exist from create on (set_expanded is never called),
     * expand is never called and every decode is on the GQA path, not
     * transient. Needs GQLA_BACKEND_FEATURE_DROP_LATENT. */
    int32_t keep_latent;
} gqla_backend_desc;

/* How close a backend's kernels come to the roofline, per path: index 0 is
 * the GQA path, 1 the absorb path. Predicted time of a decode call, with
 * m = bytes / (bandwidth * memory) and c = flops / (peak * compute):
 * max(m, c) + serial_share * min(m, c) + overhead_s.
 * The core ignores efficiencies outside (0, 1] and negative overheads. */
typedef struct gqla_backend_efficiency {
    double memory[2];     /* achieved / peak read bandwidth */
    double compute[2];    /* achieved / peak FLOP rate */
    double overhead_s[2]; /* fixed seconds per decode call */
    /* GQA-form calls (the GQA path, kept or transient) of at least
     * prefill_min_queries queries and prefill_min_rows rows per group
     * (heads per group x queries) run on a kernel of their own (prefill
     * chunks): its achieved / peak FLOP rate, replacing compute[0] for them.
     * 0 (the default): no such kernel, compute[0] prices every call. */
    double prefill_compute;
    int32_t prefill_min_queries;
    int32_t prefill_min_rows;
    /* Sparse calls in the GQA form (kept expanded cache or transient): the
     * share of memory[0] their gathered rows reach (one row of 128-256 bytes
     * per group, position and query instead of whole pages). 0 (the default):
     * priced like dense calls. */
    double sparse_gqa_memory;
    /* Fixed seconds a GQA_TRANSIENT call adds for its expansion (launches of
     * the gather, GEMM and scatter), beside overhead_s[0]. 0: none. */
    double transient_overhead_s;
    /* With prefill_compute: a call of at least prefill_half_rows queries and
     * as many rows per group (but fewer than prefill_min_rows) also runs on
     * the prefill kernel, its rows padded to prefill_min_rows; priced at
     * prefill_compute x rows / prefill_min_rows. 0: no such calls. */
    int32_t prefill_half_rows;
    /* How much of the smaller of a call's memory and compute times adds to
     * the larger: 0 (the default) when the kernels overlap them fully (GPU
     * kernels keep enough loads in flight), 1 when they add up (CPU kernels,
     * bound by the latency of their own misses between the arithmetic). */
    double serial_share;
    /* Read bandwidth one of the backend's threads pulls at most, GB/s: its
     * kernels wait on their own misses (CPU cores keep a bounded number in
     * flight), so cache reads are priced at min(probe read_gbps, threads x
     * this), threads being the session's (cfg num_threads, else the probe's
     * affinity cores). 0 (the default): the probe's bandwidth alone. */
    double thread_read_gbps;
    /* Absorb form: achieved / peak FLOP rate of its two projections (q~ =
     * q_c W_UK and o = o~ W_UV^T, weight GEMVs at small batch) where they run
     * at another rate than its attention (AMX tiles for the attention, FMAs
     * for the projections); compute[1] then prices the attention alone. 0
     * (the default): compute[1] prices both. */
    double absorb_projection_compute;
} gqla_backend_efficiency;

/* One sequence's slice of an append call. */
typedef struct gqla_append_item {
    const int32_t* page_table; /* host; covers positions [0, start + count) */
    int32_t slot;              /* stable per-session index of the sequence, < max_sequences */
    int64_t start;             /* first position written (old length of this layer) */
    int64_t count;             /* rows written */
    int64_t row_offset;        /* first row of a/b for this sequence */
} gqla_append_item;

typedef struct gqla_append_args {
    int32_t layer;
    int32_t num_items;
    const gqla_append_item* items;
    gqla_view a;            /* GQA: k [n,G,D]; GQLA: c [n,r] */
    gqla_view b;            /* GQA: v [n,G,Dv]; GQLA: kr [n,d_r] */
    int32_t write_expanded; /* GQLA: also write KC/VE rows (expanded cache enabled) */
    /* ABI 6, stored rows (needs GQLA_BACKEND_FEATURE_FP8_ROWS; sequence
     * import into an FP8_E4M3 cache): when a (GQA: also b) has dtype
     * FP8_E4M3, its rows are e4m3 codes as read_rows gives them, stored as
     * they are with these F32 scales (host memory, contiguous): GQA
     * a_scales / b_scales [n, G] (K / V, one per token and KV head); GQLA
     * a_scales [n, ceil(r / 128)] (the latent's blocks), b (kr) BF16 and
     * b_scales unused. Data NULL otherwise. Every view is aligned to its
 * element size. */
    gqla_view a_scales;
    gqla_view b_scales;
} gqla_append_args;

/* Build expanded rows from the latent for positions [start, start+count) of
 * each item (used when the GQA path is switched on or weights change). */
typedef struct gqla_expand_args {
    int32_t layer;
    int32_t num_items;
    const gqla_append_item* items; /* row_offset unused */
} gqla_expand_args;

typedef struct gqla_decode_seq {
    const int32_t* page_table; /* host */
    int32_t num_pages;         /* entries in page_table */
    int32_t slot;
    int64_t length; /* cached tokens of this layer (>= q_len) */
    int32_t q_len;  /* queries of this sequence, 1..length: its last q_len
                                   tokens; query k sees positions j <= length - q_len + k */
    int64_t q_row;  /* ragged calls: first row of this sequence in q/o/lse
                                   (prefix sum of the q_lens before it); uniform: b * q_len */
} gqla_decode_seq;

/* One attention call. Uniform calls (ragged == 0): every sequence has
 * q_len queries and q/o/lse are 4-d/3-d [B, s_q, H, .] / [B, s_q, H].
 * Ragged calls (ragged == 1): sequence b has seqs[b].q_len queries, rows
 * packed in sequence order, and the views drop the batch dim: q [N, H, Dq],
 * o [N, H, Dv], lse [N, H] with N = total_q; the rows of sequence b are
 * q_row .. q_row + q_len - 1. */
typedef struct gqla_decode_args {
    int32_t layer;
    gqla_path path; /* GQA or ABSORB (never AUTO, never GQA_TRANSIENT) */
    int32_t batch;
    int32_t q_len; /* uniform: s_q of every sequence; ragged: the largest q_len */
    const gqla_decode_seq* seqs;
    gqla_view q;    /* [B, s_q, H, Dq] or ragged [N, H, Dq] */
    gqla_view o;    /* [B, s_q, H, Dv] or ragged [N, H, Dv] */
    gqla_view lse;  /* [B, s_q, H] or ragged [N, H], f32; data == NULL when not wanted */
    int32_t ragged; /* 0 uniform, 1 ragged (see above) */
    /* GQLA with path GQA only: 1 = the GQA form over latent rows up-projected
     * for this call (the kept expanded cache, allocated or not, is not read);
     * the backend reads the latent c and kr and its weights of the layer. */
    int32_t transient;
    int64_t total_q; /* sum of q_len over the batch (<= desc.max_q_tokens) */
    /* ABI 3, sparse attention (needs GQLA_BACKEND_FEATURE_SPARSE): data NULL
     * = dense. Otherwise I32 [total_q, topk] (uniform calls too: row b * q_len
     * + i belongs to query i of sequence b), in the memory space on_device
     * says. Query row k of sequence b attends to the listed positions j with
     * 0 <= j <= seqs[b].length - q_len + k only; other entries (-1 padding,
     * invisible or out of range positions) are skipped without reading the
     * cache. A repeated position counts once per occurrence. A row with no
     * visible entry yields o = 0 and lse = -inf. */
    gqla_view indices;
    int32_t topk;
} gqla_decode_args;

/* Rows of one sequence's always-kept cache copied out to host memory, in
 * the cache dtype (sequence export): positions [start, start + count) of
 * `layer`. GQA kind: a = K rows [count, G, D], b = V rows [count, G, Dv].
 * GQLA: a = c [count, r], b = kr [count, d_r]. Both views are host memory,
 * contiguous, of dtype desc.cache_dtype (an FP8_E4M3 GQLA cache: kr BF16).
 * An FP8_E4M3 cache (needs GQLA_BACKEND_FEATURE_FP8_ROWS) also fills the
 * F32 scale views a_scales / b_scales, shaped as gqla_append_args gives
 * them. The backend waits for its queued work before it returns, so the
 * rows are those of every earlier append. */
typedef struct gqla_read_args {
    int32_t layer;
    const int32_t* page_table; /* host; covers positions [0, start + count) */
    int64_t start;
    int64_t count;
    gqla_view a;
    gqla_view b;
    gqla_view a_scales; /* ABI 6: FP8_E4M3 caches only, else data NULL */
    gqla_view b_scales;
} gqla_read_args;

/* Status codes are gqla_status values. On failure a backend stores a message
 * retrievable with error_message(ctx) (or, for create, writes it to err). */
typedef struct gqla_backend_vtable {
    uint32_t abi_version; /* GQLA_BACKEND_ABI_VERSION */
    uint32_t struct_size; /* sizeof(gqla_backend_vtable) */
    const char* name;     /* "cpu", "cuda" */
    gqla_device_type device;

    /* Devices this backend can drive now (CUDA: visible GPUs). */
    gqla_status (*device_count)(int32_t* out);
    /* Fill a probe of device `index`; flags: GQLA_PROBE_*. */
    gqla_status (*probe)(int32_t index, uint32_t flags, gqla_probe_info* out);

    gqla_status (*create)(const gqla_backend_desc* desc, void** out_ctx, char* err, size_t err_len);
    void (*destroy)(void* ctx);
    const char* (*error_message)(void* ctx);

    /* Bytes the backend holds now: [0] always-kept cache, [1] expanded cache,
     * [2] weights, [3] workspace. */
    void (*memory_usage)(void* ctx, int64_t out_bytes[4]);

    /* GQLA: store W_UKV [G*(d_c+d_v), r] of a layer (converted/packed as the
     * backend likes). The previous weights stay valid if this fails. */
    gqla_status (*set_weights)(void* ctx, int32_t layer, const gqla_view* w);

    /* GQLA: allocate (enable=1) or free (enable=0) the expanded pools. Enable
     * fails with OUT_OF_MEMORY leaving nothing allocated. */
    gqla_status (*set_expanded)(void* ctx, int32_t enable);

    gqla_status (*append)(void* ctx, const gqla_append_args* args);
    gqla_status (*expand)(void* ctx, const gqla_expand_args* args);

    /* Copy pages src[i] -> dst[i] in every layer and every allocated pool
     * (copy-on-write of shared partial pages). */
    gqla_status (*copy_pages)(void* ctx, int32_t n, const int32_t* src, const int32_t* dst);

    /* Called by the core after a sequence's page table or lengths changed
     * (append, fork, copy-on-write, release with num_pages = 0). lengths has
     * num_layers entries. Backends that keep device-side tables (CUDA graph
     * replay) mirror them here; others may ignore it (NULL allowed). */
    gqla_status (*update_sequence)(void* ctx, int32_t slot, const int32_t* page_table, int32_t num_pages,
                                   const int64_t* lengths);

    gqla_status (*decode)(void* ctx, const gqla_decode_args* args);

    /* CUDA: stream for later work; CPU: ignore. NULL allowed. */
    gqla_status (*set_stream)(void* ctx, void* stream);
    /* Wait for queued work. NULL allowed (synchronous backend). */
    gqla_status (*synchronize)(void* ctx);

    /* Corrections of the roofline the cost model applies (see
     * gqla_backend_efficiency). The core pre-fills its defaults; the backend
     * overwrites what it has measured. NULL allowed (defaults used). */
    void (*efficiency)(const gqla_backend_desc* desc, gqla_backend_efficiency* inout);

    /* Copy cached rows out (gqla_read_args). */
    gqla_status (*read_rows)(void* ctx, const gqla_read_args* args);
    /* ABI 3: GQLA_BACKEND_FEATURE_* bits this backend supports. */
    uint32_t features;
} gqla_backend_vtable;

/* The CPU backend, linked into libgqla.so. */
const gqla_backend_vtable* gqla_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* GQLA_CORE_BACKEND_API_H */

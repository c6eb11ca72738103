/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gqla.h — the public C99 interface of gqla.
 *
 * gqla owns the KV cache of LLM decoding and computes decode attention for
 *   - GQA  (H query heads share G KV heads), and
 *   - GQLA (group-query latent attention; DeepSeek MLA is the case G == H)
 *     through two equivalent paths over the same weights: the per-group
 *     expanded "GQA path" and the latent "absorb path".
 *
 * Headers: this one (which includes gqla_probe.h, the hardware probe and
 * the cost model) is the whole C API; gqla.hpp wraps it for C++ (RAII
 * handles, exceptions).
 *
 * Conventions
 *   - Every function returns a gqla_status (GQLA_OK == 0) except the trivial
 *     getters gqla_version*, gqla_status_string, gqla_last_error_message.
 *   - On failure a human-readable message naming the offending argument and
 *     what was expected is stored thread-locally; read it with
 *     gqla_last_error_message(). A successful call does not clear it.
 *   - Structs passed by pointer start with `size_t struct_size`; set it to
 *     sizeof(the struct) (the *_default()/_init() functions do). Fields added
 *     later are appended, so old callers keep working.
 *   - Tensors cross the ABI as gqla_tensor (DLPack-like: data pointer, dtype,
 *     device, shape, strides in elements). Strides of outer dimensions may be
 *     arbitrary (>= 1 element apart, non-overlapping); the innermost
 *     dimension must be contiguous (stride 1).
 *   - Failed calls change nothing: a failed append, fork, weight upload or
 *     path switch leaves the session exactly as it was.
 *
 * Threading
 *   A session serializes its own calls with an internal lock, so one session
 *   may be used from several threads (calls then run one after another).
 *   Distinct sessions are independent and run concurrently. The library has
 *   no other global mutable state except the cached probe, which is computed
 *   once under a lock.
 *
 * Ownership
 *   The caller owns every buffer it passes; gqla copies what it keeps (cache
 *   entries, weights) before returning. Pointers returned by gqla (strings)
 *   are owned by gqla.
 */
#ifndef GQLA_GQLA_H
#define GQLA_GQLA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define GQLA_API
#elif defined(__GNUC__)
#define GQLA_API __attribute__((visibility("default")))
#else
#define GQLA_API
#endif

/* ---------------------------------------------------------------- version */

#define GQLA_VERSION_MAJOR 1 /* ABI major: also the SONAME suffix (libgqla.so.1) */
#define GQLA_VERSION_MINOR 2
#define GQLA_VERSION_PATCH 0
/* Encoded as major * 10000 + minor * 100 + patch. */
#define GQLA_VERSION (GQLA_VERSION_MAJOR * 10000 + GQLA_VERSION_MINOR * 100 + GQLA_VERSION_PATCH)

/* Runtime version of the loaded library, encoded like GQLA_VERSION. */
GQLA_API int32_t gqla_version(void);
/* Runtime version as "major.minor.patch"; static storage. */
GQLA_API const char* gqla_version_string(void);

/* ----------------------------------------------------------------- status */

/* Values are pinned: they never change meaning between releases. */
typedef enum gqla_status {
    GQLA_OK = 0,
    GQLA_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad shape/dtype/stride, out-of-range value */
    GQLA_ERR_OUT_OF_MEMORY = 2,    /* host or device allocation failed */
    GQLA_ERR_CAPACITY = 3,         /* the page pool (token capacity) or a sized limit is exhausted */
    GQLA_ERR_UNSUPPORTED = 4,      /* valid request this build/device cannot serve (e.g. CUDA absent) */
    GQLA_ERR_NOT_FOUND = 5,        /* unknown sequence id */
    GQLA_ERR_INVALID_STATE = 6,    /* call not allowed now (e.g. weights of the layer not set) */
    GQLA_ERR_BACKEND = 7,          /* the backend (oneDNN, CUDA driver, cuBLAS) reported a failure */
    GQLA_ERR_INTERNAL = 8          /* a bug in gqla; please report it */
} gqla_status;

/* Static English name of a status, e.g. "GQLA_ERR_CAPACITY: ...". Never NULL. */
GQLA_API const char* gqla_status_string(gqla_status status);
/* Message of the last failed gqla call on this thread ("" if none). The
 * pointer stays valid until the next gqla call on this thread. */
GQLA_API const char* gqla_last_error_message(void);

/* ------------------------------------------------------------------ enums */

typedef enum gqla_kind {
    GQLA_KIND_GQA = 1, /* plain grouped-query attention: cache K [G,D], V [G,Dv] per token */
    GQLA_KIND_GQLA = 2 /* group-query latent attention: cache c [r], kr [d_r] per token */
} gqla_kind;

typedef enum gqla_dtype {
    GQLA_DTYPE_F32 = 1,
    GQLA_DTYPE_F16 = 2,
    GQLA_DTYPE_BF16 = 3,
    /* Appended in 1.2. */
    /* 8-bit float (1 sign, 4 exponent, 3 mantissa bits, bias 7, max 448, no
     * inf): a cache_dtype only. The library quantizes appended rows itself
     * (round to nearest even, saturating at +-448) with f32 scales it
     * computes per token and stores beside the rows; docs/fp8-cache.md gives
     * the byte layout. Not an io_dtype. CPU: both kinds, every path. CUDA:
     * the GQA kind, and the GQLA latent at r = 512, d_r = 64 on Hopper for
     * the absorb path and GQA_TRANSIENT calls (a switch to the GQA path is
     * refused with GQLA_ERR_UNSUPPORTED). */
    GQLA_DTYPE_FP8_E4M3 = 4,
    /* 32-bit signed integers: the dtype of index tensors (sparse attention's
     * gqla_attention_args.indices) only. */
    GQLA_DTYPE_I32 = 5
} gqla_dtype;

typedef enum gqla_device_type {
    GQLA_DEVICE_AUTO = 0, /* CUDA if the CUDA module loads and a GPU is visible, else CPU */
    GQLA_DEVICE_CPU = 1,
    GQLA_DEVICE_CUDA = 2
} gqla_device_type;

typedef enum gqla_path {
    GQLA_PATH_AUTO = 0,   /* chosen by the roofline cost model (GQLA); GQA kind: always GQA */
    GQLA_PATH_GQA = 1,    /* per-group expanded cache (GQLA) / the only path (GQA kind) */
    GQLA_PATH_ABSORB = 2, /* MQA over the latent cache (GQLA only) */
    /* gqla_attention only (GQLA): the GQA form over latent rows up-projected
     * for this call into the session's workspace, whether or not the
     * expanded cache is kept. Never a session path. */
    GQLA_PATH_GQA_TRANSIENT = 3
} gqla_path;

/* ----------------------------------------------------------------- tensor */

#define GQLA_MAX_DIMS 6

typedef struct gqla_tensor {
    size_t struct_size; /* sizeof(gqla_tensor) */
    void* data;         /* first element; host or device memory per `device` */
    gqla_dtype dtype;
    gqla_device_type device; /* GQLA_DEVICE_CPU (host memory) or GQLA_DEVICE_CUDA */
    int32_t device_index;    /* CUDA ordinal; ignored for CPU */
    int32_t ndim;            /* 1..GQLA_MAX_DIMS */
    int64_t shape[GQLA_MAX_DIMS];
    int64_t strides[GQLA_MAX_DIMS]; /* in elements; innermost must be 1 */
} gqla_tensor;

/* Fill *t as a contiguous row-major host (GQLA_DEVICE_CPU) tensor.
 * Errors: INVALID_ARGUMENT (t or shape NULL, ndim outside 1..GQLA_MAX_DIMS,
 * a negative extent, unknown dtype). */
GQLA_API gqla_status gqla_tensor_init(gqla_tensor* t, void* data, gqla_dtype dtype, int32_t ndim, const int64_t* shape);

/* ----------------------------------------------------------------- config */

typedef struct gqla_config {
    size_t struct_size; /* sizeof(gqla_config) */
    gqla_kind kind;

    /* Heads. H % G == 0; query head h uses group h / (H / G). */
    int32_t num_heads;    /* H */
    int32_t num_kv_heads; /* G: KV heads (GQA) or latent groups (GQLA) */

    /* GQA kind dims */
    int32_t head_dim; /* D: query/key dim */
    /* value dim: GQA Dv (0 = head_dim); GQLA d_v (required) */
    int32_t value_dim;

    /* GQLA kind dims */
    int32_t latent_dim; /* r (kv_lora_rank) */
    int32_t nope_dim;   /* d_c (qk_nope_head_dim) */
    int32_t rope_dim;   /* d_r (qk_rope_head_dim) */

    int32_t num_layers; /* >= 1 */

    gqla_dtype cache_dtype; /* storage of the KV cache (default BF16) */
    gqla_dtype io_dtype;    /* dtype of k, v, c, kr, q and o tensors (default F32); lse is always F32 */
    float softmax_scale;    /* 0 = default: 1/sqrt(D) (GQA), 1/sqrt(d_c + d_r) (GQLA) */

    int32_t page_size;           /* tokens per page (default 64) */
    int64_t max_tokens;          /* token capacity of the page pool, summed over sequences
                                (0 = derive from memory_budget_bytes); the pool holds at
                                most 2^24 pages, so at most 2^24 * page_size tokens */
    int64_t memory_budget_bytes; /* used only when max_tokens == 0: bytes for the always-kept
                                    cache (latent for GQLA, K/V for GQA; with keep_latent = 0:
                                    kr plus the expanded rows) over all layers; a
                                    budget of more than 2^24 pages is refused */
    int32_t max_sequences;       /* live sequences at once (default 256) */
    int32_t max_batch;           /* largest decode batch (default 256) */
    int32_t max_q_len;           /* largest s_q / q_lens entry per call, up to 65536 (default 16) */

    gqla_device_type device; /* default AUTO */
    int32_t device_index;    /* CUDA ordinal (default 0) */
    gqla_path path;          /* initial path (default AUTO) */
    int32_t num_threads;     /* CPU threads (0 = one per available core) */

    /* Appended in 1.1 (a caller built against 1.0 leaves it at its default). */
    int64_t max_q_tokens; /* largest number of query tokens in one call (the sum of
                                its q_lens; B * s_q for uniform calls), up to 2^22. 0 =
                                max_batch * max_q_len (capped at 2^22). The workspaces scale with it (CUDA: about
                                2 * max_q_tokens * H * (r + d_r + d_v) * 4 bytes for GQLA),
                                so set it when max_q_len is large (prefill chunks). */

    /* Appended in 1.2: group sharding for tensor parallelism. The session
     * serves the groups [group_begin, group_begin + group_count) of the
     * layer described above and their query heads [group_begin * H/G,
     * (group_begin + group_count) * H/G): q, o and lse carry group_count *
     * H/G heads, GQA-kind k/v carry group_count KV heads, and
     * gqla_set_weights takes either the full W_UKV (its shard's rows are
     * used) or the shard's rows only. The outputs of the shards of a layer,
     * concatenated over heads in group order, are the full layer's output.
     * group_count 0 = all groups (no sharding; the default). */
    int32_t group_begin;
    int32_t group_count;
    /* GQLA only: 1 (default) keeps the latent c of every token, so both
     * paths work. 0 keeps only what the GQA path needs: appended latents are
     * expanded into this session's groups at append time and dropped, so a
     * token costs group_count * (d_c + d_v) + d_r elements instead of r +
     * d_r plus the expanded rows. Such a session runs the GQA path only
     * (config.path must be AUTO or GQA; switching to absorb, GQA_TRANSIENT
     * calls, sequence export and replacing the weights of a layer that holds
     * tokens are refused with INVALID_STATE). */
    int32_t keep_latent;
} gqla_config;

/* Fill *cfg with defaults for `kind` (dims left 0: the caller must set them).
 * Errors: INVALID_ARGUMENT (cfg NULL, unknown kind). */
GQLA_API gqla_status gqla_config_default(gqla_config* cfg, gqla_kind kind);

/* Check a config without creating anything. Errors: INVALID_ARGUMENT with a
 * message naming the first bad field (e.g. "config.num_kv_heads: 5 does not
 * divide num_heads 32"); UNSUPPORTED for a dtype/device this build lacks. */
GQLA_API gqla_status gqla_config_validate(const gqla_config* cfg);

/* ----------------------------------------------------------------- session */

typedef struct gqla_session gqla_session;
typedef int64_t gqla_seq_id;

/* Create a session: validates cfg, chooses the device, allocates the page
 * pool (and the expanded cache when the initial path is GQA for GQLA).
 * Errors: INVALID_ARGUMENT, UNSUPPORTED (CUDA requested but unavailable),
 * OUT_OF_MEMORY, BACKEND. On error *out is set to NULL. */
GQLA_API gqla_status gqla_session_create(const gqla_config* cfg, gqla_session** out);

/* Free everything the session owns. NULL-safe. Must not race other calls on
 * the same session. */
GQLA_API void gqla_session_destroy(gqla_session* session);

/* The session's resolved config: device, num_threads, softmax_scale,
 * max_tokens (rounded up to whole pages), path and group_count (0 -> G)
 * filled in. A shard's config is the full layer's, with its groups. */
GQLA_API gqla_status gqla_session_get_config(const gqla_session* session, gqla_config* out);

/* GQLA only: upload W_UKV of `layer`, shape [G*(d_c+d_v), r] row-major, laid
 * out like DeepSeek's kv_b_proj.weight (per group: d_c rows of W_UK then d_v
 * rows of W_UV). Any dtype, host or device memory. Copied (and packed) before
 * return. Required before append/decode of that layer. Replacing weights of a
 * layer that already has tokens re-expands its expanded cache when the GQA
 * path is selected.
 * Errors: INVALID_ARGUMENT (layer range, shape, strides, NULL), INVALID_STATE
 * (GQA-kind session), OUT_OF_MEMORY, BACKEND. */
GQLA_API gqla_status gqla_set_weights(gqla_session* session, int32_t layer, const gqla_tensor* w_ukv);

/* ------------------------------------------------------------- sequences */

/* New empty sequence; ids are never reused within a session.
 * Errors: INVALID_ARGUMENT (out NULL), CAPACITY (max_sequences live). */
GQLA_API gqla_status gqla_sequence_add(gqla_session* session, gqla_seq_id* out);

/* Release a sequence and return its pages (shared pages when the last user
 * goes). Errors: NOT_FOUND. */
GQLA_API gqla_status gqla_sequence_release(gqla_session* session, gqla_seq_id seq);

/* New sequence sharing all cached tokens of `parent` (all layers) without
 * copying: pages are shared and copied on write when either side appends
 * into a shared partial page. Errors: NOT_FOUND, CAPACITY, INVALID_ARGUMENT. */
GQLA_API gqla_status gqla_sequence_fork(gqla_session* session, gqla_seq_id parent, gqla_seq_id* child);

/* Cached tokens of `seq` in `layer`. Errors: NOT_FOUND, INVALID_ARGUMENT. */
GQLA_API gqla_status gqla_sequence_length(const gqla_session* session, gqla_seq_id seq, int32_t layer,
                                          int64_t* out_length);

/* Serialize one sequence's cache so that it can be restored later, in this
 * or another session of the same kind, heads, dims, layer count and cache
 * dtype, on any device (CPU <-> CUDA) and page size: swap a sequence out to
 * host memory, keep a prompt's cache across processes, move it between
 * devices. The buffer holds every layer's cached tokens of the always-kept
 * cache (GQA: K and V; GQLA: latent c and rope key kr) in the cache dtype,
 * little-endian (fp8_e4m3: the e4m3 codes with their f32 scales, kr in
 * bf16), after a versioned header, and ends with a checksum; the
 * exact layout is documented in docs/sequence-format.md. A shard's buffer
 * (config.group_count < G) holds its groups only and imports only into a
 * session serving the same groups.
 * Call with buffer NULL and capacity 0 to learn the size in *needed; a
 * capacity below it is refused (CAPACITY) with *needed set. On a CUDA
 * session the call waits for the session's queued work (not allowed while
 * the session's stream is being captured into a graph).
 * Errors: INVALID_ARGUMENT (needed NULL, buffer NULL with capacity > 0),
 * NOT_FOUND, CAPACITY, UNSUPPORTED, BACKEND. */
GQLA_API gqla_status gqla_sequence_export(const gqla_session* session, gqla_seq_id seq, void* buffer, size_t capacity,
                                          size_t* needed);

/* Restore a sequence exported by gqla_sequence_export as a new sequence
 * (*out): its stored cache elements are identical to the exported ones, and
 * the expanded cache of the GQLA GQA path is rebuilt when that path is on.
 * GQLA layers that hold tokens need their weights set. A buffer that is
 * truncated, corrupted (checksum), of another format version or from a
 * session of another shape is refused with a message saying which; a
 * refused import leaves the session unchanged. All-or-nothing.
 * Errors: INVALID_ARGUMENT, INVALID_STATE (weights), CAPACITY (pages or
 * sequences), OUT_OF_MEMORY, BACKEND. */
GQLA_API gqla_status gqla_sequence_import(gqla_session* session, const void* buffer, size_t size, gqla_seq_id* out);

/* ----------------------------------------------------------------- append */

/* Append n >= 1 tokens of one layer to one sequence.
 *   GQA : a = k  [n, G, D],  b = v  [n, G, Dv]
 *   GQLA: a = c  [n, r],     b = kr [n, d_r]   (RoPE already applied to kr)
 * Tensors have dtype == config.io_dtype, host or (CUDA sessions) device memory.
 * All-or-nothing. Errors: INVALID_ARGUMENT, NOT_FOUND, INVALID_STATE (GQLA
 * weights of the layer not set), CAPACITY (pool exhausted: nothing appended),
 * BACKEND. */
GQLA_API gqla_status gqla_append(gqla_session* session, int32_t layer, gqla_seq_id seq, const gqla_tensor* a,
                                 const gqla_tensor* b);

/* Append to several sequences at once: sequence i receives counts[i] >= 0
 * consecutive rows of a/b (rows packed in the order of seqs; total rows =
 * sum(counts)). Shapes as gqla_append with n = sum(counts). A sequence id may
 * not repeat. All-or-nothing over the whole call. */
GQLA_API gqla_status gqla_append_batch(gqla_session* session, int32_t layer, int32_t num_seqs, const gqla_seq_id* seqs,
                                       const int64_t* counts, const gqla_tensor* a, const gqla_tensor* b);

/* ----------------------------------------------------------------- decode */

/* Decode attention of one layer for a batch of B sequences (lengths may
 * differ), s_q >= 1 query tokens each. The queries are the LAST s_q tokens of
 * each sequence: query i attends to cache positions j <= L - s_q + i.
 *   q   [B, s_q, H, Dq]   Dq = D (GQA) or d_c + d_r (GQLA, nope part first)
 *   o   [B, s_q, H, Dv]   written; Dv = value dim
 *   lse [B, s_q, H] f32   optional (NULL): natural-log log-sum-exp of the
 *                         scaled scores, for merging partial attentions.
 * q and o have dtype config.io_dtype. A sequence may appear once per call.
 * On a CUDA session the work is queued on the session's stream with no host
 * synchronization and no allocation when q/o/lse are device tensors.
 * Errors: INVALID_ARGUMENT (shapes, dtypes, strides, batch > max_batch,
 * s_q > max_q_len, s_q > length of a sequence), NOT_FOUND, INVALID_STATE
 * (weights missing), BACKEND. */
GQLA_API gqla_status gqla_decode(gqla_session* session, int32_t layer, int32_t batch, const gqla_seq_id* seqs,
                                 const gqla_tensor* q, gqla_tensor* o, gqla_tensor* lse);

/* ---------------------------------------------------- attention (general) */

/* Arguments of gqla_attention. Initialize with gqla_attention_args_default;
 * later versions append fields (struct_size tells which are present). */
typedef struct gqla_attention_args {
    size_t struct_size; /* sizeof(gqla_attention_args) */
    int32_t layer;
    int32_t batch;           /* B sequences, 1..max_batch, each at most once */
    const gqla_seq_id* seqs; /* [B] */
    /* Query tokens per sequence (host memory, [B]): sequence i of length L
     * has q_lens[i] (1..min(L, max_q_len)) queries, its LAST q_lens[i]
     * tokens; query k attends to positions j <= L - q_lens[i] + k. NULL: every
     * sequence has s_q queries (s_q from q's shape). */
    const int32_t* q_lens;
    /* q_lens NULL: q [B, s_q, H, Dq], o [B, s_q, H, Dv], lse [B, s_q, H].
     * q_lens set: rows packed in sequence order, q [N, H, Dq], o [N, H, Dv],
     * lse [N, H] with N = sum(q_lens) <= config.max_q_tokens.
     * Dtypes, devices and strides as for gqla_decode; lse may be NULL. */
    const gqla_tensor* q;
    gqla_tensor* o;
    gqla_tensor* lse;
    /* Path of THIS call (the session's selected path and its kept caches do
     * not change, except as gqla_decode would under a session path of AUTO):
     *   AUTO          the fastest form the cost model predicts among those
     *                 available now: absorb, the GQA path over the kept
     *                 expanded cache (when kept), and GQA_TRANSIENT;
     *   GQA           over the kept expanded cache when it is kept, else
     *                 GQA_TRANSIENT;
     *   ABSORB        the absorb path;
     *   GQA_TRANSIENT the GQA form over latent rows up-projected for this
     *                 call (prefill chunks: about 3x fewer FLOPs than absorb
     *                 for DeepSeek-V3 shapes, no kept expanded cache needed).
     * GQA-kind sessions accept AUTO and GQA. Default AUTO. */
    gqla_path path;
    /* Optional output (NULL = not wanted): the form the call ran on, GQA,
     * ABSORB or GQA_TRANSIENT (GQA for GQA-kind sessions). */
    gqla_path* path_taken;

    /* Appended in 1.2: sparse (top-k) attention. NULL = dense. Otherwise an
     * I32 tensor of cache positions each query attends to, host or (CUDA
     * sessions) device memory: [N, K] with one row per query row of q (N =
     * B * s_q for uniform calls, sum(q_lens) for ragged ones), or [B, s_q,
     * K] for uniform calls; innermost stride 1. Every head of a query uses
     * its row. An entry of -1, a position the query may not see (j > L - n
     * + i for the i-th of the n queries of a sequence of length L) and a
     * position outside [0, L) are skipped (never read). A position listed
     * twice counts twice (as two equal keys would). A query whose row lists
     * no visible position gets o = 0 and lse = -inf. Over an fp8_e4m3
     * cache: every form a session's backend takes that cache for (see
     * GQLA_DTYPE_FP8_E4M3). */
    const gqla_tensor* indices;
} gqla_attention_args;

/* Fill *args with defaults: struct_size, path AUTO, everything else 0/NULL.
 * Errors: INVALID_ARGUMENT (args NULL). */
GQLA_API gqla_status gqla_attention_args_default(gqla_attention_args* args);

/* Attention of one layer for a batch of sequences with any mix of query
 * counts (decoding sequences with 1 query beside prefill chunks of
 * thousands), on the path `args->path` asks for. gqla_decode(s, l, B, seqs,
 * q, o, lse) is this call with uniform queries on the session's path.
 * Numerics, the non-finite policy, streams and graph capture as for
 * gqla_decode. The GQA_TRANSIENT form needs scratch for one layer's
 * expanded rows of the call's sequences: the CPU backend works tile by tile
 * in its fixed workspace; the CUDA backend keeps one layer of expanded pages
 * (pages_total * page_size * G * (d_c + d_v) elements of the cache dtype),
 * allocated by the first call that uses the form (capture a CUDA graph of
 * such a call only after one uncaptured call; a captured GQA_TRANSIENT call
 * expands the token counts its sequences had at capture, so replay it only
 * while their lengths are unchanged) and reported in
 * gqla_stats.workspace_bytes.
 * Errors: INVALID_ARGUMENT (shapes, dtypes, strides, q_lens, batch, path),
 * NOT_FOUND, INVALID_STATE (weights missing), OUT_OF_MEMORY (transient
 * workspace), BACKEND. A failed call changes nothing. */
GQLA_API gqla_status gqla_attention(gqla_session* session, const gqla_attention_args* args);

/* Non-finite values. The same on every device, path, kernel and cache dtype:
 * - A position a query may not see (j > L - s_q + i, a slot of a page past
 *   the sequence's length) contributes nothing to it, not even a NaN: a NaN
 *   or inf stored there never reaches that query's o or lse.
 * - A NaN or inf at a position a query sees reaches its output: a NaN in q
 *   makes that head's o and lse NaN; a NaN in a visible key (k; the latent c
 *   or kr for GQLA) makes the o and lse of every head that reads it NaN; a
 *   NaN or inf in a visible value (v; the latent c for GQLA) makes the o
 *   elements it feeds non-finite. Scores follow IEEE softmax arithmetic: a
 *   +inf score makes the head's o and lse NaN, a -inf score weighs zero.
 *   GQA kind: a KV head's entries feed the H/G query heads of its group;
 *   GQLA: c and kr feed every head.
 * - Appending converts to the cache dtype with IEEE rounding and no
 *   saturation: into an f16 cache, values beyond its range (|x| >= 65520)
 *   are stored as +-inf and then follow the rules above.
 * Nothing is checked or reported: decode still returns GQLA_OK. */

/* ------------------------------------------------------------------- path */

/* Select the decode path. GQA: expand the latent cache of every live
 * sequence and layer into the per-group cache (needs weights of every layer
 * that holds tokens). ABSORB: free the expanded cache. AUTO: let the cost
 * model choose (now, and again when decode shapes change enough).
 * GQA-kind sessions accept AUTO and GQA (no-ops) and reject ABSORB with
 * INVALID_ARGUMENT. All-or-nothing. Errors: INVALID_ARGUMENT, INVALID_STATE,
 * OUT_OF_MEMORY, BACKEND. */
GQLA_API gqla_status gqla_select_path(gqla_session* session, gqla_path path);

/* The path decode uses now (never AUTO) and, optionally, what was requested
 * (requested may be NULL). */
GQLA_API gqla_status gqla_get_path(const gqla_session* session, gqla_path* active, gqla_path* requested);

/* ------------------------------------------------------------------ stats */

typedef struct gqla_stats {
    size_t struct_size;      /* sizeof(gqla_stats) */
    gqla_device_type device; /* device the session runs on */
    gqla_path path;          /* active path */
    int32_t page_size;
    int64_t pages_total;
    int64_t pages_used;
    int64_t pages_free;
    int64_t sequences;           /* live sequences */
    int64_t tokens_cached;       /* sum over live sequences of their longest layer */
    int64_t token_capacity_left; /* pages_free * page_size */
    int64_t latent_bytes;        /* bytes of the always-kept cache (K/V or latent + kr), all layers */
    int64_t expanded_bytes;      /* bytes of the expanded cache now allocated (0 on absorb) */
    int64_t weight_bytes;        /* bytes of stored weights */
    int64_t workspace_bytes;     /* scratch owned by the session */
    /* Appended in 1.2: bytes one token costs in one layer, scales included:
     * the always-kept cache (GQA: K and V; GQLA: latent c (when kept) and
     * kr) and the expanded cache of the GQLA GQA path (its size per token
     * whether or not it is allocated now; 0 for the GQA kind). */
    int64_t kept_bytes_per_token;
    int64_t expanded_bytes_per_token;
} gqla_stats;

GQLA_API gqla_status gqla_session_stats(const gqla_session* session, gqla_stats* out);

/* ----------------------------------------------------------------- stream */

/* CUDA sessions: queue all later work on `stream` (a cudaStream_t; NULL = the
 * legacy default stream), ordered after the work the session queued on its
 * previous stream (appends still copying, for instance): `stream` waits for
 * it on the GPU, or, where `stream` is being captured into a CUDA graph, this
 * call waits for it on the host. CPU sessions accept and ignore it.
 * Errors: INVALID_ARGUMENT, BACKEND (the session keeps its stream). */
GQLA_API gqla_status gqla_session_set_stream(gqla_session* session, void* stream);

/* Block until all work queued by this session has finished (CUDA: the
 * session's stream; CPU: returns at once since CPU calls are synchronous).
 * Errors: INVALID_ARGUMENT, BACKEND. */
GQLA_API gqla_status gqla_session_synchronize(gqla_session* session);

/* ------------------------------------------------------------------ merge */

/* Merge partial attention states of the same queries over disjoint sets of
 * positions (a sequence split in parts, a shared prefix attended apart from
 * each sequence's suffix, context shards) into the attention over their
 * union. For every row (leading index: query token x head) and parts i:
 *   lse = log(sum_i exp(lse_i)),   o = sum_i exp(lse_i - lse) * o_i
 * computed in double precision, so the result is exact up to its final
 * rounding to out's dtype.
 *   outputs  num_states tensors [rows..., Dv] (ndim 2..GQLA_MAX_DIMS, equal
 *            shapes), f32/f16/bf16, e.g. o of gqla_decode [B, s_q, H, Dv]
 *   lses     num_states f32 tensors [rows...] (the leading shape of outputs)
 *   out      [rows..., Dv], any of the three dtypes; may be outputs[0] itself
 *            (same data and strides) but may not partly overlap an input
 *   out_lse  f32 [rows...], optional (NULL)
 * A part with lse = -inf attended to no position: it is skipped (its output
 * is never read into the result, even if NaN); a row whose parts are all
 * empty gets o = 0 and lse = -inf. A NaN or +inf lse makes its row NaN.
 * Tensors must be in host memory in this version (device tensors:
 * UNSUPPORTED). Errors: INVALID_ARGUMENT (shapes, dtypes, strides, NULL),
 * UNSUPPORTED. */
GQLA_API gqla_status gqla_merge_attention_states(int32_t num_states, const gqla_tensor* outputs,
                                                 const gqla_tensor* lses, gqla_tensor* out, gqla_tensor* out_lse);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The hardware probe and the cost model (gqla_probe, gqla_predict_cost and
 * their structs) are declared in their own header, part of this API: */
#include "gqla_probe.h"

#endif /* GQLA_GQLA_H */

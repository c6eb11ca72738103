// SPDX-License-Identifier: Apache-2.0
// Session lifetime: everything decode needs is allocated here (pools, tables,
// workspace) so that decode itself never allocates.
#include "session.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "attention_kernels.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"
#include "latent_wgmma.hpp"
#include "prefill_wgmma.hpp"
#include "session_ops.hpp"
#include "tuning.hpp"

namespace gqla::cuda {

namespace {

constexpr size_t kCublasWorkspaceBytes = 32u << 20;
constexpr int kMinSplitsAtBatch1 = 64;
constexpr int kSplitsAtFullBatch = 4;
constexpr int64_t kMaxPartialBytes = int64_t(256) << 20;
// Query tokens per sequence up to which a one-sequence call is planned with
// kMinSplitsAtBatch1 splits whatever the partials' budget (the default max_q_len).
constexpr int64_t kFewQueries = 16;

size_t bytes_of(int64_t elems, size_t elem) { return static_cast<size_t>(elems) * elem; }

}  // namespace

int Session::weight_copies() const { return head_weights ? desc.num_heads / desc.num_kv_heads : 1; }
int Session::heads_per_weight_block() const { return desc.num_heads / desc.num_kv_heads / weight_copies(); }

PoolFormat cache_format(const Session& s) {
    const bool fp8 = s.desc.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    return PoolFormat{s.desc.cache_dtype, fp8 ? 1 : 0};
}

PoolFormat latent_format(const Session& s) {
    const bool fp8 = s.desc.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    return PoolFormat{s.desc.cache_dtype, fp8 ? (s.desc.latent_dim + kFp8LatentBlock - 1) / kFp8LatentBlock : 0};
}

PoolFormat rope_format(const Session& s) {
    const bool fp8 = s.desc.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    return PoolFormat{fp8 ? GQLA_DTYPE_BF16 : s.desc.cache_dtype, 0};
}

PoolFormat transient_format(const Session& s) { return PoolFormat{projection_dtype(s), 0}; }

PoolGeometry pool_geometry(const Session& s, int64_t groups, int32_t dim, PoolFormat format) {
    PoolGeometry g{};
    g.row_stride = dim;
    g.group_stride = static_cast<int64_t>(s.desc.page_size) * dim;
    g.page_stride = groups * g.group_stride;
    g.elem_bytes = dtype_size(format.dtype);
    if (format.dtype == GQLA_DTYPE_FP8_E4M3) {
        auto round64 = [](int64_t n) { return (n + 63) / 64 * 64; };
        g.scale_offset = round64(g.page_stride);
        g.page_stride = round64(g.scale_offset + 4 * groups * s.desc.page_size * format.scale_cols);
    }
    g.layer_stride = s.desc.num_pages * g.page_stride;
    return g;
}

PoolView pool_view(const Session& s, const DeviceBuffer& pool, int layer, int64_t groups, int32_t dim,
                   bool shared_by_groups, PoolFormat format) {
    PoolGeometry g = pool_geometry(s, groups, dim, format);
    PoolView v{};
    v.base = g.layer_base(pool.get<unsigned char>(), layer);
    v.page_stride = g.page_stride;
    v.group_stride = shared_by_groups ? 0 : g.group_stride;
    v.row_stride = g.row_stride;
    v.dim = dim;
    v.scale_offset = g.scale_offset;
    return v;
}

size_t pool_bytes(const Session& s, int64_t groups, int32_t dim, PoolFormat f) {
    const PoolGeometry g = pool_geometry(s, groups, dim, f);
    return static_cast<size_t>(s.desc.num_layers) * g.layer_bytes();
}

std::vector<NarrowTmaMaps> narrow_maps_for(const Session& s, const DeviceBuffer& keys, const DeviceBuffer& values,
                                           bool single_layer) {
    std::vector<NarrowTmaMaps> maps;
    if (!s.narrow_tma || !keys.get() || !values.get()) return maps;
    const gqla_backend_desc& d = s.desc;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    for (int layer = 0; layer < d.num_layers; ++layer) {
        const int kv_layer = single_layer ? 0 : layer;
        const PoolView k1 = pool_view(s, keys, kv_layer, d.num_kv_heads, gqla ? d.nope_dim : d.head_dim, false);
        const PoolView k2 = gqla ? pool_view(s, s.pool_b, layer, 1, d.rope_dim, true, rope_format(s)) : PoolView{};
        const PoolView v = pool_view(s, values, kv_layer, d.num_kv_heads, d.value_dim, false);
        maps.push_back(narrow_tma_maps(d.cache_dtype, k1, k2, v, d.page_size, d.num_pages));
    }
    return maps;
}

int64_t query_token_capacity(const gqla_backend_desc& d) {
    return d.max_q_tokens > 0 ? d.max_q_tokens : static_cast<int64_t>(d.max_batch) * d.max_q_len;
}

void bind_device(const Session& s) { check_cuda(cudaSetDevice(s.device), "cudaSetDevice"); }

void* acquire_pinned(Session& s, size_t bytes) {
    check_cuda(cudaEventSynchronize(s.pinned_free), "cudaEventSynchronize(staging)");
    s.pinned.ensure(bytes, "host staging");
    return s.pinned.get();
}

void release_pinned(Session& s) { check_cuda(cudaEventRecord(s.pinned_free, s.stream), "cudaEventRecord(staging)"); }

void switch_stream(Session& s, cudaStream_t next) {
    if (next == s.stream) return;
    // Work queued on a stream being captured went into a graph, not onto the
    // GPU: there is nothing to wait for.
    cudaStreamCaptureStatus old_status = cudaStreamCaptureStatusNone, next_status = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(s.stream, &old_status), "cudaStreamIsCapturing(current stream)");
    if (old_status == cudaStreamCaptureStatusNone) {
        check_cuda(cudaStreamIsCapturing(next, &next_status), "cudaStreamIsCapturing(stream)");
        check_cuda(cudaEventRecord(s.stream_handoff, s.stream), "cudaEventRecord(stream switch)");
        if (next_status == cudaStreamCaptureStatusNone) {
            check_cuda(cudaStreamWaitEvent(next, s.stream_handoff, 0), "cudaStreamWaitEvent(stream switch)");
        } else {
            // A stream being captured cannot wait on work outside its graph:
            // the host waits instead. A capture in global mode may refuse that
            // wait as a potentially unsafe call, but the event is not part of
            // any capture, so this thread relaxes the mode for it.
            cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
            check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
            const cudaError_t waited = cudaEventSynchronize(s.stream_handoff);
            cudaThreadExchangeStreamCaptureMode(&mode);
            check_cuda(waited, "cudaEventSynchronize(stream switch)");
        }
    }
    check_cublas(cublasSetStream(s.cublas, next), "cublasSetStream");
    s.stream = next;
}

namespace {
void init_session(Session* s, const gqla_backend_desc& d);
}

Session* create_session(const gqla_backend_desc& d) {
    auto s = std::make_unique<Session>();
    try {
        init_session(s.get(), d);
    } catch (...) {
        destroy_session(s.release());  // streams and handles too, not just buffers
        throw;
    }
    return s.release();
}

namespace {
// Everything a decode call's query rows need, sized for query_token_capacity
// tokens x H heads: host-tensor staging, split-KV partials and the absorb
// path's projection workspaces.
struct WorkspaceBuffer {
    DeviceBuffer Session::*buffer;
    size_t bytes;
    const char* what;
};
struct DecodeWorkspace {
    int64_t rows = 0;       // Session::max_rows
    int64_t part_rows = 0;  // Session::part_rows
    WorkspaceBuffer buffers[9];
    int count = 0;
    size_t total_bytes() const {
        size_t b = 0;
        for (int i = 0; i < count; ++i) b += buffers[i].bytes;
        return b;
    }
};

DecodeWorkspace plan_decode_workspace(const Session& s) {
    const gqla_backend_desc& d = s.desc;
    DecodeWorkspace w;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    const int64_t H = d.num_heads, tokens = query_token_capacity(d);
    const int64_t dq = gqla ? d.nope_dim + d.rope_dim : d.head_dim;
    const int64_t dv = d.value_dim;
    const int64_t att_dv = gqla ? std::max<int64_t>(dv, d.latent_dim) : dv;
    const size_t io = dtype_size(d.io_dtype);
    w.rows = tokens * H;
    const int64_t R = w.rows;
    // Partials: enough for kMinSplitsAtBatch1 splits of a one-sequence decode
    // (of up to kFewQueries queries, more where the kMaxPartialBytes budget
    // allows: more splits only pay where a call's rows leave SMs idle, and a
    // prefill-sized max_q_len would otherwise ask for 64 splits of thousands
    // of rows), or kSplitsAtFullBatch splits of a full call (a batch of a few
    // long sequences can leave SMs idle: absorb over 32 heads at batch 64 is
    // 64 CTAs on 132 SMs), the latter capped at kMaxPartialBytes.
    const int64_t row_bytes = att_dv * 4 + 4;
    const int64_t full_batch_rows =
        std::max<int64_t>(R, std::min<int64_t>(kSplitsAtFullBatch * R, kMaxPartialBytes / row_bytes));
    const int64_t split_queries =
        std::min<int64_t>({int64_t(d.max_q_len), tokens,
                           std::max<int64_t>(kFewQueries, kMaxPartialBytes / (row_bytes * kMinSplitsAtBatch1 * H))});
    w.part_rows = std::max<int64_t>(full_batch_rows, int64_t(kMinSplitsAtBatch1) * split_queries * H);

    auto add = [&w](DeviceBuffer Session::*buffer, size_t bytes, const char* what) {
        w.buffers[w.count++] = WorkspaceBuffer{buffer, bytes, what};
    };
    add(&Session::q_stage, bytes_of(R * dq, io), "decode query staging");
    add(&Session::o_stage, bytes_of(R * dv, io), "decode output staging");
    add(&Session::lse_stage, bytes_of(R, 4), "decode lse staging");
    add(&Session::part_o, bytes_of(w.part_rows * att_dv, 4), "split-KV partial outputs");
    add(&Session::part_lse2, bytes_of(w.part_rows, 4), "split-KV partial lse");
    if (gqla) {
        // The projections' operands (queries, latent queries and outputs)
        // are in their dtype; their products land in f32.
        const size_t work = dtype_size(projection_dtype(s));
        add(&Session::q_nope, bytes_of(R * d.nope_dim, work), "absorb query (nope)");
        add(&Session::q_att, bytes_of(R * (d.latent_dim + d.rope_dim), work), "absorb latent query");
        add(&Session::o_att, bytes_of(R * d.latent_dim, work), "absorb latent output");
        add(&Session::o_proj, bytes_of(R * dv, 4), "absorb projected output");
    }
    return w;
}

void allocate_decode_workspace(Session* s) {
    const gqla_backend_desc& d = s->desc;
    const DecodeWorkspace w = plan_decode_workspace(*s);
    s->max_rows = w.rows;
    s->part_rows = w.part_rows;
    try {
        for (int i = 0; i < w.count; ++i) (s->*w.buffers[i].buffer).allocate(w.buffers[i].bytes, w.buffers[i].what);
    } catch (const BackendError& e) {
        if (e.status() != GQLA_ERR_OUT_OF_MEMORY) throw;
        // Whoever raised max_q_len for prefill chunks must learn that these
        // buffers scale with the query tokens of one call, and which setting
        // bounds them.
        const int64_t tokens = query_token_capacity(d);
        throw BackendError(
            e.status(),
            "CUDA backend: the decode workspace for config.max_q_tokens = " + std::to_string(tokens) +
                (d.max_q_tokens > 0 ? "" : " (0: max_batch * max_q_len)") + " query tokens x " +
                std::to_string(d.num_heads) + " heads asks for " + std::to_string(w.total_bytes()) +
                " bytes, more than the device holds; set config.max_q_tokens to the most query tokens one call "
                "carries (the sum of its q_lens) [" +
                e.what() + "]");
    }
}

// What the CUDA kernels read from an 8-bit (e4m3) cache today: the GQA
// kind, through the narrow kernel (narrow_kernel_reads_fp8) or, for every
// other shape taken here, the per-warp kernel (warp_kernel_reads_fp8); the
// GQLA kind's latent (r = 512, d_r = 64, kept) through the sm_90a latent
// kernel on the absorb path and its GQA_TRANSIENT form (bf16 rows), on a
// device of compute capability 9.0. latent_kernel: that kernel serves this
// device (init_session).
void check_fp8_support(const gqla_backend_desc& d, bool latent_kernel) {
    if (d.cache_dtype != GQLA_DTYPE_FP8_E4M3) return;
    if (d.kind != GQLA_KIND_GQA) {
        if (!d.keep_latent)
            throw BackendError(GQLA_ERR_UNSUPPORTED,
                               "config.keep_latent: 0 with cache_dtype fp8_e4m3 is not served by the CUDA backend (its "
                               "8-bit kernels read the latent; the CPU backend takes it); keep the latent or use bf16");
        if (d.latent_dim != kLatentKernelDim || d.rope_dim != kLatentKernelRopeDim)
            throw BackendError(GQLA_ERR_UNSUPPORTED,
                               "config.latent_dim / rope_dim: an fp8_e4m3 GQLA cache on the CUDA backend needs " +
                                   std::to_string(kLatentKernelDim) + " / " + std::to_string(kLatentKernelRopeDim) +
                                   " (the latent kernel's shape); got " + std::to_string(d.latent_dim) + " / " +
                                   std::to_string(d.rope_dim));
        if (!latent_kernel)
            throw BackendError(GQLA_ERR_UNSUPPORTED,
                               "config.cache_dtype: an fp8_e4m3 GQLA cache on the CUDA backend needs the sm_90a latent "
                               "kernel (a device of compute capability 9.0, GQLA_CUDA_LATENT_WGMMA not 0)");
        return;
    }
    const int32_t dv = d.value_dim > 0 ? d.value_dim : d.head_dim;
    if (d.head_dim % 8 != 0 || dv % 8 != 0 || dv > kWarpKernelMaxValueDim)
        throw BackendError(GQLA_ERR_UNSUPPORTED,
                           "config.head_dim / value_dim: an fp8_e4m3 cache on the CUDA backend needs multiples of 8, "
                           "value_dim at most " +
                               std::to_string(kWarpKernelMaxValueDim) + "; got " + std::to_string(d.head_dim) + " / " +
                               std::to_string(dv));
}

void init_session(Session* s, const gqla_backend_desc& d) {
    s->desc = d;
    s->device = d.device_index;
    const Tuning t = read_tuning();
    s->trace = t.trace;
    if (s->trace) print_tuning(t, stderr);
    s->use_warp_kernel = t.warp_kernel;
    s->use_narrow_kernel = t.narrow_kernel;
    s->narrow_shared = t.narrow_shared;
    s->narrow_swizzle = t.narrow_swizzle;
    s->narrow_wide = t.narrow_wide;
    s->pinned_stages = t.pinned_stages;
    s->narrow_max_rows = t.narrow_max_rows;
    s->max_splits = t.max_splits;
    bind_device(*s);
    check_cuda(cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, s->device),
               "cudaDeviceGetAttribute(SM count)");
    check_cuda(cudaDeviceGetAttribute(&s->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, s->device),
               "cudaDeviceGetAttribute(shared memory)");
    int cc_major = 0, cc_minor = 0;
    check_cuda(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, s->device), "compute capability");
    check_cuda(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, s->device), "compute capability");
    prepare_attention_kernels(s->smem_optin);
    prepare_simt_kernel(s->smem_optin);
    prepare_warp_kernels(s->smem_optin);
    prepare_narrow_kernels(s->smem_optin, cc_major >= 9);
    s->dependent_launch = cc_major >= 9 && t.pdl;
    s->use_cluster_merge = cc_major >= 9 && t.cluster_merge;
    // 8-bit pools are copied slot by slot (no TMA boxes).
    s->narrow_tma =
        cc_major >= 9 && d.cache_dtype != GQLA_DTYPE_F32 && d.cache_dtype != GQLA_DTYPE_FP8_E4M3 && t.narrow_tma;
    // The bf16 workspace an 8-bit cache's prefill pages are widened into
    // (fp8_widening.hpp) is loaded by TMA boxes like a bf16 cache.
    s->widened_tma = cc_major >= 9 && d.cache_dtype == GQLA_DTYPE_FP8_E4M3 && t.narrow_tma;
    s->use_narrow_fixed_dims = t.narrow_fixed_dims;
    s->use_latent_wgmma = t.latent_wgmma && latent_wgmma_available(cc_major, cc_minor) &&
                          s->smem_optin >= latent_wgmma_smem_bytes(d.cache_dtype, kLatentRows) &&
                          s->smem_optin >= latent_wgmma_smem_bytes(d.cache_dtype, kLatentRowsTransposed);
    check_fp8_support(d, s->use_latent_wgmma);
    if (s->use_latent_wgmma) prepare_latent_wgmma_kernel();
    s->use_prefill_wgmma = prefill_wgmma_serves(t, s->device);
    s->prefill_turns = t.prefill_turns;
    s->fp8_widening = t.fp8_widen;
    if (s->use_prefill_wgmma) prepare_prefill_wgmma_kernels();
    s->latent_transposed = t.latent_transposed;
    s->use_query_in_place = t.query_in_place;
    s->latent_dependent_launch = s->dependent_launch && t.latent_pdl;
    if (s->use_latent_wgmma && s->use_cluster_merge)
        for (int n = 2; n <= kMaxLatentClusterSplits; ++n)
            s->latent_clusters[static_cast<size_t>(n)] = latent_wgmma_max_active_clusters(d.cache_dtype, n);

    // Work goes to the legacy default stream until set_stream: it orders with
    // the caller's default-stream work (e.g. a framework producing q) for free.
    s->stream = nullptr;
    check_cuda(cudaEventCreateWithFlags(&s->pinned_free, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&s->stream_handoff, cudaEventDisableTiming), "cudaEventCreate");
    check_cublas(cublasCreate(&s->cublas), "cublasCreate");
    s->cublas_workspace.allocate(kCublasWorkspaceBytes, "cuBLAS workspace");
    check_cublas(cublasSetWorkspace(s->cublas, s->cublas_workspace.get(), kCublasWorkspaceBytes), "cublasSetWorkspace");
    check_cublas(cublasSetStream(s->cublas, s->stream), "cublasSetStream");
    s->gemms.init(s->cublas, t.cublaslt, s->cublas_workspace.get(), kCublasWorkspaceBytes);

    const int64_t L = d.num_layers, G = d.num_kv_heads, H = d.num_heads;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    if (!gqla) {
        s->pool_a.allocate(pool_bytes(*s, G, d.head_dim, cache_format(*s)), "K cache");
        s->pool_b.allocate(pool_bytes(*s, G, d.value_dim, cache_format(*s)), "V cache");
        s->narrow_maps = narrow_maps_for(*s, s->pool_a, s->pool_b);
    } else {
        // keep_latent = 0: no latent pool; the expanded pools exist from
        // here on (allocated below) and every decode is on the GQA path.
        if (d.keep_latent) s->pool_a.allocate(pool_bytes(*s, 1, d.latent_dim, latent_format(*s)), "latent cache");
        s->pool_b.allocate(pool_bytes(*s, 1, d.rope_dim, rope_format(*s)), "rope-key cache");
        s->weights.resize(static_cast<size_t>(L));
        s->head_weights = H > G && t.head_weights;
        // 8-bit latent tiles are copied (and widened) by the kernel's threads.
        if (d.keep_latent && s->use_latent_wgmma && t.latent_tma && d.cache_dtype != GQLA_DTYPE_FP8_E4M3)
            for (int layer = 0; layer < L; ++layer)
                s->latent_maps.push_back(latent_tma_maps(d.cache_dtype,
                                                         pool_view(*s, s->pool_a, layer, 1, d.latent_dim, true),
                                                         pool_view(*s, s->pool_b, layer, 1, d.rope_dim, true),
                                                         d.page_size, int64_t(d.num_pages) * d.page_size));
    }

    s->table_stride = std::max<int64_t>(d.num_pages, 1);
    s->page_tables.allocate(bytes_of(d.max_sequences * s->table_stride, 4), "device page tables");
    s->lengths.allocate(bytes_of(L * d.max_sequences, 4), "device sequence lengths");
    check_cuda(cudaMemsetAsync(s->page_tables.get(), 0, s->page_tables.bytes(), s->stream), "cudaMemsetAsync");
    check_cuda(cudaMemsetAsync(s->lengths.get(), 0, s->lengths.bytes(), s->stream), "cudaMemsetAsync");
    s->host_pages.assign(static_cast<size_t>(d.max_sequences), {});
    s->host_lengths.assign(static_cast<size_t>(d.max_sequences), std::vector<int32_t>(static_cast<size_t>(L), 0));

    allocate_decode_workspace(s);
    if (gqla) {
        // Expansion (kept expanded cache and the GQA_TRANSIENT form): latent
        // rows in the projection dtype in, products (f32 accumulation) out in
        // the same dtype, in chunks. Each chunk costs ~50 us of host work and
        // launches (gather, GEMM, two scatters), so the chunk is as large as
        // 64 MiB of products allows: DeepSeek-V3's 32768 expanded columns
        // took 32 chunks of 128 rows for 4096 tokens (~1.6 ms on the H200
        // against a ~0.3 ms floor); now 4 of 1024. Never more rows than the
        // session can hold.
        const size_t work = dtype_size(projection_dtype(*s));
        const int64_t n_exp = G * (d.nope_dim + d.value_dim);
        const int64_t capacity = std::max<int64_t>(int64_t(d.num_pages) * d.page_size, 1);
        const int64_t budget_rows = (int64_t(64) << 20) / (n_exp * static_cast<int64_t>(work));
        s->expand_chunk = static_cast<int32_t>(std::clamp<int64_t>(std::min(budget_rows, capacity), 64, 8192));
        s->expand_in.allocate(bytes_of(int64_t(s->expand_chunk) * d.latent_dim, work), "expansion input");
        s->expand_out.allocate(bytes_of(int64_t(s->expand_chunk) * n_exp, work), "expansion output");
        s->row_tokens.allocate(bytes_of(s->expand_chunk, 8), "row token indices");
        if (!d.keep_latent) allocate_expanded_pools(*s);
    }
    check_cuda(cudaStreamSynchronize(s->stream), "cudaStreamSynchronize(create)");
}
}  // namespace

void destroy_session(Session* s) {
    if (!s) return;
    cudaSetDevice(s->device);
    cudaStreamSynchronize(s->stream);
    if (s->cublas) cublasDestroy(s->cublas);
    if (s->pinned_free) cudaEventDestroy(s->pinned_free);
    if (s->stream_handoff) cudaEventDestroy(s->stream_handoff);
    delete s;  // buffers free themselves
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// Decode dispatch: stage host tensors, fill the transient pool of a
// GQA_TRANSIENT call, then run the path (decode_paths.hpp) once for a
// uniform call, or once per run of equal query counts for a ragged one.
// With device tensors nothing here allocates or synchronizes, so the whole
// sequence can be captured in a CUDA graph (a GQA_TRANSIENT call after the
// first, which allocates its pool). Host tensors go through pinned staging
// and the call synchronizes before returning.
#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "decode_paths.hpp"
#include "session_ops.hpp"
#include "sparse_lists.hpp"
#include "transient_pool.hpp"

namespace gqla::cuda {

namespace {

Rows3 contiguous_rows(void* data, int32_t dtype, int64_t q_len, int64_t heads, int64_t dim) {
    return Rows3{data, dtype, {q_len * heads * dim, heads * dim, dim}};
}
Rows3 view_rows(const gqla_view& v) { return Rows3{v.data, v.dtype, {v.strides[0], v.strides[1], v.strides[2]}}; }

// Host [B, s_q, H, dim] strided <-> contiguous copies through pinned memory.
void pack_host_rows(const gqla_view& v, int64_t dim, size_t es, unsigned char* dst) {
    for (int64_t b = 0; b < v.shape[0]; ++b)
        for (int64_t q = 0; q < v.shape[1]; ++q)
            for (int64_t h = 0; h < v.shape[2]; ++h) {
                const unsigned char* src = static_cast<const unsigned char*>(v.data) +
                                           (b * v.strides[0] + q * v.strides[1] + h * v.strides[2]) * es;
                std::memcpy(dst, src, dim * es);
                dst += dim * es;
            }
}
void unpack_host_rows(const unsigned char* src, int64_t dim, size_t es, const gqla_view& v) {
    for (int64_t b = 0; b < v.shape[0]; ++b)
        for (int64_t q = 0; q < v.shape[1]; ++q)
            for (int64_t h = 0; h < v.shape[2]; ++h) {
                unsigned char* dst =
                    static_cast<unsigned char*>(v.data) + (b * v.strides[0] + q * v.strides[1] + h * v.strides[2]) * es;
                std::memcpy(dst, src, dim * es);
                src += dim * es;
            }
}

// A ragged call's [N, H, dim] view (lse: [N, H]) as the [1, N, H, dim]
// view of one sequence with N queries, so that staging handles both kinds of
// call alike and each run's rows are a slice of the second dim.
gqla_view as_single_batch(const gqla_view& v) {
    gqla_view u = v;
    u.ndim = v.ndim + 1;
    u.shape[0] = 1;
    u.strides[0] = v.shape[0] * v.strides[0];
    for (int i = 0; i < v.ndim && i + 1 < 4; ++i) {
        u.shape[i + 1] = v.shape[i];
        u.strides[i + 1] = v.strides[i];
    }
    return u;
}

// Consecutive sequences of a ragged call with the same query count whose
// rows follow each other: one uniform call over [count, q_len, H, .] views.
// Runs are maximal, so a batch of equal counts is a single uniform call.
struct QueryRun {
    int32_t first, count, q_len;
    int64_t q_row;
};

QueryRun run_at(const gqla_decode_args& a, int32_t first) {
    QueryRun r{first, 1, a.seqs[first].q_len, a.seqs[first].q_row};
    while (first + r.count < a.batch) {
        const gqla_decode_seq& next = a.seqs[first + r.count];
        if (next.q_len != r.q_len || next.q_row != r.q_row + static_cast<int64_t>(r.count) * r.q_len) break;
        ++r.count;
    }
    return r;
}

// The run's rows of a call's [1, N, H, dim] rows as [count, q_len, H, dim]:
// offset q_row rows, the sequence stride q_len rows.
Rows3 run_rows(const Rows3& x, const QueryRun& r) {
    const int64_t es = static_cast<int64_t>(dtype_size(static_cast<gqla_dtype>(x.dtype)));
    Rows3 y = x;
    y.data = static_cast<unsigned char*>(x.data) + r.q_row * x.s[1] * es;
    y.s[0] = r.q_len * x.s[1];
    return y;
}

// One uniform batch on the call's path (a sparse one after its lists are
// compacted: before the absorb path's query projection, so that the latent
// kernel, a programmatic dependent of that projection, reads finished lists).
void run_path(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
              const int64_t lse_s[3]) {
    if (a.indices.data) {
        compact_sparse_lists(s, a);
        if (a.transient) expand_listed_rows_for_transient(s, a);
    }
    if (a.path == GQLA_PATH_ABSORB) {
        if (s.desc.kind != GQLA_KIND_GQLA)
            throw BackendError(GQLA_ERR_INVALID_ARGUMENT, "CUDA decode: absorb path on a GQA-kind session");
        decode_absorb_path(s, a, q, o, lse, lse_s);
    } else {
        decode_gqa_path(s, a, q, o, lse, lse_s);
    }
}

// A ragged call as one uniform call per run, all on the session's stream.
// The runs share the workspaces (partials, absorb buffers) one after another
// in stream order, as consecutive calls do.
void run_ragged(Session& s, const gqla_decode_args& a, const Rows3& q, const Rows3& o, float* lse,
                const int64_t lse_s[3]) {
    for (int32_t first = 0; first < a.batch;) {
        const QueryRun r = run_at(a, first);
        gqla_decode_args ra = a;
        ra.batch = r.count;
        ra.q_len = r.q_len;
        ra.seqs = a.seqs + r.first;
        ra.ragged = 0;
        ra.total_q = static_cast<int64_t>(r.count) * r.q_len;
        if (a.indices.data)  // the run's index rows
            ra.indices.data = static_cast<int32_t*>(a.indices.data) + r.q_row * a.indices.strides[0];
        const int64_t run_lse_s[3] = {r.q_len * lse_s[1], lse_s[1], lse_s[2]};
        run_path(s, ra, run_rows(q, r), run_rows(o, r), lse ? lse + r.q_row * lse_s[1] : nullptr, run_lse_s);
        first += r.count;
    }
}

}  // namespace

void decode(Session& s, const gqla_decode_args& a) {
    const gqla_backend_desc& d = s.desc;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    const bool ragged = a.ragged != 0;
    if (a.path == GQLA_PATH_GQA_TRANSIENT)  // the core sends it as GQA with transient = 1
        throw BackendError(GQLA_ERR_INVALID_ARGUMENT,
                           "CUDA decode: path GQA_TRANSIENT arrives as GQA with transient = 1");
    if (a.transient && !(gqla && a.path == GQLA_PATH_GQA))
        throw BackendError(GQLA_ERR_INVALID_ARGUMENT,
                           "CUDA decode: GQA_TRANSIENT needs a GQLA session and the GQA path");
    if (gqla && !d.keep_latent && (a.transient || a.path == GQLA_PATH_ABSORB))  // the core refuses these first
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA decode: the absorb path and GQA_TRANSIENT read the latent, which this session "
                           "does not keep (keep_latent = 0)");
    // Staging and every run see the call as [B, s_q, H, .] rows: a ragged
    // call as one sequence of N queries (runs slice it afterwards).
    const int64_t stage_batch = ragged ? 1 : a.batch;
    const int64_t stage_q_len = ragged ? a.q.shape[0] : a.q_len;
    const int64_t H = d.num_heads, dq = gqla ? d.nope_dim + d.rope_dim : d.head_dim, dv = d.value_dim;
    const int64_t rows = stage_batch * stage_q_len * H;
    if (rows > s.max_rows)  // the workspaces hold max_rows (the core checks this first)
        throw BackendError(
            GQLA_ERR_INVALID_ARGUMENT,
            "CUDA decode: " + std::to_string(stage_batch * stage_q_len) +
                " query tokens in one call, more than config.max_q_tokens = " + std::to_string(s.max_rows / H));
    const bool want_lse = a.lse.data != nullptr;
    const gqla_view qv = ragged ? as_single_batch(a.q) : a.q;
    const gqla_view ov = ragged ? as_single_batch(a.o) : a.o;
    const gqla_view lv = ragged && want_lse ? as_single_batch(a.lse) : a.lse;

    for (int i = 0; i < a.batch; ++i)
        refresh_sequence(s, a.seqs[i].slot, a.layer, a.seqs[i].page_table, a.seqs[i].num_pages, a.seqs[i].length);
    // Before any staging: its failures (no weights, out of memory for the
    // pool) leave nothing queued that reads the pinned buffer.
    // A sparse call expands only its listed rows, run by run (run_path).
    if (a.transient) {
        if (a.indices.data)
            prepare_transient_call(s, a);
        else
            expand_for_transient_call(s, a);
    }

    const size_t es = dtype_size(d.io_dtype);
    const bool host_q = !a.q.on_device, host_o = !a.o.on_device, host_lse = want_lse && !a.lse.on_device;

    // Sparse calls: the compacted lists of every run at once (a ragged
    // call's runs then never grow them between launches), and host index
    // lists copied (rows packed) to the device.
    gqla_decode_args call = a;
    if (a.indices.data) {
        s.sparse_tokens.ensure(static_cast<size_t>(a.total_q) * a.topk * sizeof(int64_t), "sparse token lists");
        s.sparse_counts.ensure(static_cast<size_t>(a.total_q) * sizeof(int32_t), "sparse token counts");
    }
    const bool host_idx = a.indices.data && !a.indices.on_device;
    const size_t idx_bytes = host_idx ? static_cast<size_t>(a.total_q) * a.topk * 4 : 0;
    unsigned char* pinned = nullptr;
    const size_t q_bytes = rows * dq * es, o_bytes = rows * dv * es, lse_bytes = rows * 4;
    if (host_q || host_o || host_lse || host_idx)
        pinned = static_cast<unsigned char*>(acquire_pinned(s, q_bytes + o_bytes + lse_bytes + idx_bytes));
    if (host_idx) {
        s.sparse_indices.ensure(idx_bytes, "sparse index staging");
        int32_t* packed = reinterpret_cast<int32_t*>(pinned + q_bytes + o_bytes + lse_bytes);
        for (int64_t r = 0; r < a.total_q; ++r)
            std::memcpy(packed + r * a.topk, static_cast<const int32_t*>(a.indices.data) + r * a.indices.strides[0],
                        static_cast<size_t>(a.topk) * 4);
        check_cuda(cudaMemcpyAsync(s.sparse_indices.get(), packed, idx_bytes, cudaMemcpyHostToDevice, s.stream),
                   "cudaMemcpyAsync(indices)");
        call.indices.data = s.sparse_indices.get();
        call.indices.strides[0] = a.topk;
        call.indices.on_device = 1;
    }

    Rows3 q = view_rows(qv);
    if (host_q) {
        pack_host_rows(qv, dq, es, pinned);
        check_cuda(cudaMemcpyAsync(s.q_stage.get(), pinned, q_bytes, cudaMemcpyHostToDevice, s.stream),
                   "cudaMemcpyAsync(q)");
        q = contiguous_rows(s.q_stage.get(), d.io_dtype, stage_q_len, H, dq);
    }
    Rows3 o = host_o ? contiguous_rows(s.o_stage.get(), d.io_dtype, stage_q_len, H, dv) : view_rows(ov);
    float* lse = nullptr;
    int64_t lse_s[3] = {0, 0, 0};
    if (want_lse) {
        if (host_lse) {
            lse = s.lse_stage.get<float>();
            lse_s[0] = stage_q_len * H;
            lse_s[1] = H;
            lse_s[2] = 1;
        } else {
            lse = static_cast<float*>(lv.data);
            lse_s[0] = lv.strides[0];
            lse_s[1] = lv.strides[1];
            lse_s[2] = lv.strides[2];
        }
    }

    if (ragged)
        run_ragged(s, call, q, o, lse, lse_s);
    else
        run_path(s, call, q, o, lse, lse_s);

    if (host_o || host_lse) {
        if (host_o)
            check_cuda(cudaMemcpyAsync(pinned + q_bytes, o.data, o_bytes, cudaMemcpyDeviceToHost, s.stream),
                       "cudaMemcpyAsync(o)");
        if (host_lse)
            check_cuda(cudaMemcpyAsync(pinned + q_bytes + o_bytes, lse, lse_bytes, cudaMemcpyDeviceToHost, s.stream),
                       "cudaMemcpyAsync(lse)");
        check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize(decode outputs)");
        if (host_o) unpack_host_rows(pinned + q_bytes, dv, es, ov);
        if (host_lse) {
            const float* src = reinterpret_cast<const float*>(pinned + q_bytes + o_bytes);
            for (int64_t b = 0; b < stage_batch; ++b)
                for (int64_t qi = 0; qi < stage_q_len; ++qi)
                    for (int64_t h = 0; h < H; ++h)
                        static_cast<float*>(lv.data)[b * lv.strides[0] + qi * lv.strides[1] + h * lv.strides[2]] =
                            *src++;
        }
    }
    if (pinned) release_pinned(s);
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// See transient_pool.hpp.
#include "transient_pool.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cache_kernels.hpp"
#include "cache_rows.hpp"
#include "sparse_lists.hpp"

namespace gqla::cuda {

namespace {

// One layer of the kept expanded pools' layout: num_pages x G x P rows.
size_t transient_layer_bytes(const Session& s, int32_t dim) {
    const PoolGeometry g = pool_geometry(s, s.desc.num_kv_heads, dim, transient_format(s));
    return g.layer_bytes();
}

void ensure_transient_pool(Session& s) {
    if (s.transient_kc.get()) return;
    const gqla_backend_desc& d = s.desc;
    const size_t kc_bytes = transient_layer_bytes(s, d.nope_dim), ve_bytes = transient_layer_bytes(s, d.value_dim);
    const size_t token_bytes = static_cast<size_t>(s.expand_chunk) * sizeof(int64_t);
    // cudaMalloc cannot be part of a CUDA graph: say how to capture such calls.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(s.stream, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA attention: the GQA_TRANSIENT form allocates its pool (one layer of expanded pages, " +
                               std::to_string(kc_bytes + ve_bytes) +
                               " bytes) on its first call, which cannot be captured in a CUDA graph; make one "
                               "uncaptured GQA_TRANSIENT call first");
    // Into fresh buffers first, so a failure leaves the session as it was.
    DeviceBuffer kc, ve, tokens;
    try {
        kc.allocate(kc_bytes, "transient expanded keys");
        ve.allocate(ve_bytes, "transient expanded values");
        tokens.allocate(token_bytes, "transient expansion token indices");
    } catch (const BackendError& e) {
        throw BackendError(e.status(),
                           "CUDA attention: the GQA_TRANSIENT form needs one layer of expanded pages (num_pages x "
                           "page_size x G x (d_c + d_v) = " +
                               std::to_string(d.num_pages) + " x " + std::to_string(d.page_size) + " x " +
                               std::to_string(d.num_kv_heads) + " x " + std::to_string(d.nope_dim + d.value_dim) +
                               " cache elements, " + std::to_string(kc_bytes + ve_bytes) +
                               " bytes), which could not be allocated; use the absorb path instead [" + e.what() + "]");
    }
    std::vector<NarrowTmaMaps> maps = narrow_maps_for(s, kc, ve, /*single_layer=*/true);  // addresses survive the swap
    s.transient_kc.swap(kc);
    s.transient_ve.swap(ve);
    s.transient_tokens.swap(tokens);
    s.transient_maps.swap(maps);
}

}  // namespace

void prepare_transient_call(Session& s, const gqla_decode_args& a) {
    if (!s.weights[static_cast<size_t>(a.layer)].get())
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA attention: GQA_TRANSIENT needs the weights of layer " + std::to_string(a.layer));
    ensure_transient_pool(s);
    if (a.indices.data)
        s.sparse_pool_rows.ensure(static_cast<size_t>(a.total_q) * a.topk * sizeof(int64_t),
                                  "sparse GQA_TRANSIENT pool rows");
}

void expand_listed_rows_for_transient(Session& s, const gqla_decode_args& a) {
    const int64_t rows = static_cast<int64_t>(a.batch) * a.q_len;
    int64_t* pool_rows = s.sparse_pool_rows.get<int64_t>();
    write_listed_pool_rows(s, rows, a.topk, pool_rows);
    expand_latent_rows(s, a.layer, pool_rows, rows * a.topk,
                       ExpandedPools{&s.transient_kc, &s.transient_ve, 0, transient_format(s)});
}

void expand_for_transient_call(Session& s, const gqla_decode_args& a) {
    prepare_transient_call(s, a);
    const ExpandedPools dst{&s.transient_kc, &s.transient_ve, 0, transient_format(s)};
    int64_t* tokens = s.transient_tokens.get<int64_t>();

    // The call's positions, sequence after sequence, cut into chunks of
    // expand_chunk rows (the expansion workspace); each chunk's token indices
    // are written by one or more segment launches, then the chunk is
    // expanded. Everything is queued in order on the session's stream, so a
    // chunk's token indices are not overwritten before its scatter ran.
    SequenceTokensParams tp{};
    tp.page_tables = s.page_tables.get<int32_t>();
    tp.table_stride = s.table_stride;
    tp.page_size = s.desc.page_size;
    tp.tokens = tokens;
    int32_t chunk_rows = 0;
    const auto write_tokens = [&] {
        launch_sequence_tokens(tp, s.stream);
        tp.count = 0;
    };
    const auto expand_chunk = [&] {
        write_tokens();
        expand_latent_chunk(s, a.layer, tokens, chunk_rows, dst);
        chunk_rows = 0;
    };
    for (int i = 0; i < a.batch; ++i) {
        const gqla_decode_seq& seq = a.seqs[i];
        for (int64_t pos = 0; pos < seq.length;) {
            if (tp.count == kTokenSegmentsPerLaunch) write_tokens();
            const int32_t take = static_cast<int32_t>(std::min<int64_t>(seq.length - pos, s.expand_chunk - chunk_rows));
            tp.slot[tp.count] = seq.slot;
            tp.start[tp.count] = pos;
            tp.rows[tp.count] = take;
            tp.out_row[tp.count] = chunk_rows;
            ++tp.count;
            chunk_rows += take;
            pos += take;
            if (chunk_rows == s.expand_chunk) expand_chunk();
        }
    }
    if (chunk_rows > 0) expand_chunk();
}

}  // namespace gqla::cuda

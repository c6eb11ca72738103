// SPDX-License-Identifier: Apache-2.0
// See fp8_widening.hpp.
#include "fp8_widening.hpp"

#include <algorithm>

#include "decode_plan.hpp"
#include "prefill_wgmma.hpp"
#include "session.hpp"

namespace gqla::cuda {

namespace {

// A bf16 pool of [page][G][P][dim] at base.
PoolView widened_view(void* base, int64_t groups, int32_t page_size, int32_t dim) {
    PoolView v{};
    v.base = base;
    v.group_stride = static_cast<int64_t>(page_size) * dim;
    v.page_stride = groups * v.group_stride;
    v.row_stride = dim;
    v.dim = dim;
    return v;
}
PoolView widened_keys(const Session& s) {
    return widened_view(s.widened_k.get(), s.desc.num_kv_heads, s.desc.page_size, s.desc.head_dim);
}
PoolView widened_values(const Session& s) {
    return widened_view(s.widened_v.get(), s.desc.num_kv_heads, s.desc.page_size, s.desc.value_dim);
}

// Room for `pages` widened pages and a table of `sequences` x `most_pages`
// (never called while the stream is captured: cudaMalloc is not part of a
// graph). False where it would have to grow and the device has no room (the
// 8-bit kernel needs none); other failures throw.
bool ensure_workspace(Session& s, int64_t pages, int64_t sequences, int64_t most_pages) {
    const gqla_backend_desc& d = s.desc;
    const size_t k_page = static_cast<size_t>(d.num_kv_heads) * d.page_size * d.head_dim * 2;
    const size_t v_page = static_cast<size_t>(d.num_kv_heads) * d.page_size * d.value_dim * 2;
    const size_t table_bytes = static_cast<size_t>(sequences * most_pages) * 4, length_bytes = sequences * 4;
    const bool grow_pages = pages > s.widened_pages;
    const bool grow_table = table_bytes > s.widened_table.bytes() || length_bytes > s.widened_lengths.bytes();
    if (!grow_pages && !grow_table) return true;
    try {
        if (grow_pages) {
            // A quarter more than asked: a session whose prompts grow a little
            // at a time does not reallocate at every call.
            const int64_t capacity = pages + pages / 4;
            DeviceBuffer k, v;
            k.allocate(static_cast<size_t>(capacity) * k_page, "widened 8-bit keys");
            v.allocate(static_cast<size_t>(capacity) * v_page, "widened 8-bit values");
            s.widened_k.swap(k);
            s.widened_v.swap(v);
            s.widened_pages = capacity;
            // The workspace is a one-layer bf16 pool: the prefill kernel loads
            // its tiles by TMA boxes as it does a bf16 cache's.
            s.widened_maps = NarrowTmaMaps{};
            if (s.widened_tma)
                s.widened_maps = narrow_tma_maps(GQLA_DTYPE_BF16, widened_keys(s), PoolView{}, widened_values(s),
                                                 d.page_size, capacity);
        }
        if (grow_table) {
            DeviceBuffer table, lengths;
            table.allocate(std::max(table_bytes, s.widened_table.bytes()), "widened page table");
            lengths.allocate(std::max(length_bytes, s.widened_lengths.bytes()), "widened lengths");
            s.widened_table.swap(table);
            s.widened_lengths.swap(lengths);
        }
    } catch (const BackendError& e) {
        if (e.status() == GQLA_ERR_OUT_OF_MEMORY) return false;
        throw;
    }
    return true;
}

}  // namespace

bool widen_fp8_for_prefill(Session& s, const gqla_decode_args& a, AttentionParams* p, const NarrowTmaMaps** maps) {
    const gqla_backend_desc& d = s.desc;
    if (s.fp8_widening == 0 || d.kind != GQLA_KIND_GQA || p->cache_dtype != GQLA_DTYPE_FP8_E4M3 || a.indices.data)
        return false;
    AttentionPlan prefill;
    if (!plan_prefill_kernel(s, *p, &prefill)) return false;
    const int row_blocks = (p->rows + kPrefillRows - 1) / kPrefillRows;
    if (s.fp8_widening < 0 && row_blocks < kFp8WidenMinRowBlocks) return false;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(s.stream, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone) return false;

    // The call's pages, sequence after sequence.
    const auto pages_of = [&](int i) { return (a.seqs[i].length + d.page_size - 1) / d.page_size; };
    int64_t pages = 0, most_pages = 0;
    for (int i = 0; i < a.batch; ++i) {
        pages += pages_of(i);
        most_pages = std::max(most_pages, pages_of(i));
    }
    if (pages > INT32_MAX || !ensure_workspace(s, pages, a.batch, most_pages)) return false;

    Fp8WideningParams w{};
    w.k = p->k1;
    w.v = p->v;
    w.wide_k = s.widened_k.get();
    w.wide_v = s.widened_v.get();
    w.page_tables = s.page_tables.get<int32_t>();
    w.table_stride = s.table_stride;
    w.wide_table = s.widened_table.get<int32_t>();
    w.wide_table_stride = most_pages;
    w.wide_lengths = s.widened_lengths.get<int32_t>();
    w.groups = d.num_kv_heads;
    w.page_size = d.page_size;
    int32_t next_page = 0;  // widened page of the next sequence's first page
    for (int first = 0; first < a.batch; first += kWidenSequencesPerLaunch) {
        w.first = first;
        w.count = std::min(kWidenSequencesPerLaunch, a.batch - first);
        int32_t launch_pages = 0;
        for (int i = 0; i < w.count; ++i) {
            const int32_t n = static_cast<int32_t>(pages_of(first + i));
            w.slot[i] = a.seqs[first + i].slot;
            w.length[i] = static_cast<int32_t>(a.seqs[first + i].length);
            w.first_page[i] = next_page;
            next_page += n;
            launch_pages = std::max(launch_pages, n);
        }
        launch_widen_fp8_pages(w, launch_pages, s.stream);
    }

    p->cache_dtype = GQLA_DTYPE_BF16;
    p->k1 = widened_keys(s);
    p->k2 = p->k1;
    p->k2.dim = 0;
    p->v = widened_values(s);
    p->page_tables = s.widened_table.get<int32_t>();
    p->table_stride = most_pages;
    p->lengths = s.widened_lengths.get<int32_t>();
    *maps = s.widened_maps.valid ? &s.widened_maps : nullptr;
    return true;
}

}  // namespace gqla::cuda

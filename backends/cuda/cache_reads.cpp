// SPDX-License-Identifier: Apache-2.0
// Reading a sequence's kept cache rows back to host memory (sequence
// export): one strided copy per (page, KV head) run, queued on the session's
// stream after every earlier write, then a wait for that stream. An 8-bit
// pool's runs bring their scales along (one more copy each).
#include <algorithm>

#include "cuda_status.hpp"
#include "session_ops.hpp"

namespace gqla::cuda {

void read_rows(Session& s, const gqla_read_args& a) {
    const gqla_backend_desc& d = s.desc;
    const bool gqa = d.kind == GQLA_KIND_GQA;
    const int64_t P = d.page_size;
    const int64_t heads = gqa ? d.num_kv_heads : 1;
    struct Part {
        const DeviceBuffer& pool;
        int32_t dim;
        PoolFormat format;
        unsigned char* out;
        unsigned char* out_scales;  // [count][heads][scale_cols] f32 (8-bit pools)
    };
    const Part parts[2] = {{s.pool_a, gqa ? d.head_dim : d.latent_dim, gqa ? cache_format(s) : latent_format(s),
                            static_cast<unsigned char*>(a.a.data), static_cast<unsigned char*>(a.a_scales.data)},
                           {s.pool_b, gqa ? d.value_dim : d.rope_dim, gqa ? cache_format(s) : rope_format(s),
                            static_cast<unsigned char*>(a.b.data), static_cast<unsigned char*>(a.b_scales.data)}};
    for (const Part& part : parts) {
        const bool scaled = part.format.dtype == GQLA_DTYPE_FP8_E4M3;
        if (scaled && part.out_scales == nullptr)
            throw BackendError(GQLA_ERR_INVALID_ARGUMENT,
                               "read_rows: an fp8_e4m3 pool's rows need a view of their scales");
        const size_t scale_bytes = 4 * static_cast<size_t>(part.format.scale_cols);
        const PoolGeometry g = pool_geometry(s, heads, part.dim, part.format);
        const size_t es = g.elem_bytes;
        const size_t row_bytes = static_cast<size_t>(part.dim) * es;
        const unsigned char* layer_base = g.layer_base(part.pool.get<unsigned char>(), a.layer);
        // Output rows are [count][heads][dim]: token i of head h at (i*heads + h)*dim.
        for (int64_t i = 0; i < a.count;) {
            const int64_t pos = a.start + i;
            const int64_t slot = pos % P;
            const int64_t run = std::min<int64_t>(P - slot, a.count - i);
            const int64_t page = a.page_table[pos / P];
            for (int64_t h = 0; h < heads; ++h) {
                const unsigned char* src =
                    layer_base + (page * g.page_stride + h * g.group_stride + slot * part.dim) * es;
                unsigned char* dst = part.out + ((i * heads + h) * part.dim) * es;
                check_cuda(cudaMemcpy2DAsync(dst, heads * row_bytes, src, row_bytes, row_bytes,
                                             static_cast<size_t>(run), cudaMemcpyDeviceToHost, s.stream),
                           "read_rows: cudaMemcpy2DAsync");
                if (!scaled) continue;
                // The run's scales: rows h * P + slot .. of the page, after its rows.
                const unsigned char* src_scales =
                    layer_base + page * g.page_stride * es + g.scale_offset + (h * P + slot) * scale_bytes;
                check_cuda(cudaMemcpy2DAsync(part.out_scales + (i * heads + h) * scale_bytes, heads * scale_bytes,
                                             src_scales, scale_bytes, scale_bytes, static_cast<size_t>(run),
                                             cudaMemcpyDeviceToHost, s.stream),
                           "read_rows: cudaMemcpy2DAsync(scales)");
            }
            i += run;
        }
    }
    check_cuda(cudaStreamSynchronize(s.stream), "read_rows: cudaStreamSynchronize");
}

}  // namespace gqla::cuda

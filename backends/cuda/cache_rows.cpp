// SPDX-License-Identifier: Apache-2.0
// See cache_rows.hpp.
#include "cache_rows.hpp"

#include <algorithm>
#include <string>

#include "cache_kernels.hpp"
#include "core/config.hpp"
#include "core/dtype.hpp"

namespace gqla::cuda {

void scatter_into(Session& s, const gqla_view& src, int64_t src_group_stride, int64_t src_col_offset_elems,
                  const DeviceBuffer& pool, int layer, int64_t groups, int32_t dim, PoolFormat format,
                  const int64_t* tokens, int32_t rows, const float* src_scales) {
    const PoolGeometry g = pool_geometry(s, groups, dim, format);
    if (src.dtype == GQLA_DTYPE_FP8_E4M3 && (format.dtype != GQLA_DTYPE_FP8_E4M3 || src_scales == nullptr))
        throw BackendError(GQLA_ERR_INTERNAL, "CUDA append: stored 8-bit rows need an 8-bit pool and their scales");
    ScatterParams p{};
    p.src = static_cast<const unsigned char*>(src.data) + src_col_offset_elems * dtype_size(src.dtype);
    p.src_dtype = src.dtype;
    p.src_row_stride = src.strides[0];
    p.src_group_stride = src_group_stride;
    p.dst = g.layer_base(pool.get<unsigned char>(), layer);
    p.dst_dtype = format.dtype;
    p.dst_page_stride = g.page_stride;
    p.dst_group_stride = g.group_stride;
    p.dst_row_stride = g.row_stride;
    p.page_size = s.desc.page_size;
    p.groups = static_cast<int32_t>(groups);
    p.dim = dim;
    p.rows = rows;
    p.row_token = tokens;
    p.dst_scale_offset = g.scale_offset;
    p.dst_scale_cols = format.scale_cols;
    p.scale_block = format.scale_cols > 1 ? kFp8LatentBlock : dim;
    p.src_scales = src_scales;
    p.src_scale_row_stride = groups * format.scale_cols;
    launch_scatter_rows(p, s.stream);
}

void expand_latent_chunk(Session& s, int layer, const int64_t* d_tokens, int32_t rows, const ExpandedPools& dst,
                         const LatentRows* given) {
    const gqla_backend_desc& d = s.desc;
    const void* w = s.weights[static_cast<size_t>(layer)].get();
    if (!w)
        throw BackendError(GQLA_ERR_INVALID_STATE,
                           "CUDA expand: weights of layer " + std::to_string(layer) + " not set");
    if (rows <= 0) return;
    const int r = d.latent_dim, G = d.num_kv_heads, width = d.nope_dim + d.value_dim, N = G * width;
    // Group g's block of W: the g-th, or with per-head copies the first of its heads'.
    const int64_t copies = s.weight_copies(), group_stride = copies * width * r;
    const float one = 1.f, zero = 0.f;
    // Latent rows in W's dtype (16-bit caches: as stored); products
    // accumulated in f32 and rounded once to that dtype, as the scatter into
    // the cache would round them.
    if (given) {
        // The projection dtype is the cache dtype: this conversion rounds
        // as storing the row in the latent pool would.
        launch_convert_2d(given->data, given->dtype, rows, r, given->row_stride, s.expand_in.get(), projection_dtype(s),
                          s.stream);
    } else {
        if (!s.pool_a.get()) throw BackendError(GQLA_ERR_INTERNAL, "CUDA expand: the session keeps no latent");
        const PoolFormat cf = latent_format(s);
        const PoolGeometry cg = pool_geometry(s, 1, r, cf);
        const void* c_layer = cg.layer_base(s.pool_a.get<unsigned char>(), layer);
        // 8-bit latent rows are widened with their block scales.
        const GatherScales scales{cg.scale_offset, cf.scale_cols, kFp8LatentBlock};
        launch_gather_rows(c_layer, cf.dtype, cg.page_stride, cg.row_stride, d.page_size, r, d_tokens, rows,
                           s.expand_in.get(), projection_dtype(s), scales, s.stream);
    }
    const cudaDataType_t in_type = projection_cuda_type(s);
    if (copies == 1)
        check_cublas(
            cublasGemmEx(s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, N, rows, r, &one, w, in_type, r, s.expand_in.get(),
                         in_type, r, &zero, s.expand_out.get(), in_type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "latent expansion (GemmEx)");
    else  // blocks spaced by per-head copies: one GEMM per group, the same latent rows
        check_cublas(
            cublasGemmStridedBatchedEx(s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, width, rows, r, &one, w, in_type, r,
                                       group_stride, s.expand_in.get(), in_type, r, 0, &zero, s.expand_out.get(),
                                       in_type, N, width, G, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "latent expansion (GemmStridedBatchedEx)");
    gqla_view e{};
    e.data = s.expand_out.get();
    e.dtype = projection_dtype(s);
    e.on_device = 1;
    e.ndim = 2;
    e.strides[0] = N;
    e.strides[1] = 1;
    scatter_into(s, e, width, 0, *dst.kc, dst.layer, G, d.nope_dim, dst.format, d_tokens, rows);
    scatter_into(s, e, width, d.nope_dim, *dst.ve, dst.layer, G, d.value_dim, dst.format, d_tokens, rows);
}

void expand_latent_rows(Session& s, int layer, const int64_t* d_tokens, int64_t n, const ExpandedPools& dst,
                        const LatentRows* given) {
    for (int64_t first = 0; first < n; first += s.expand_chunk) {
        const int32_t rows = static_cast<int32_t>(std::min<int64_t>(s.expand_chunk, n - first));
        LatentRows chunk;
        if (given) {
            chunk = *given;
            chunk.data = static_cast<const unsigned char*>(given->data) +
                         first * given->row_stride * static_cast<int64_t>(dtype_size(given->dtype));
        }
        expand_latent_chunk(s, layer, d_tokens + first, rows, dst, given ? &chunk : nullptr);
    }
}

}  // namespace gqla::cuda

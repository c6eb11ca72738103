// SPDX-License-Identifier: Apache-2.0
// Instantiation (bf16, f16 x ring sizes x row layouts), TMA maps and launch
// glue of the narrow-group decode kernel (8 query rows of a group per CTA).
#include <climits>

#include "attention_kernels.hpp"
#include "attention_narrow_kernel.cuh"
#include "cuda_status.hpp"
#include "launch_config.hpp"
#include "tensor_maps.hpp"

namespace gqla::cuda {

namespace {

static_assert(kNarrowSlotsMin == 3 && kNarrowSlotsMax == 5, "instantiate every ring size below");

template <typename T, NarrowRows ROWS, int DK = 0, int DV = 0>
const void* narrow_kernel_of(int slots) {
    return slots == 3   ? reinterpret_cast<const void*>(&attention_narrow_kernel<T, 3, ROWS, DK, DV>)
           : slots == 4 ? reinterpret_cast<const void*>(&attention_narrow_kernel<T, 4, ROWS, DK, DV>)
                        : reinterpret_cast<const void*>(&attention_narrow_kernel<T, 5, ROWS, DK, DV>);
}

// Fixed widths exist for TMA boxes only: the Hopper layout, where these
// shapes decode.
template <typename T>
const void* narrow_kernel_of(int slots, NarrowRows rows, NarrowDims dims) {
    switch (rows) {
        case NarrowRows::Padded:
            return narrow_kernel_of<T, NarrowRows::Padded>(slots);
        case NarrowRows::Swizzled:
            return narrow_kernel_of<T, NarrowRows::Swizzled>(slots);
        case NarrowRows::TmaBoxes:
            switch (dims) {
                case NarrowDims::K128V128:
                    return narrow_kernel_of<T, NarrowRows::TmaBoxes, 128, 128>(slots);
                case NarrowDims::K192V128:
                    return narrow_kernel_of<T, NarrowRows::TmaBoxes, 192, 128>(slots);
                case NarrowDims::Runtime:
                    return narrow_kernel_of<T, NarrowRows::TmaBoxes>(slots);
            }
    }
    return nullptr;
}

template <typename T>
const void* narrow_wide_kernel_of() {
    return reinterpret_cast<const void*>(
        &attention_narrow_kernel<T, kNarrowWideSlots, NarrowRows::TmaBoxes, 128, 128, kNarrowWideWarps>);
}

template <typename T>
const void* narrow_shared_kernel_of(int row_blocks) {
    constexpr int W = kNarrowSharedWarps, R = kNarrowSharedSlots;
    return row_blocks == 2
               ? reinterpret_cast<const void*>(&attention_narrow_kernel<T, R, NarrowRows::TmaBoxes, 128, 128, W, 2>)
               : reinterpret_cast<const void*>(&attention_narrow_kernel<T, R, NarrowRows::TmaBoxes, 128, 128, W, 4>);
}

// Null for a wide CTA or shared rings that are not compiled
// (narrow_wide_compiled, narrow_shared_compiled).
const void* narrow_kernel(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims = NarrowDims::Runtime,
                          int warps = kNarrowWarps, int row_blocks = 1) {
    if (cache == GQLA_DTYPE_FP8_E4M3)
        return rows == NarrowRows::Padded && warps == kNarrowWarps && row_blocks == 1 ? narrow_fp8_kernel(slots, dims)
                                                                                      : nullptr;
    if (row_blocks != 1)
        return !narrow_shared_compiled(slots, rows, dims, warps, row_blocks) ? nullptr
               : cache == GQLA_DTYPE_F16 ? narrow_shared_kernel_of<__half>(row_blocks)
                                         : narrow_shared_kernel_of<__nv_bfloat16>(row_blocks);
    if (warps != kNarrowWarps)
        return !narrow_wide_compiled(slots, rows, dims) ? nullptr
               : cache == GQLA_DTYPE_F16                ? narrow_wide_kernel_of<__half>()
                                                        : narrow_wide_kernel_of<__nv_bfloat16>();
    return cache == GQLA_DTYPE_F16 ? narrow_kernel_of<__half>(slots, rows, dims)
                                   : narrow_kernel_of<__nv_bfloat16>(slots, rows, dims);
}

// Token rows of a pool viewed as [rows][dim]; false where a page's or a
// group's rows are not whole rows apart or the row count overflows a TMA
// coordinate.
bool pool_rows(const PoolView& pool, int64_t num_pages, PoolRows* out) {
    if (pool.row_stride <= 0 || pool.page_stride % pool.row_stride != 0 || pool.group_stride % pool.row_stride != 0)
        return false;
    const int64_t page_rows = pool.page_stride / pool.row_stride;
    if (page_rows * num_pages > INT_MAX) return false;
    out->page_rows = static_cast<int32_t>(page_rows);
    out->group_rows = static_cast<int32_t>(pool.group_stride / pool.row_stride);
    return true;
}

bool pool_map(gqla_dtype cache, const PoolView& pool, int64_t num_pages, CUtensorMap* map, PoolRows* rows) {
    return pool.dim % 64 == 0 && pool_rows(pool, num_pages, rows) &&
           encode_row_map(map, cache, pool.base, pool.dim, int64_t(rows->page_rows) * num_pages, pool.row_stride, 16);
}

}  // namespace

NarrowTmaMaps narrow_tma_maps(gqla_dtype cache, const PoolView& k1, const PoolView& k2, const PoolView& v,
                              int page_size, int64_t num_pages) {
    NarrowTmaMaps maps{};
    if (page_size % 16 != 0 || k1.dim + k2.dim > kNarrowMaxDk || v.dim > kNarrowMaxDv) return maps;
    const bool ok = pool_map(cache, k1, num_pages, &maps.k1, &maps.k1_rows) &&
                    (k2.dim == 0 || pool_map(cache, k2, num_pages, &maps.k2, &maps.k2_rows)) &&
                    pool_map(cache, v, num_pages, &maps.v, &maps.v_rows);
    maps.valid = ok ? 1 : 0;
    return maps;
}

bool narrow_kernel_fits(const AttentionParams& p, int max_rows) {
    return p.rows <= max_rows && p.k1.dim + p.k2.dim <= kNarrowMaxDk && p.v.dim <= kNarrowMaxDv && !p.v_aliases_k1;
}

bool narrow_can_swizzle(const AttentionParams& p) { return narrow_can_swizzle(p.k1.dim + p.k2.dim, p.v.dim); }

NarrowDims narrow_fixed_dims(const AttentionParams& p) {
    const int dk = p.k1.dim + p.k2.dim, dv = p.v.dim;
    if (dk == 128 && dv == 128) return NarrowDims::K128V128;
    if (dk == 192 && dv == 128) return NarrowDims::K192V128;
    return NarrowDims::Runtime;
}

int narrow_smem_bytes(const AttentionParams& p, int slots, NarrowRows rows, int warps, int row_blocks) {
    if (p.cache_dtype == GQLA_DTYPE_FP8_E4M3)
        return narrow_fp8_layout(p.k1.dim + p.k2.dim, p.v.dim, slots, warps).bytes;
    return narrow_layout(p.k1.dim + p.k2.dim, p.v.dim, slots, rows, warps, row_blocks).bytes;
}

// Wide CTAs hold 16 warps' rings: 3 slots of 16 rows x 128 columns fill 192
// KiB, which is where they pay (one CTA per SM in either case).
bool narrow_wide_compiled(int slots, NarrowRows rows, NarrowDims dims) {
    return slots == kNarrowWideSlots && rows == NarrowRows::TmaBoxes && dims == NarrowDims::K128V128;
}

// Shared rings: 4 token lanes of 5 slots (4 row blocks) or 8 (2 row
// blocks), 16 x 128-wide rows a slot: 80 or 160 KiB, one CTA per SM.
bool narrow_shared_compiled(int slots, NarrowRows rows, NarrowDims dims, int warps, int row_blocks) {
    return narrow_shared_row_blocks(row_blocks) && warps == kNarrowSharedWarps && slots == kNarrowSharedSlots &&
           rows == NarrowRows::TmaBoxes && dims == NarrowDims::K128V128;
}

void prepare_narrow_kernels(int smem_optin, bool clusters) {
    auto prepare = [&](const void* kernel) {
        if (!kernel) return;  // a wide CTA that is not compiled
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_optin),
                   "cudaFuncSetAttribute(attention_narrow_kernel)");
        // Clusters of up to 16 splits (8 is the portable limit).
        if (clusters)
            check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
                       "cudaFuncSetAttribute(attention_narrow_kernel, non-portable clusters)");
    };
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16}) {
        for (int st = kNarrowSlotsMin; st <= kNarrowSlotsMax; ++st)
            for (NarrowRows rows : {NarrowRows::Padded, NarrowRows::Swizzled, NarrowRows::TmaBoxes})
                for (int dims = 0; dims < kNarrowDimsCount; ++dims)
                    for (int warps : {kNarrowWarps, kNarrowWideWarps})
                        prepare(narrow_kernel(t, st, rows, static_cast<NarrowDims>(dims), warps));
        for (int row_blocks : {2, 4})
            prepare(narrow_kernel(t, kNarrowSharedSlots, NarrowRows::TmaBoxes, NarrowDims::K128V128, kNarrowSharedWarps,
                                  row_blocks));
    }
    for (int st = kNarrowSlotsMin; st <= kNarrowSlotsMax; ++st)
        for (NarrowDims dims : {NarrowDims::Runtime, NarrowDims::K128V128})
            prepare(narrow_kernel(GQLA_DTYPE_FP8_E4M3, st, NarrowRows::Padded, dims));
}

int narrow_blocks_per_sm(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int smem_bytes, int warps,
                         int row_blocks) {
    const void* kernel = narrow_kernel(cache, slots, rows, dims, warps, row_blocks);
    if (!kernel) return 0;
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, warps * 32, smem_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor(narrow)");
    return n;
}

int narrow_max_active_clusters(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int smem_bytes,
                               int cluster_splits, int warps) {
    const void* kernel = narrow_kernel(cache, slots, rows, dims, warps);
    if (!kernel) return 0;
    return max_active_split_clusters(kernel, dim3(static_cast<unsigned>(warps * 32)),
                                     smem_bytes + kNarrowClusterMergeBytes, cluster_splits);
}

void launch_attention_narrow(gqla_dtype cache, int slots, NarrowRows rows, NarrowDims dims, int warps, int row_blocks,
                             const AttentionParams& p, const NarrowTmaMaps& maps, dim3 grid, int smem_bytes,
                             cudaStream_t stream) {
    // A swizzled kernel on dims that cannot swizzle would address its slots
    // wrongly, and the TMA one needs the layer's maps: fall back, never misread.
    // (Any split count is right for any tile: each CTA derives its range.)
    if (rows != NarrowRows::Padded && !narrow_can_swizzle(p)) rows = NarrowRows::Padded;
    if (rows == NarrowRows::TmaBoxes && !maps.valid) rows = NarrowRows::Swizzled;
    if (dims != narrow_fixed_dims(p)) dims = NarrowDims::Runtime;
    if (row_blocks != 1 && !narrow_shared_compiled(slots, rows, dims, warps, row_blocks))
        throw BackendError(GQLA_ERR_INTERNAL,
                           "CUDA decode: narrow kernel with shared rings not compiled for this plan");
    if (row_blocks == 1 && !narrow_wide_compiled(slots, rows, dims)) warps = kNarrowWarps;
    // (The 8-bit kernel takes p alone: the launch reads its one parameter.)
    void* args[] = {const_cast<AttentionParams*>(&p), const_cast<NarrowTmaMaps*>(&maps)};
    if (cache == GQLA_DTYPE_FP8_E4M3 &&
        (rows != NarrowRows::Padded || p.cluster_merge || warps != kNarrowWarps || row_blocks != 1))
        throw BackendError(GQLA_ERR_INTERNAL,
                           "CUDA decode: the 8-bit narrow kernel is planned as one padded row block");
    if (p.cluster_merge) smem_bytes += kNarrowClusterMergeBytes;
    LaunchAttrs attrs;
    cudaLaunchConfig_t cfg = make_launch_config(grid, dim3(static_cast<unsigned>(warps * 32)), smem_bytes,
                                                p.cluster_merge != 0, false, attrs);
    cfg.stream = stream;
    check_cuda(cudaLaunchKernelExC(&cfg, narrow_kernel(cache, slots, rows, dims, warps, row_blocks), args),
               cache == GQLA_DTYPE_FP8_E4M3 ? "launch attention_narrow_fp8_kernel" : "launch attention_narrow_kernel");
}

}  // namespace gqla::cuda

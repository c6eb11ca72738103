// SPDX-License-Identifier: Apache-2.0
// State of one CPU backend context: the description it was created with, the
// cache pools (layout of core/backend_api.h), per-layer weights, the decode
// workspace and the chosen kernel table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/aligned_buffer.hpp"
#include "backends/cpu/kernel_table.hpp"
#include "backends/cpu/softmax_constants.hpp"
#include "backends/cpu/thread_pool.hpp"
#include "backends/cpu/workspace_layout.hpp"
#include "core/backend_api.h"

namespace gqla::cpu {

// Below this many bytes of f32 weights per layer the absorb projections keep
// f32 weights even for bf16 and 8-bit caches: such weights stay in the cores'
// caches, so halving their bytes saves little, and their short sums let the
// rounding reach the bf16 error bound.
constexpr size_t kBf16WeightsMinBytes = size_t(1) << 20;

// Weights of one GQLA layer, converted to f32 once at upload.
struct LayerWeights {
    // [G*(d_c+d_v)][r], the kv_b_proj layout: W_UK[g] is a [d_c][r] block
    // with leading dimension r, the B operand of q~ = qc * W_UK[g].
    AlignedBuffer w;
    // [r][G*(d_c+d_v)], the transpose: B operand of the expansion GEMM
    // (c * W^T) and, at column offset g*(d_c+d_v)+d_c, of o = o~ * W_UV[g]^T.
    AlignedBuffer wt;
    // bf16 caches: the absorb projections read bf16 copies instead, halving
    // the weight traffic of every decode step, which at small batch is most
    // of it: w16 in the layout of w (W_UK[g] is a contiguous [d_c][r] block)
    // and wuv16 = W_UV[g]^T as contiguous [r][d_v] blocks per group (in wt
    // its rows lie G*(d_c+d_v) elements apart, a TLB miss per row at
    // DeepSeek-V3 sizes). Of w and wt only the one the expansion GEMM reads
    // is kept then (expansion_reads_wt()).
    // Made only for weights that are bf16 values already or larger than
    // kBf16WeightsMinBytes in f32 (cpu_set_weights says why).
    AlignedBuffer w16;
    AlignedBuffer wuv16;
    // w16 holds W exactly (bf16 checkpoints): the GQA_TRANSIENT form then
    // up-projects with it, which bf16 dot products make twice as fast.
    bool w16_exact = false;
    bool set() const { return !w.empty() || !w16.empty(); }
    bool bf16() const { return !w16.empty(); }
    size_t bytes() const { return w.size() + wt.size() + w16.size() + wuv16.size(); }
};

// One cache pool: [layer][page][page_elems] elements of `elem` bytes (the
// cache dtype's; for an 8-bit cache the kr pool is bf16). An 8-bit pool's
// page is rows of e4m3 bytes and then, at byte scale_off, scale_cols f32
// scales per row (docs/fp8-cache.md); its page_elems counts bytes.
struct Pool {
    AlignedBuffer mem;
    int64_t page_elems = 0;   // elements of one page of one layer
    int64_t layer_elems = 0;  // page_elems * num_pages
    size_t elem = 0;
    int64_t scale_off = 0;   // 8-bit pools: byte offset of the scales in a page
    int32_t scale_cols = 0;  // 8-bit pools: scales per row (0: none)

    size_t page_bytes() const { return static_cast<size_t>(page_elems) * elem; }
    // Scales of row `row` (g * P + slot, or slot) of page `page`, given the
    // layer's start.
    const float* scales(const void* layer, int64_t page, int64_t row) const {
        return reinterpret_cast<const float*>(static_cast<const char*>(layer) + page * page_elems + scale_off) +
               row * scale_cols;
    }
    float* scales(void* layer, int64_t page, int64_t row) const {
        return const_cast<float*>(scales(static_cast<const void*>(layer), page, row));
    }
};

struct CpuContext {
    gqla_backend_desc desc{};
    const KernelTable* kernels = nullptr;
    size_t elem_size = 0;  // bytes of one cache element

    // GQA kind: [0] K, [1] V. GQLA: [0] C, [1] KR.
    Pool kept[2];
    // GQLA expanded cache: [0] KC, [1] VE (empty while disabled).
    Pool expanded[2];
    bool expanded_on = false;

    std::vector<LayerWeights> weights;

    WorkspaceLayout ws_layout{};
    AlignedBuffer workspace;

    char error[512] = {0};

    // Workers of this context's parallel loops, one slot per workspace
    // thread area; started by create (cpu_backend.cpp).
    std::unique_ptr<ThreadPool> pool;
    ThreadPool& threads() { return *pool; }

    int n_rep() const { return desc.num_heads / desc.num_kv_heads; }
    // The factor every kernel's queries carry: scores in the log2 domain.
    float query_scale() const { return desc.softmax_scale * kLog2e; }
    // Width of one row of the expansion GEMM output: G * (d_c + d_v).
    int expanded_width() const { return desc.num_kv_heads * (desc.nope_dim + desc.value_dim); }

    bool fp8() const { return desc.cache_dtype == GQLA_DTYPE_FP8_E4M3; }

    // Start of `layer` in a pool.
    const void* pool_layer(const Pool& p, int32_t layer) const {
        return static_cast<const char*>(p.mem.data()) + static_cast<size_t>(layer) * p.layer_elems * p.elem;
    }
    void* pool_layer(Pool& p, int32_t layer) {
        return static_cast<char*>(p.mem.data()) + static_cast<size_t>(layer) * p.layer_elems * p.elem;
    }
};

// Stores a formatted message in ctx->error and returns `st`.
gqla_status fail(CpuContext* ctx, gqla_status st, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace gqla::cpu

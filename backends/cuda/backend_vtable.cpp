// SPDX-License-Identifier: Apache-2.0
// The module's only export: gqla_cuda_backend_get, returning the vtable of
// backend_api.h. Every entry binds the session's device, runs the operation
// and turns a BackendError (or any exception) into a status + message
// (core/status_translation.hpp).
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "core/backend_api.h"
#include "core/status_translation.hpp"
#include "device_probe.hpp"
#include "prefill_wgmma.hpp"
#include "tuning.hpp"
#include "session_ops.hpp"

namespace gqla::cuda {

namespace {

template <typename F>
gqla_status guarded(void* ctx, F&& f) {
    Session* s = static_cast<Session*>(ctx);
    return status_of(
        [&] {
            bind_device(*s);
            f(*s);
        },
        [s](gqla_status, const char* message) { s->error = message; });
}

gqla_status vt_device_count(int32_t* out) {
    *out = visible_device_count();
    return GQLA_OK;
}

thread_local std::string t_probe_error;

gqla_status vt_probe(int32_t index, uint32_t flags, gqla_probe_info* out) {
    return status_of([&] { probe_device(index, flags, out); },
                     [](gqla_status, const char* message) { t_probe_error = message; });
}

gqla_status vt_create(const gqla_backend_desc* desc, void** out_ctx, char* err, size_t err_len) {
    *out_ctx = nullptr;
    return status_of(
        [&] {
            if (desc->device_index < 0 || desc->device_index >= visible_device_count())
                throw BackendError(GQLA_ERR_UNSUPPORTED,
                                   "CUDA device " + std::to_string(desc->device_index) + " not visible");
            *out_ctx = create_session(*desc);
        },
        [err, err_len](gqla_status, const char* message) {
            if (err && err_len) std::snprintf(err, err_len, "%s", message);
        });
}

void vt_destroy(void* ctx) { destroy_session(static_cast<Session*>(ctx)); }

const char* vt_error_message(void* ctx) {
    return ctx ? static_cast<Session*>(ctx)->error.c_str() : t_probe_error.c_str();
}

void vt_memory_usage(void* ctx, int64_t out[4]) {
    const Session& s = *static_cast<Session*>(ctx);
    int64_t weights = 0;
    for (const DeviceBuffer& w : s.weights) weights += static_cast<int64_t>(w.bytes());
    out[0] = static_cast<int64_t>(s.pool_a.bytes() + s.pool_b.bytes());
    out[1] = static_cast<int64_t>(s.pool_kc.bytes() + s.pool_ve.bytes());
    out[2] = weights;
    out[3] = static_cast<int64_t>(s.cublas_workspace.bytes() + s.page_tables.bytes() + s.lengths.bytes() +
                                  s.q_stage.bytes() + s.o_stage.bytes() + s.lse_stage.bytes() + s.part_o.bytes() +
                                  s.part_lse2.bytes() + s.q_nope.bytes() + s.q_att.bytes() + s.o_att.bytes() +
                                  s.o_proj.bytes() + s.expand_in.bytes() + s.expand_out.bytes() + s.row_tokens.bytes() +
                                  s.staged_a.bytes() + s.staged_b.bytes() + s.transient_kc.bytes() +
                                  s.transient_ve.bytes() + s.transient_tokens.bytes() + s.widened_k.bytes() +
                                  s.widened_v.bytes() + s.widened_table.bytes() + s.widened_lengths.bytes());
}

gqla_status vt_set_weights(void* ctx, int32_t layer, const gqla_view* w) {
    return guarded(ctx, [&](Session& s) { set_weights(s, layer, *w); });
}
gqla_status vt_set_expanded(void* ctx, int32_t enable) {
    return guarded(ctx, [&](Session& s) { set_expanded(s, enable != 0); });
}
gqla_status vt_append(void* ctx, const gqla_append_args* a) {
    return guarded(ctx, [&](Session& s) { append(s, *a); });
}
gqla_status vt_expand(void* ctx, const gqla_expand_args* a) {
    return guarded(ctx, [&](Session& s) { expand(s, *a); });
}
gqla_status vt_copy_pages(void* ctx, int32_t n, const int32_t* src, const int32_t* dst) {
    return guarded(ctx, [&](Session& s) { copy_pages(s, n, src, dst); });
}
gqla_status vt_read_rows(void* ctx, const gqla_read_args* a) {
    return guarded(ctx, [&](Session& s) { read_rows(s, *a); });
}
gqla_status vt_update_sequence(void* ctx, int32_t slot, const int32_t* pages, int32_t num_pages,
                               const int64_t* lengths) {
    return guarded(ctx, [&](Session& s) { update_sequence(s, slot, pages, num_pages, lengths); });
}
gqla_status vt_decode(void* ctx, const gqla_decode_args* a) {
    return guarded(ctx, [&](Session& s) { decode(s, *a); });
}
gqla_status vt_set_stream(void* ctx, void* stream) {
    // NULL: the legacy default stream (gqla.h).
    return guarded(ctx, [&](Session& s) { switch_stream(s, static_cast<cudaStream_t>(stream)); });
}
gqla_status vt_synchronize(void* ctx) {
    return guarded(ctx, [&](Session& s) { check_cuda(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize"); });
}

// Fitted to `gqla-bench --validate-auto --device cuda` on one H200 (bf16
// cache, presets llama3-8b-gqla, mla16, deepseek-v3; batch 1/8/64 x context
// 512/4096/16384 x s_q 1/2/4, cold caches; 78 cells), priced against the
// probe's calibrated ~4430 GB/s read bandwidth and ~760 TFLOP/s bf16 peak.
// The fit is bench/fit_efficiency.py (least mean squared log error per path)
// on bench/results/h200_validate_auto.json, refitted after the latent
// kernel's per-row epilogue and the split planner's latent costs made the
// absorb path ~20 us faster at small batches: on that grid the factors
// before (0.941/0.0985/25.6 us, 1.0/0.6025/65.7 us) picked right in 75 of
// 78 cells (mean regret 0.29%, max 13.4%), these in 76 (0.12%, 9.2%, every
// prediction within 35%); the grid rerun with these: 78 of 78, no regret.
// That file now holds the latest rerun of the grid; the grid fitted, earlier
// fits and the cells they missed: this comment's and that file's git history.
//   GQA path: streams the expanded cache at ~0.99 of the probe bandwidth
//     (the narrow-group kernel; less on short or single sequences where the
//     split combine and launches weigh in); its compute factor (0.09 of the
//     tensor peak) only shows at s_q = 4, where the row blocks of a group
//     re-read each tile from L2 (or, at large batches and long sequences,
//     share it: the shared K/V rings), so it is the least certain number here;
//     ~20 us per call.
//   Absorb path: the full probe bandwidth and 0.63 of the tensor peak (the
//     sm_90a latent kernel: softmax and score products overlapped with the
//     value products), ~48 us per call: three to six launches (cuBLAS q
//     projection, attention, cuBLAS o projection; a q pack, a split combine
//     and an o unpack where the call needs them)
//     against one fused kernel on the GQA path. A memory factor of 1 with a
//     large fixed cost is how the fit spreads a kernel near the bandwidth
//     plus those launches; the product of the two is what is measured.
// Refit (rerun the bench, then the script) whenever these kernels change.
//   Prefill chunks (GQA form, >= kPrefillMinQueries queries and
//     kPrefillRows rows per group, where the sm_90a prefill kernel serves
//     the device and the dims): 0.55 of the tensor peak, keys 128 or 192
//     wide. Fitted on the H200 (bf16, against the probe's ~752 TFLOP/s and
//     the 20.3 us above) over the kept-cache cells of validate-auto's
//     prefill grid at context 4096/16384 (s_q 512 and 2048 x batch 1/8/64)
//     with the warp-specialized TMA prefill kernel: keys 128
//     (LLaMA-3-8B-GQLA, MLA-16) 0.41-0.67, keys 192 (DeepSeek-V3)
//     0.48-0.65, median 0.55; GQA 32/8 s_q 512 / 2048 at 90.5 / 270.9 us:
//     0.61 / 0.55. Context-512 cells run at ~0.13 (a 512-token chunk
//     over 512 cached tokens is one diagonal tile per row block) and are
//     not fitted: their choices do not depend on the factor. The earlier
//     0.40 was fitted on the cp.async kernel this one replaced.
//     Chunks of 64-127 queries of one head per group (MLA) run half-used
//     blocks (kPrefillHalfRows): priced at 0.55 x rows / 128. DeepSeek-V3
//     at B = 8, T = 4096, s_q 64 / 96: 812 / 830 us measured, 846 / 841
//     priced (the streaming kernels before: 3895 / 7072 us).
//     fp8_e4m3 caches (keys 128): 0.50, the bf16 factor times the measured
//     ratio to bf16 (H100, GQA 32/8 T=4096, one run): over pages widened to
//     bf16 (fp8_widening.hpp, TMA boxes) B=1 s_q 512 / 2048 at 0.91 / 0.97
//     of bf16's rate, B=8 s_q 512 at 0.89; launches of fewer than 4 row
//     blocks per group on the 8-bit variant at 0.5-0.8. Not refitted on a
//     grid.
//   Sparse calls in the GQA form (kept or transient) gather one row per
//     group, position and query with cp.async instead of TMA pages: 0.5 of
//     the GQA path's memory factor. On the H200's validate-auto sparse grid
//     (bf16, K 256/2048 of T 65536, batch 1/64, s_q 1/4) those cells ran at
//     1.0-1.3x their prediction with 0.5 and ~2.1x with none, and AUTO took
//     the GQA path in 5 cells where absorb was 7-109% faster; with 0.5 the
//     model picks the measured-faster form in 18 of 20 cells (the misses:
//     7% and 25%).
//   Absorb path over an 8-bit latent (GQLA, fp8_e4m3): memory 0.685 and
//     compute 0.353, the factors above times each kernel's measured rate
//     against the bf16 one in the same run (H100, 2026-12-07; not refitted
//     on a grid): LLaMA-3-8B-GQLA B = 64, T = 16384 (the transposed 32-row
//     kernel, bandwidth-bound) read 1.92 TB/s against bf16's 2.79 (0.688);
//     DeepSeek-V3 B = 64, T = 16384 (the 64-row kernel over half tiles,
//     compute-bound) 1042.0 us against 586.3 (0.563). With the bf16 factors
//     the model priced DeepSeek-V3's 8-bit decode at about half its time.
//   GQA_TRANSIENT calls: 30 us for their expansion's launches (the token
//     list, gather, cuBLAS GEMM and scatter per chunk) on top of the GQA
//     path's own. Without it the transient form of a small call was priced
//     at about half its time (s_q 64 prefill chunks, sparse calls at batch
//     1: 46-96 us measured, 22-30 predicted) and AUTO took it over absorb
//     in cells where absorb was up to 2x faster: on the H200's grids
//     (sessions without the kept cache) 55 of 63 prefill cells right (max
//     regret 72%) and 13 of 20 sparse cells (max 99%), with it 57 of 63
//     (max 31%) and 20 of 20 in a replay of the same measurements.
void vt_efficiency(const gqla_backend_desc* desc, gqla_backend_efficiency* inout) {
    inout->memory[0] = 0.992;
    inout->compute[0] = 0.0925;
    inout->overhead_s[0] = 20.3e-6;
    inout->memory[1] = 0.995;
    inout->compute[1] = 0.6275;
    inout->overhead_s[1] = 48.0e-6;
    inout->sparse_gqa_memory = 0.5;
    inout->transient_overhead_s = 30e-6;
    if (desc == nullptr) return;
    if (desc->kind == GQLA_KIND_GQLA && desc->cache_dtype == GQLA_DTYPE_FP8_E4M3) {
        inout->memory[1] = 0.685;
        inout->compute[1] = 0.353;
    }
    if (desc->num_kv_heads <= 0 || !prefill_wgmma_serves(read_tuning(), desc->device_index)) return;
    AttentionParams p{};
    const bool gqla = desc->kind == GQLA_KIND_GQLA;
    // A GQLA session's GQA-form launches with an 8-bit cache read bf16
    // transient rows (its expanded cache is not kept: session.cpp).
    const bool fp8_launch = desc->cache_dtype == GQLA_DTYPE_FP8_E4M3 && !gqla;
    p.cache_dtype = gqla && desc->cache_dtype == GQLA_DTYPE_FP8_E4M3 ? GQLA_DTYPE_BF16 : desc->cache_dtype;
    p.k1.dim = gqla ? desc->nope_dim : desc->head_dim;
    p.k2.dim = gqla ? desc->rope_dim : 0;
    p.v.dim = desc->value_dim > 0 ? desc->value_dim : desc->head_dim;
    p.num_heads = desc->num_heads;
    p.heads_per_group = desc->num_heads / desc->num_kv_heads;
    if (!prefill_wgmma_fits(p)) return;
    inout->prefill_compute = fp8_launch ? 0.50 : 0.55;
    inout->prefill_min_queries = kPrefillMinQueries;
    inout->prefill_min_rows = kPrefillRows;
    inout->prefill_half_rows = kPrefillHalfRows;
}

const gqla_backend_vtable kVtable = {
    GQLA_BACKEND_ABI_VERSION,
    sizeof(gqla_backend_vtable),
    "cuda",
    GQLA_DEVICE_CUDA,
    vt_device_count,
    vt_probe,
    vt_create,
    vt_destroy,
    vt_error_message,
    vt_memory_usage,
    vt_set_weights,
    vt_set_expanded,
    vt_append,
    vt_expand,
    vt_copy_pages,
    vt_update_sequence,
    vt_decode,
    vt_set_stream,
    vt_synchronize,
    vt_efficiency,
    vt_read_rows,
    // 8-bit caches: GQA kind only (session.cpp refuses the rest at create),
    // sparse calls included (the narrow and per-warp kernels gather listed
    // rows and their scales as they gather a page table's).
    GQLA_BACKEND_FEATURE_DROP_LATENT | GQLA_BACKEND_FEATURE_FP8_CACHE | GQLA_BACKEND_FEATURE_SPARSE |
        GQLA_BACKEND_FEATURE_SPARSE_FP8 | GQLA_BACKEND_FEATURE_FP8_ROWS,
};

}  // namespace

}  // namespace gqla::cuda

extern "C" __attribute__((visibility("default"))) const gqla_backend_vtable* gqla_cuda_backend_get(
    uint32_t abi_version) {
    return abi_version == GQLA_BACKEND_ABI_VERSION ? &gqla::cuda::kVtable : nullptr;
}

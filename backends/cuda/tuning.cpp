// SPDX-License-Identifier: Apache-2.0
// See tuning.hpp.
#include "tuning.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "prefill_wgmma.hpp"

namespace gqla::cuda {

namespace {

// On unless the value starts with '0'.
bool knob_on(const char* name) {
    const char* v = std::getenv(name);
    return !(v && *v == '0');
}

// Unset or empty -1 (planned), a value starting with '0' 0 (never), anything else 1 (always).
int knob_choice(const char* name) {
    const char* v = std::getenv(name);
    return !(v && *v) ? -1 : *v == '0' ? 0 : 1;
}

// The number the knob holds, clamped to [lo, hi]; `fallback` when unset or empty.
int knob_int(const char* name, int fallback, int lo, int hi) {
    const char* v = std::getenv(name);
    return v && *v ? std::clamp(std::atoi(v), lo, hi) : fallback;
}

}  // namespace

Tuning read_tuning() {
    Tuning t;
    const char* trace = std::getenv("GQLA_CUDA_TRACE");
    t.trace = trace && *trace && *trace != '0';
    t.warp_kernel = knob_on("GQLA_CUDA_WARP_KERNEL");
    t.narrow_kernel = knob_on("GQLA_CUDA_NARROW_KERNEL");
    t.narrow_tma = knob_on("GQLA_CUDA_NARROW_TMA");
    t.narrow_fixed_dims = knob_on("GQLA_CUDA_NARROW_FIXED_DIMS");
    t.latent_wgmma = knob_on("GQLA_CUDA_LATENT_WGMMA");
    t.latent_tma = knob_on("GQLA_CUDA_LATENT_TMA");
    t.latent_pdl = knob_on("GQLA_CUDA_LATENT_PDL");
    t.prefill_wgmma = knob_on("GQLA_CUDA_PREFILL_WGMMA");
    t.prefill_turns = knob_on("GQLA_CUDA_PREFILL_TURNS");
    t.fp8_widen = knob_choice("GQLA_CUDA_FP8_WIDEN");
    t.pdl = knob_on("GQLA_CUDA_PDL");
    t.cluster_merge = knob_on("GQLA_CUDA_CLUSTER_MERGE");
    t.query_in_place = knob_on("GQLA_CUDA_QUERY_IN_PLACE");
    t.head_weights = knob_on("GQLA_CUDA_HEAD_WEIGHTS");
    t.cublaslt = knob_on("GQLA_CUDA_CUBLASLT");
    t.narrow_shared = knob_choice("GQLA_CUDA_NARROW_SHARED");
    t.narrow_swizzle = knob_choice("GQLA_CUDA_NARROW_SWIZZLE");
    t.narrow_wide = knob_choice("GQLA_CUDA_NARROW_WIDE");
    t.latent_transposed = knob_int("GQLA_CUDA_LATENT_TRANSPOSED", 1, 0, 2);
    t.pinned_stages = knob_int("GQLA_CUDA_STAGES", 0, 2, 5);
    t.narrow_max_rows = knob_int("GQLA_CUDA_NARROW_MAX_ROWS", kNarrowMaxRowsDefault, kNarrowRows, 1 << 30);
    t.max_splits = knob_int("GQLA_CUDA_MAX_SPLITS", kMaxSplits, 1, 1 << 30);
    return t;
}

void print_tuning(const Tuning& t, std::FILE* out) {
    std::fprintf(out,
                 "gqla-cuda: tuning warp_kernel=%d narrow_kernel=%d narrow_tma=%d narrow_fixed_dims=%d "
                 "latent_wgmma=%d latent_tma=%d latent_pdl=%d prefill_wgmma=%d prefill_turns=%d fp8_widen=%d "
                 "pdl=%d cluster_merge=%d query_in_place=%d head_weights=%d cublaslt=%d narrow_shared=%d "
                 "narrow_swizzle=%d narrow_wide=%d latent_transposed=%d stages=%d narrow_max_rows=%d max_splits=%d\n",
                 t.warp_kernel, t.narrow_kernel, t.narrow_tma, t.narrow_fixed_dims, t.latent_wgmma, t.latent_tma,
                 t.latent_pdl, t.prefill_wgmma, t.prefill_turns, t.fp8_widen, t.pdl, t.cluster_merge, t.query_in_place,
                 t.head_weights, t.cublaslt, t.narrow_shared, t.narrow_swizzle, t.narrow_wide, t.latent_transposed,
                 t.pinned_stages, t.narrow_max_rows, t.max_splits);
}

bool prefill_wgmma_serves(const Tuning& t, int device) {
    int major = 0, minor = 0, smem_optin = 0;
    return t.prefill_wgmma &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
           cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
           prefill_wgmma_available(major, minor) && smem_optin >= prefill_wgmma_max_smem_bytes();
}

}  // namespace gqla::cuda

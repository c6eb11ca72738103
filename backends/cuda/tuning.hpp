// SPDX-License-Identifier: Apache-2.0
// Every GQLA_CUDA_* environment knob in one struct, read in one function
// when a session is created (and by the efficiency entry, which has no
// session), printed by GQLA_CUDA_TRACE. The defaults are what the planners
// and the cost model were measured with; docs/tuning.md says what each
// knob does and when to touch it. The session derives its kernel choices
// from these and the device (init_session).
#pragma once

#include <cstdio>

#include "attention_kernels.hpp"  // kNarrowMaxRowsDefault, kMaxSplits

namespace gqla::cuda {

struct Tuning {
    bool trace = false;  // GQLA_CUDA_TRACE: print the tuning and every launch plan

    // Kernels and mechanisms, on unless the knob's value starts with '0'.
    bool warp_kernel = true;        // GQLA_CUDA_WARP_KERNEL
    bool narrow_kernel = true;      // GQLA_CUDA_NARROW_KERNEL
    bool narrow_tma = true;         // GQLA_CUDA_NARROW_TMA
    bool narrow_fixed_dims = true;  // GQLA_CUDA_NARROW_FIXED_DIMS
    bool latent_wgmma = true;       // GQLA_CUDA_LATENT_WGMMA
    bool latent_tma = true;         // GQLA_CUDA_LATENT_TMA
    bool latent_pdl = true;         // GQLA_CUDA_LATENT_PDL
    bool prefill_wgmma = true;      // GQLA_CUDA_PREFILL_WGMMA
    bool prefill_turns = true;      // GQLA_CUDA_PREFILL_TURNS
    int fp8_widen = -1;             // GQLA_CUDA_FP8_WIDEN: -1 planned, 0 never, 1 every prefill-kernel launch
    bool pdl = true;                // GQLA_CUDA_PDL
    bool cluster_merge = true;      // GQLA_CUDA_CLUSTER_MERGE
    bool query_in_place = true;     // GQLA_CUDA_QUERY_IN_PLACE
    bool head_weights = true;       // GQLA_CUDA_HEAD_WEIGHTS
    bool cublaslt = true;           // GQLA_CUDA_CUBLASLT

    // Planned choices: -1 planned (unset or empty), 0 never ('0...'), 1 always.
    int narrow_shared = -1;   // GQLA_CUDA_NARROW_SHARED
    int narrow_swizzle = -1;  // GQLA_CUDA_NARROW_SWIZZLE
    int narrow_wide = -1;     // GQLA_CUDA_NARROW_WIDE

    // Numbers.
    int latent_transposed = 1;                    // GQLA_CUDA_LATENT_TRANSPOSED, 0..2
    int pinned_stages = 0;                        // GQLA_CUDA_STAGES, 2..5 (0: planned)
    int narrow_max_rows = kNarrowMaxRowsDefault;  // GQLA_CUDA_NARROW_MAX_ROWS, >= kNarrowRows
    int max_splits = kMaxSplits;                  // GQLA_CUDA_MAX_SPLITS, >= 1
};

// The knobs as the environment sets them now.
Tuning read_tuning();
// One line naming every knob and its value.
void print_tuning(const Tuning& t, std::FILE* out);

// Whether the sm_90a prefill kernel serves `device` under these knobs: the
// one decision behind a session's plans (init_session) and the prefill
// factor the efficiency entry reports.
bool prefill_wgmma_serves(const Tuning& t, int device);

}  // namespace gqla::cuda

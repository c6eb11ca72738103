// SPDX-License-Identifier: Apache-2.0
// What the --validate-auto grids share: the per-call FLOP and per-session
// byte budgets that keep each grid near a minute, and the forms a
// gqla_attention call may take, in the order of the grids' arrays.
#pragma once

#include "gqla/gqla.h"

namespace gqla::bench {

// A cell is kept when the costliest form's call stays under this many FLOPs
// (causal count): about 0.5 s on a 2-core CPU, 50-100 ms on an H200. The
// dropped cells are listed.
constexpr double kCpuCallFlops = 2e10;
constexpr double kGpuCallFlops = 3e13;
// Cache bytes one session of a grid may hold on a CPU (on a GPU: half of
// what the bench may allocate); expanding and rotating over larger caches
// costs seconds each.
constexpr double kCpuCellBytes = 1.25 * 1024 * 1024 * 1024;

// Forms a call may take, in the order of the grids' arrays.
constexpr gqla_path kForms[] = {GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA};
constexpr int kFormCount = 3;

inline int form_index(gqla_path p) {
    for (int k = 0; k < kFormCount; ++k)
        if (kForms[k] == p) return k;
    return -1;
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// Shared-memory layout of the tensor-core decode kernel, computed the same way
// on the host (launch size, occupancy) and on the device (carving).
#pragma once

#include <cstdint>

namespace gqla::cuda {

struct MmaLayout {
    int dk16, dv16;                                // key / value dims rounded up to the MMA k/n step
    int k_stride, v_stride;                        // smem row strides (elements): +8 keeps ldmatrix conflict-free
    int q_off, k_off, v_off, s_off, p_off, f_off;  // byte offsets
    int bytes;
};

__host__ __device__ inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// rows: query rows per CTA, bn: tokens per tile, `stages` K/V tiles in flight.
__host__ __device__ inline MmaLayout mma_layout(int dk, int dv, bool v_aliases_k, int rows, int bn, int stages) {
    MmaLayout L{};
    L.dk16 = round_up(dk, 16);
    L.dv16 = round_up(dv, 16);
    L.k_stride = L.dk16 + 8;
    L.v_stride = v_aliases_k ? L.k_stride : L.dv16 + 8;
    int off = 0;
    L.q_off = off;
    off += round_up(rows * L.k_stride * 2, 128);
    L.k_off = off;
    off += round_up(stages * bn * L.k_stride * 2, 128);
    L.v_off = v_aliases_k ? L.k_off : off;
    if (!v_aliases_k) off += round_up(stages * bn * L.v_stride * 2, 128);
    L.s_off = off;
    off += round_up(rows * (bn + 4) * 4, 128);
    L.p_off = off;
    off += round_up(rows * (bn + 8) * 2, 128);
    L.f_off = off;
    off += round_up(rows * 4 * 4, 128);  // limit, alpha, final m, final l
    L.bytes = off;
    return L;
}

}  // namespace gqla::cuda

// SPDX-License-Identifier: Apache-2.0
// The dimensions of a GQLA layer under the names the absorb-path drivers
// (dense and sparse) use for them; both inherit them so their arithmetic
// reads the same.
#pragma once

#include "core/backend_api.h"

namespace gqla::cpu {

struct LatentDims {
    explicit LatentDims(const gqla_backend_desc& d)
        : H_(d.num_heads),
          G_(d.num_kv_heads),
          n_rep_(d.num_heads / d.num_kv_heads),
          r_(d.latent_dim),
          dc_(d.nope_dim),
          dr_(d.rope_dim),
          dv_(d.value_dim),
          K_(d.latent_dim + d.rope_dim) {}

    int H_, G_, n_rep_;     // heads, groups, heads per group
    int r_, dc_, dr_, dv_;  // latent, key nope part, RoPE part, value widths
    int K_;                 // width of a cached row: latent then RoPE part
};

}  // namespace gqla::cpu

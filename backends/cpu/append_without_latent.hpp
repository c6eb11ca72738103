// SPDX-License-Identifier: Apache-2.0
// The CPU backend without a latent pool (desc.keep_latent = 0): appends
// expand each latent row into KC/VE at once (append_without_latent.cpp).
#pragma once

#include "backends/cpu/cpu_context.hpp"

namespace gqla::cpu {

// Writes kr into KR and W_UKV c into KC/VE of the context's groups for every
// appended row; the latent itself is not stored. Needs the layer's weights.
gqla_status append_without_latent(CpuContext* ctx, const gqla_append_args* args);

}  // namespace gqla::cpu

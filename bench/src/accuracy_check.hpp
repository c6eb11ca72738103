// SPDX-License-Identifier: Apache-2.0
// Accuracy of one configuration against the float64 reference (bounds: docs/numerics.md): a
// small batch of sequences of different lengths, fresh random inputs, output
// poisoned before the call, relative L2 error over the whole batch.
#pragma once

#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct AccuracySpec {
    const Preset* preset = nullptr;
    SessionShape shape;          // device, path, cache dtype, threads, page size
    int s_q = 1;
    int lengths[2] = {37, 70};   // short on purpose: the reference is O(L*H*r*(d_c+d_v)) in float64
};

// ||o - ref|| / ||ref|| over the batch; throws GqlaError when a call fails.
double relative_error_vs_reference(const AccuracySpec& spec);

// The error bound docs/numerics.md sets for a cache dtype; with q and o in `io`, the
// looser of the cache's and the io dtype's (o is rounded to it).
double error_bound(gqla_dtype cache);
double error_bound(gqla_dtype cache, gqla_dtype io);

}  // namespace gqla::bench

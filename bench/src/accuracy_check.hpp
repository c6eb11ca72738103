// SPDX-License-Identifier: Apache-2.0
// Accuracy of one configuration against the float64 reference (bounds:
// docs/numerics.md): a small batch of sequences of different lengths, each
// long enough to hold its queries plus a few tokens, fresh random inputs,
// output poisoned before the call, relative L2 error over the checked query
// rows (every row of short chunks; blocks at the start, middle and end of
// long ones: reference_rows.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct AccuracySpec {
    const Preset* preset = nullptr;
    SessionShape shape;  // device, session path, cache dtype, io dtype, threads, page size
    int s_q = 1;         // uniform calls: queries per sequence
    // gqla_attention with `call_path` (the check fails when another form
    // runs) instead of gqla_decode on the session's path.
    bool attention = false;
    gqla_path call_path = GQLA_PATH_AUTO;
    // Ragged call: queries per sequence, rows packed (implies attention);
    // empty: uniform s_q.
    std::vector<int32_t> q_lens;
};

// ||o - ref|| / ||ref|| over the checked rows; throws GqlaError when a call fails.
double relative_error_vs_reference(const AccuracySpec& spec);

// The error bound docs/numerics.md sets for a cache dtype; with q and o in `io`, the
// looser of the cache's and the io dtype's (o is rounded to it).
double error_bound(gqla_dtype cache);
double error_bound(gqla_dtype cache, gqla_dtype io);

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// The comparison point: decode attention written the way a straightforward
// framework implementation does it, in plain loops over the same cache dtype.
//   GQA : the cache holds K/V per KV head; every step first repeats them for
//         each query head (repeat_kv), then attends head by head.
//   GQLA: the cache holds keys and values materialized per query head (what a
//         naive MLA implementation caches after kv_b_proj), then attends head
//         by head. Materializing them is setup, not timed.
// Multi-threaded over (sequence, head) with OpenMP.
#pragma once

#include <cstdint>
#include <string>

#include "gqla/gqla.h"
#include "presets.hpp"

namespace gqla::bench {

struct NaiveResult {
    bool ran = false;
    double seconds = 0;   // median per decode call
    std::string skipped;  // why it did not run
};

NaiveResult time_naive_baseline(const Preset& p, gqla_dtype cache, int batch, int64_t context, int s_q, int threads,
                                int reps, bool hot, double cold_bytes, uint64_t memory_cap);

}  // namespace gqla::bench

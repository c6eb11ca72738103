// SPDX-License-Identifier: Apache-2.0
// gqla-bench --shards N: tensor parallelism over query-head groups, one
// session per rank (config.group_begin / group_count), run in turn (on the
// CPU, or with --device cuda on GPU rank mod the GPUs visible, q and o in
// that GPU's memory, device time by CUDA events), against the full session
// of the same layer.
#pragma once

#include "options.hpp"

namespace gqla::bench {

// For every preset x path x cache dtype x batch x context x s_q: a full
// session and N shard sessions of G/N groups each hold the same tokens;
// the shards' outputs, gathered over heads, are checked against the full
// session's (within the cache dtype's bound of docs/numerics.md), and each
// rank's cache bytes per token (kept, expanded: gqla_stats) and decode time
// (median of --reps cold calls) are reported beside the full session's time
// divided by N. Shards drop the latent (keep_latent = 0) on the GQA path
// unless --keep-latent 1; the absorb path needs it. Returns the exit code.
int run_shard_bench(const Options& opt);

}  // namespace gqla::bench

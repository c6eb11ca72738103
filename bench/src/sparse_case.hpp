// SPDX-License-Identifier: Apache-2.0
// gqla-bench --topk K: sparse (top-k) attention against dense attention over
// the same number of tokens.
#pragma once

#include "options.hpp"

namespace gqla::bench {

// For every preset x path x cache dtype x batch x context T x s_q: the
// median of gqla_attention calls whose queries each list K positions drawn
// at random without replacement from their visible prefix of T tokens and
// sorted (as an indexer gives them), beside dense calls on sequences of
// min(K, T) tokens on the same path. Cold: a sweep of 64 MiB before every
// timed call (--hot: none). Returns the process exit code.
int run_sparse_bench(const Options& opt);

}  // namespace gqla::bench

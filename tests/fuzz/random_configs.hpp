// SPDX-License-Identifier: Apache-2.0
// Random session configs for the API-sequence fuzzer: both kinds, every
// dtype (8-bit caches with run.features.fp8), odd head and latent sizes, tiny
// page pools and byte budgets, GQLA sessions without the latent, small
// max_q_tokens, and configs with one field out of range that gqla must
// refuse.
#pragma once

#include <vector>

#include "gqla/gqla.h"
#include "tests/fuzz/fuzz_run.hpp"

namespace fuzz {

// Every dtype a cache, an io tensor or a weight may have.
extern const std::vector<gqla_dtype> kDtypes;

// A valid config (gqla_config_validate must accept it).
gqla_config random_config(Random& r);

// Bytes one token costs in one layer (gqla_stats.kept_bytes_per_token and
// expanded_bytes_per_token), from docs/fp8-cache.md and docs/sharding.md:
// 16- and 32-bit caches their elements; an 8-bit cache one byte per element
// plus an f32 scale per (token, KV head or group) of K, V, KC and VE and per
// (token, 128-element block) of the latent, whose rope key stays bf16. A
// session without the latent keeps kr only (its expanded rows are counted
// as expanded). `c` must have its dims resolved (value_dim, head_dim).
void bytes_per_token(const gqla_config& c, int64_t* kept, int64_t* expanded);

// With run.features.shards, a valid config `c` becomes, at times, a shard
// of its layer: groups [group_begin, group_begin + group_count), drawn from
// a source of its own (seeded by the run's seed and session count), so the
// main source draws what it would without shards. At times it also returns
// true with *broken = c but for a group range outside the layer, which
// validate and create must refuse.
bool draw_shard(gqla_config& c, gqla_config* broken);

// The unsharded config a shard session behaves as (docs/sharding.md): its
// group_count groups and their heads, numbered from 0. Other configs as given.
gqla_config shard_view(const gqla_config& resolved);

// One field pushed out of its range; every such config must be refused.
void break_config(Random& r, gqla_config& c);

}  // namespace fuzz

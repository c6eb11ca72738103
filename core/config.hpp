// SPDX-License-Identifier: Apache-2.0
// gqla_config: defaults, field-by-field validation and resolution of the
// "0 = default" fields into the values a session actually uses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gqla/gqla.h"

namespace gqla {

// Bytes of gqla_config as version 1 defined it (through num_threads); callers
// compiled against a newer header pass more and the extra fields are ignored.
constexpr size_t kConfigV1Size = offsetof(gqla_config, num_threads) + sizeof(int32_t);

// Sane upper bounds: beyond them something is surely wrong (and products of
// dims stay far from int32/int64 overflow).
constexpr int32_t kMaxHeads = 4096;
constexpr int32_t kMaxHeadDim = 4096;
constexpr int32_t kMaxLatentDim = 65536;
constexpr int32_t kMaxLayers = 4096;
constexpr int32_t kMaxPageSize = 4096;
constexpr int32_t kMaxSequences = 1 << 20;
constexpr int32_t kMaxBatch = 1 << 16;
constexpr int32_t kMaxQLen = 65536;
// Query rows of one call (sum of q_lens); the workspaces scale with it.
constexpr int64_t kMaxQTokens = int64_t(1) << 22;
constexpr int32_t kMaxThreads = 4096;
// Pages of one pool: every page costs 8 bytes of host bookkeeping (refcount
// and free-list slot), so the cap keeps that under 128 MiB. Pages of 64
// tokens then still hold 2^30 tokens, more than any device stores.
constexpr int64_t kMaxPages = int64_t(1) << 24;

// Defaults for `kind`; dims left 0. Throws INVALID_ARGUMENT for an unknown kind.
// By reference: a C caller may pass any int, which must not be loaded as the enum.
gqla_config default_config(const gqla_kind& kind);

// Copy a caller's config (checking pointer and struct_size) into a full
// current-version struct. `name` is the argument name used in messages.
gqla_config read_config(const gqla_config* user, const char* name = "cfg");

// Field checks that need no device: throws INVALID_ARGUMENT naming the first
// bad field ("config.num_kv_heads: 5 does not divide num_heads 32").
void validate_config(const gqla_config& cfg);

// Fill value_dim, softmax_scale and (for GQLA) head_dim = d_c + d_r; zero the
// dims of the other kind. cfg must be valid. Used by sessions and by pure
// cost prediction alike.
void resolve_dims(gqla_config& cfg);

// Bytes per token and layer of the always-kept cache (GQA: K+V, GQLA: c+kr)
// and of the expanded cache (GQLA: KC+VE; 0 for GQA). cfg must be valid.
// Both are of this session's groups only (a shard's share) and include the
// f32 scales of 8-bit caches; a GQLA config with keep_latent = 0 keeps kr
// only, and its expanded cache is resident for the session's whole life.
int64_t kept_bytes_per_token_layer(const gqla_config& cfg);
int64_t expanded_bytes_per_token_layer(const gqla_config& cfg);
// What the page pool holds for every token whatever the path: kept, plus the
// expanded cache when keep_latent = 0. memory_budget_bytes is spent on it.
int64_t resident_bytes_per_token_layer(const gqla_config& cfg);
// Groups and query heads this session serves (group_count, 0 = all).
int32_t shard_groups(const gqla_config& cfg);
int32_t shard_heads(const gqla_config& cfg);
// The layer a shard serves, as a whole layer of its own: num_heads =
// shard_heads, num_kv_heads = shard_groups, group_begin 0 and group_count =
// num_kv_heads; every other field as in cfg. What the backend is created
// from and what the shape checks and the cost model see (docs/sharding.md).
// Identity for an unsharded config (group_count resolved to num_kv_heads).
gqla_config served_layer(const gqla_config& cfg);
// Elements of r that share one scale in an 8-bit latent cache.
constexpr int32_t kFp8LatentBlock = 128;

// Number of pages the pool gets: max_tokens rounded up to whole pages, or the
// whole pages memory_budget_bytes holds when max_tokens == 0. Throws
// INVALID_ARGUMENT when that is 0, more than kMaxPages, or overflows the
// cache size in bytes.
int64_t resolve_num_pages(const gqla_config& cfg);

// Threads the CPU backend uses: num_threads, or when 0 the CPUs of this
// process's affinity mask, capped by its cgroup CPU quota (usable_cpu_count).
int32_t resolve_num_threads(int32_t requested);

// validate + resolve_dims + pages/threads filled in + max_batch clamped to
// max_sequences. `device` is the resolved device (CPU or CUDA).
gqla_config resolve_config(const gqla_config& cfg, gqla_device_type device);

}  // namespace gqla

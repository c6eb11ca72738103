// SPDX-License-Identifier: Apache-2.0
#include "core/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_topology.hpp"
#include "core/dtype.hpp"
#include "core/enum_value.hpp"
#include "core/error.hpp"

namespace gqla {
namespace {

void check_range(const char* field, int64_t value, int64_t lo, int64_t hi, const char* what = "") {
    if (value < lo || value > hi)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.%s: expected %lld..%lld%s, got %lld", field, static_cast<long long>(lo),
             static_cast<long long>(hi), what, static_cast<long long>(value));
}

void check_io_dtype(int value) {
    if (!dtype_valid(value))
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.io_dtype: expected GQLA_DTYPE_F32, _F16 or _BF16 (1..3), got %d%s",
             value, value == GQLA_DTYPE_FP8_E4M3 ? " (FP8_E4M3 is a cache_dtype only)" : "");
}

void check_cache_dtype(int value) {
    if (!cache_dtype_valid(value))
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "config.cache_dtype: expected GQLA_DTYPE_F32, _F16, _BF16 or _FP8_E4M3 (1..4), got %d", value);
}

void check_shard(const gqla_config& c) {
    if (c.group_count < 0 || c.group_count > c.num_kv_heads)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.group_count: expected 0 (all groups) or 1..num_kv_heads (%d), got %d",
             c.num_kv_heads, c.group_count);
    const int32_t count = c.group_count ? c.group_count : c.num_kv_heads;
    if (c.group_begin < 0 || c.group_begin > c.num_kv_heads - count)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "config.group_begin: expected 0..%d so that group_begin + group_count (%d) <= num_kv_heads (%d), got %d",
             c.num_kv_heads - count, count, c.num_kv_heads, c.group_begin);
    if (c.keep_latent != 0 && c.keep_latent != 1)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.keep_latent: expected 0 or 1, got %d", c.keep_latent);
    if (c.keep_latent == 0 && c.kind != GQLA_KIND_GQLA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.keep_latent: 0 needs a GQLA config (kind is GQA, which has no latent)");
    if (c.keep_latent == 0 && enum_value(c.path) == GQLA_PATH_ABSORB)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "config.path: GQLA_PATH_ABSORB needs the latent, which config.keep_latent = 0 drops (expected AUTO or "
             "GQA)");
}

bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

gqla_config default_config(const gqla_kind& kind) {
    const int k = enum_value(kind);
    if (k != GQLA_KIND_GQA && k != GQLA_KIND_GQLA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "kind: expected GQLA_KIND_GQA (1) or GQLA_KIND_GQLA (2), got %d", k);
    gqla_config cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.struct_size = sizeof(gqla_config);
    cfg.kind = kind;
    cfg.num_layers = 1;
    cfg.cache_dtype = GQLA_DTYPE_BF16;
    cfg.io_dtype = GQLA_DTYPE_F32;
    cfg.softmax_scale = 0.0f;
    cfg.page_size = 64;
    cfg.max_tokens = 65536;
    cfg.memory_budget_bytes = 0;
    cfg.max_sequences = 256;
    cfg.max_batch = 256;
    cfg.max_q_len = 16;
    cfg.device = GQLA_DEVICE_AUTO;
    cfg.device_index = 0;
    cfg.path = GQLA_PATH_AUTO;
    cfg.num_threads = 0;
    cfg.max_q_tokens = 0;
    cfg.group_begin = 0;
    cfg.group_count = 0;
    cfg.keep_latent = 1;
    return cfg;
}

gqla_config read_config(const gqla_config* user, const char* name) {
    if (user == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: NULL (expected a gqla_config)", name);
    if (user->struct_size < kConfigV1Size)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "%s->struct_size: expected >= %zu (sizeof(gqla_config); use gqla_config_default), got %zu", name,
             kConfigV1Size, user->struct_size);
    gqla_config cfg = default_config(GQLA_KIND_GQA);
    size_t n = user->struct_size < sizeof(gqla_config) ? user->struct_size : sizeof(gqla_config);
    std::memcpy(&cfg, user, n);
    cfg.struct_size = sizeof(gqla_config);
    return cfg;
}

void validate_config(const gqla_config& c) {
    if (enum_value(c.kind) != GQLA_KIND_GQA && enum_value(c.kind) != GQLA_KIND_GQLA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.kind: expected GQLA_KIND_GQA (1) or GQLA_KIND_GQLA (2), got %d",
             enum_value(c.kind));
    check_range("num_heads", c.num_heads, 1, kMaxHeads);
    if (c.num_kv_heads < 1 || c.num_kv_heads > c.num_heads)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.num_kv_heads: expected 1..num_heads (%d), got %d", c.num_heads,
             c.num_kv_heads);
    if (c.num_heads % c.num_kv_heads != 0)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.num_kv_heads: %d does not divide num_heads %d", c.num_kv_heads,
             c.num_heads);
    if (c.kind == GQLA_KIND_GQA) {
        check_range("head_dim", c.head_dim, 1, kMaxHeadDim, " (required for a GQA config)");
        check_range("value_dim", c.value_dim, 0, kMaxHeadDim, " (0 = head_dim)");
    } else {
        check_range("latent_dim", c.latent_dim, 1, kMaxLatentDim, " (required for a GQLA config)");
        check_range("nope_dim", c.nope_dim, 1, kMaxHeadDim, " (required for a GQLA config)");
        check_range("rope_dim", c.rope_dim, 1, kMaxHeadDim, " (required for a GQLA config)");
        check_range("value_dim", c.value_dim, 1, kMaxHeadDim, " (required for a GQLA config)");
    }
    check_range("num_layers", c.num_layers, 1, kMaxLayers);
    check_cache_dtype(enum_value(c.cache_dtype));
    check_io_dtype(enum_value(c.io_dtype));
    if (!std::isfinite(c.softmax_scale) || c.softmax_scale < 0.0f)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.softmax_scale: expected a finite value >= 0 (0 = default), got %g",
             static_cast<double>(c.softmax_scale));
    check_range("page_size", c.page_size, 1, kMaxPageSize);
    if (c.max_tokens < 0)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.max_tokens: expected >= 0 (0 = from memory_budget_bytes), got %lld",
             static_cast<long long>(c.max_tokens));
    if (c.max_tokens == 0 && c.memory_budget_bytes <= 0)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "config.memory_budget_bytes: expected > 0 when config.max_tokens is 0, got %lld",
             static_cast<long long>(c.memory_budget_bytes));
    if (c.memory_budget_bytes < 0)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.memory_budget_bytes: expected >= 0, got %lld",
             static_cast<long long>(c.memory_budget_bytes));
    check_range("max_sequences", c.max_sequences, 1, kMaxSequences);
    check_range("max_batch", c.max_batch, 1, kMaxBatch);
    check_range("max_q_len", c.max_q_len, 1, kMaxQLen);
    if (c.max_q_tokens < 0 || c.max_q_tokens > kMaxQTokens)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.max_q_tokens: expected 0 (max_batch * max_q_len) or 1..%lld, got %lld",
             static_cast<long long>(kMaxQTokens), static_cast<long long>(c.max_q_tokens));
    const int device = enum_value(c.device);
    if (device != GQLA_DEVICE_AUTO && device != GQLA_DEVICE_CPU && device != GQLA_DEVICE_CUDA)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.device: expected GQLA_DEVICE_AUTO, _CPU or _CUDA (0..2), got %d",
             device);
    check_range("device_index", c.device_index, 0, 1023);
    const int path = enum_value(c.path);
    if (path != GQLA_PATH_AUTO && path != GQLA_PATH_GQA && path != GQLA_PATH_ABSORB)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.path: expected GQLA_PATH_AUTO, _GQA or _ABSORB (0..2), got %d", path);
    if (c.kind == GQLA_KIND_GQA && c.path == GQLA_PATH_ABSORB)
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.path: GQLA_PATH_ABSORB needs a GQLA config (kind is GQA)");
    check_range("num_threads", c.num_threads, 0, kMaxThreads, " (0 = one per available core)");
    check_shard(c);
    resolve_num_pages(c);  // capacity: zero pages or overflow
}

void resolve_dims(gqla_config& c) {
    if (c.kind == GQLA_KIND_GQA) {
        if (c.value_dim == 0) c.value_dim = c.head_dim;
        c.latent_dim = c.nope_dim = c.rope_dim = 0;
        if (c.softmax_scale == 0.0f) c.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
    } else {
        c.head_dim = c.nope_dim + c.rope_dim;
        if (c.softmax_scale == 0.0f)
            c.softmax_scale = static_cast<float>(1.0 / std::sqrt(double(c.nope_dim + c.rope_dim)));
    }
}

int32_t shard_groups(const gqla_config& c) { return c.group_count ? c.group_count : c.num_kv_heads; }

int32_t shard_heads(const gqla_config& c) { return shard_groups(c) * (c.num_heads / c.num_kv_heads); }

gqla_config served_layer(const gqla_config& c) {
    gqla_config s = c;
    s.num_heads = shard_heads(c);
    s.num_kv_heads = shard_groups(c);
    s.group_begin = 0;
    s.group_count = s.num_kv_heads;
    return s;
}

// Bytes of `elems` cache elements that share `scales` f32 scales: 8-bit
// caches store one scale per row group beside the rows (docs/fp8-cache.md).
static int64_t cache_row_bytes(const gqla_config& c, int64_t elems, int64_t scales) {
    if (c.cache_dtype == GQLA_DTYPE_FP8_E4M3) return elems + scales * 4;
    return elems * static_cast<int64_t>(dtype_size(c.cache_dtype));
}

// The 8-bit latent keeps its RoPE key kr in bf16 (precision-sensitive).
static int64_t rope_key_bytes(const gqla_config& c) {
    const int64_t es = c.cache_dtype == GQLA_DTYPE_FP8_E4M3 ? 2 : static_cast<int64_t>(dtype_size(c.cache_dtype));
    return int64_t(c.rope_dim) * es;
}

int64_t kept_bytes_per_token_layer(const gqla_config& c) {
    const int64_t groups = shard_groups(c);
    if (c.kind == GQLA_KIND_GQA) {
        const int64_t dv = c.value_dim ? c.value_dim : c.head_dim;
        // One scale per (token, KV head) for K and one for V.
        return cache_row_bytes(c, groups * (c.head_dim + dv), 2 * groups);
    }
    const int64_t latent =
        c.keep_latent ? cache_row_bytes(c, c.latent_dim, (c.latent_dim + kFp8LatentBlock - 1) / kFp8LatentBlock) : 0;
    return latent + rope_key_bytes(c);
}

int64_t expanded_bytes_per_token_layer(const gqla_config& c) {
    if (c.kind != GQLA_KIND_GQLA) return 0;
    const int64_t groups = shard_groups(c);
    // One scale per (token, group) for the keys and one for the values.
    return cache_row_bytes(c, groups * (c.nope_dim + c.value_dim), 2 * groups);
}

int64_t resident_bytes_per_token_layer(const gqla_config& c) {
    return kept_bytes_per_token_layer(c) +
           (c.kind == GQLA_KIND_GQLA && !c.keep_latent ? expanded_bytes_per_token_layer(c) : 0);
}

int64_t resolve_num_pages(const gqla_config& c) {
    const int64_t page = c.page_size;
    const int64_t per_token = resident_bytes_per_token_layer(c) * c.num_layers;  // small: dims are bounded
    int64_t pages;
    if (c.max_tokens > 0) {
        pages = c.max_tokens / page + (c.max_tokens % page != 0);
        if (pages > kMaxPages)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "config.max_tokens: %lld needs %lld pages of %d tokens, more than the limit of %lld pages; expected "
                 "at most %lld tokens (or a larger config.page_size)",
                 static_cast<long long>(c.max_tokens), static_cast<long long>(pages), c.page_size,
                 static_cast<long long>(kMaxPages), static_cast<long long>(kMaxPages * page));
    } else {
        int64_t page_bytes = per_token * page;
        pages = c.memory_budget_bytes / page_bytes;
        if (pages == 0)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "config.memory_budget_bytes: %lld bytes hold no page (one page of %d tokens x %d layers needs %lld "
                 "bytes)",
                 static_cast<long long>(c.memory_budget_bytes), c.page_size, c.num_layers,
                 static_cast<long long>(page_bytes));
        if (pages > kMaxPages)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "config.memory_budget_bytes: %lld bytes hold %lld pages of %d tokens, more than the limit of %lld "
                 "pages; expected at most %lld bytes (or a larger config.page_size, or config.max_tokens)",
                 static_cast<long long>(c.memory_budget_bytes), static_cast<long long>(pages), c.page_size,
                 static_cast<long long>(kMaxPages), static_cast<long long>(kMaxPages * page_bytes + page_bytes - 1));
    }
    int64_t tokens, kept, expanded;
    int64_t expanded_per_token = (c.keep_latent ? expanded_bytes_per_token_layer(c) : 0) * c.num_layers;
    if (!mul_ok(pages, page, &tokens) || !mul_ok(tokens, per_token, &kept) ||
        !mul_ok(tokens, expanded_per_token, &expanded) || kept + expanded < 0 ||
        static_cast<uint64_t>(kept) + static_cast<uint64_t>(expanded) > static_cast<uint64_t>(SIZE_MAX / 2))
        fail(GQLA_ERR_INVALID_ARGUMENT, "config.max_tokens: %lld pages of %d tokens overflow the cache size in bytes",
             static_cast<long long>(pages), c.page_size);
    return pages;
}

int32_t resolve_num_threads(int32_t requested) { return requested > 0 ? requested : usable_cpu_count(); }

gqla_config resolve_config(const gqla_config& in, gqla_device_type device) {
    validate_config(in);
    gqla_config c = in;
    resolve_dims(c);
    c.device = device;
    int64_t pages = resolve_num_pages(in);
    c.max_tokens = pages * c.page_size;
    c.num_threads = resolve_num_threads(in.num_threads);
    if (c.max_batch > c.max_sequences) c.max_batch = c.max_sequences;  // a batch holds distinct sequences
    if (c.group_count == 0) c.group_count = c.num_kv_heads;
    if (c.max_q_tokens == 0)  // 1.0 sized its workspaces for max_batch full-length calls
        c.max_q_tokens = std::min(static_cast<int64_t>(c.max_batch) * c.max_q_len, kMaxQTokens);
    return c;
}

}  // namespace gqla

// SPDX-License-Identifier: Apache-2.0
// The random valid and broken configs of random_configs.hpp.
#include "tests/fuzz/random_configs.hpp"

#include <cstdint>

namespace fuzz {

const std::vector<gqla_dtype> kDtypes = {GQLA_DTYPE_F32, GQLA_DTYPE_F16, GQLA_DTYPE_BF16};

void bytes_per_token(const gqla_config& c, int64_t* kept, int64_t* expanded) {
    const bool fp8 = c.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    const int64_t es = c.cache_dtype == GQLA_DTYPE_F32 ? 4 : fp8 ? 1 : 2;
    const int64_t G = c.num_kv_heads;
    // Elements of rows that share one scale per row group (8-bit caches).
    auto rows = [&](int64_t elems, int64_t groups) { return elems * es + (fp8 ? 4 * groups : 0); };
    if (c.kind == GQLA_KIND_GQA) {
        *kept = rows(G * (c.head_dim + c.value_dim), 2 * G);
        *expanded = 0;
        return;
    }
    const int64_t kr = int64_t(c.rope_dim) * (fp8 ? 2 : es);
    *kept = (c.keep_latent ? rows(c.latent_dim, (c.latent_dim + 127) / 128) : 0) + kr;
    *expanded = rows(G * (c.nope_dim + c.value_dim), 2 * G);
}

namespace {

// The draws of the features added later (fuzz_run.hpp), after all of the
// first version's: with the features off, a seed draws what it drew before.
void draw_features(Random& r, gqla_config& c) {
    const Features& f = run.features;
    if (f.fp8 && r.chance(0.3)) c.cache_dtype = GQLA_DTYPE_FP8_E4M3;  // io_dtype stays f32/f16/bf16
    if (f.drop_latent && c.kind == GQLA_KIND_GQLA && r.chance(0.3)) {
        c.keep_latent = 0;
        // Such a session runs the GQA path only: config.path ABSORB is refused.
        if (c.path == GQLA_PATH_ABSORB) c.path = r.chance(0.5) ? GQLA_PATH_AUTO : GQLA_PATH_GQA;
    }
    if (f.attention && r.chance(0.2))  // below max_batch * max_q_len: calls over it must be refused
        c.max_q_tokens = r.range(1, int64_t(c.max_batch) * c.max_q_len);
    if (c.max_tokens == 0) {
        // The budget again, now that the cache dtype and keep_latent may have
        // changed what a token costs: a few pages' worth.
        gqla_config d = c;
        if (d.kind == GQLA_KIND_GQA && d.value_dim == 0) d.value_dim = d.head_dim;
        int64_t kept = 0, expanded = 0;
        bytes_per_token(d, &kept, &expanded);
        const int64_t per_token = (kept + (c.keep_latent ? 0 : expanded)) * c.num_layers;
        c.memory_budget_bytes = per_token * c.page_size * r.range(1, 12) + r.range(0, per_token);
    }
}

}  // namespace

gqla_config random_config(Random& r) {
    const gqla_kind kind = r.chance(0.5) ? GQLA_KIND_GQA : GQLA_KIND_GQLA;
    gqla_config c;
    if (gqla_config_default(&c, kind) != GQLA_OK) fail("gqla_config_default refused kind %d", int(kind));
    const int32_t heads = static_cast<int32_t>(r.pick<int64_t>({1, 2, 3, 4, 6, 8}));
    std::vector<int64_t> divisors;
    for (int32_t g = 1; g <= heads; ++g)
        if (heads % g == 0) divisors.push_back(g);
    c.num_heads = heads;
    c.num_kv_heads = static_cast<int32_t>(r.pick(divisors));
    if (kind == GQLA_KIND_GQA) {
        c.head_dim = static_cast<int32_t>(r.pick<int64_t>({1, 3, 8, 16, 31, 64, 72, 128}));
        c.value_dim = static_cast<int32_t>(r.pick<int64_t>({0, 0, 5, 40, 64}));
    } else if (r.chance(0.2)) {  // the odd sizes of real models' shape family
        c.latent_dim = 384, c.nope_dim = 96, c.rope_dim = 32, c.value_dim = 80;
    } else {
        c.latent_dim = static_cast<int32_t>(r.pick<int64_t>({1, 7, 16, 64, 130}));
        c.nope_dim = static_cast<int32_t>(r.pick<int64_t>({1, 8, 24, 33}));
        c.rope_dim = static_cast<int32_t>(r.pick<int64_t>({1, 4, 16, 17}));
        c.value_dim = static_cast<int32_t>(r.pick<int64_t>({1, 8, 20, 32}));
    }
    c.num_layers = static_cast<int32_t>(r.range(1, 3));
    c.cache_dtype = r.pick(kDtypes);
    c.io_dtype = r.pick(kDtypes);
    c.softmax_scale = r.chance(0.7) ? 0.0f : static_cast<float>(r.range(5, 60)) / 100.0f;
    c.page_size = static_cast<int32_t>(r.pick<int64_t>({1, 2, 3, 7, 15, 16, 17, 64}));
    if (r.chance(0.85)) {
        c.max_tokens = r.range(1, 600);
    } else {  // capacity from a byte budget: a few pages' worth
        c.max_tokens = 0;
        const int64_t per_token =
            (kind == GQLA_KIND_GQA ? int64_t(c.num_kv_heads) * (c.head_dim + (c.value_dim ? c.value_dim : c.head_dim))
                                   : int64_t(c.latent_dim) + c.rope_dim) *
            (c.cache_dtype == GQLA_DTYPE_F32 ? 4 : 2) * c.num_layers;
        c.memory_budget_bytes = per_token * c.page_size * r.range(1, 12) + r.range(0, per_token);
    }
    c.max_sequences = static_cast<int32_t>(r.range(1, 12));
    c.max_batch = static_cast<int32_t>(r.range(1, 8));
    c.max_q_len = static_cast<int32_t>(r.range(1, 6));
    c.device = r.chance(0.8) ? GQLA_DEVICE_CPU : GQLA_DEVICE_AUTO;
    const std::vector<gqla_path> paths = kind == GQLA_KIND_GQA
                                             ? std::vector<gqla_path>{GQLA_PATH_AUTO, GQLA_PATH_GQA}
                                             : std::vector<gqla_path>{GQLA_PATH_AUTO, GQLA_PATH_GQA, GQLA_PATH_ABSORB};
    c.path = r.pick(paths);
    c.num_threads = static_cast<int32_t>(r.range(0, 3));
    if (run.features.any()) draw_features(r, c);
    return c;
}

bool draw_shard(gqla_config& c, gqla_config* broken) {
    Random side(run.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(run.sessions) + 1);
    const int32_t G = c.num_kv_heads;
    if (side.chance(0.3)) {
        c.group_count = static_cast<int32_t>(side.range(1, G));
        c.group_begin = static_cast<int32_t>(side.range(0, G - c.group_count));
    }
    if (!side.chance(0.05)) return false;
    // A group range outside the layer: a count beyond its groups or below
    // 0, or a start that leaves the range past the last group or below 0.
    *broken = c;
    const int32_t count = c.group_count ? c.group_count : G;
    switch (side.range(0, 3)) {
        case 0:
            broken->group_count = G + static_cast<int32_t>(side.range(1, 3));
            break;
        case 1:
            broken->group_count = -static_cast<int32_t>(side.range(1, 3));
            break;
        case 2:
            broken->group_begin = G - count + static_cast<int32_t>(side.range(1, 3));
            break;
        default:
            broken->group_begin = -static_cast<int32_t>(side.range(1, 3));
            break;
    }
    return true;
}

gqla_config shard_view(const gqla_config& resolved) {
    gqla_config v = resolved;
    const int32_t count = resolved.group_count ? resolved.group_count : resolved.num_kv_heads;
    v.num_heads = resolved.num_heads / resolved.num_kv_heads * count;
    v.num_kv_heads = count;
    v.group_begin = 0;
    v.group_count = count;
    return v;
}

void break_config(Random& r, gqla_config& c) {
    // The first version's 15 cases, then those of the features that are on.
    std::vector<int> later;
    if (run.features.fp8) later.push_back(15);
    if (run.features.drop_latent) later.insert(later.end(), {16, 17, 18});
    if (run.features.attention) later.push_back(19);
    int64_t pick = r.range(0, 14 + static_cast<int64_t>(later.size()));
    if (pick > 14) pick = later[static_cast<size_t>(pick - 15)];
    switch (pick) {
        case 0:
            c.num_heads = 0;
            break;
        case 1:
            c.num_kv_heads = c.num_heads + 1;
            break;
        case 2:
            c.kind = static_cast<gqla_kind>(7);
            break;
        case 3:
            c.num_layers = 0;
            break;
        case 4:
            c.cache_dtype = static_cast<gqla_dtype>(9);
            break;
        case 5:
            c.io_dtype = static_cast<gqla_dtype>(0);
            break;
        case 6:
            c.softmax_scale = -1.0f;
            break;
        case 7:
            c.page_size = 0;
            break;
        case 8:
            c.max_tokens = -5;
            break;
        case 9:
            c.max_sequences = 0;
            break;
        case 10:
            c.max_q_len = 0;
            break;
        case 11:
            c.path = static_cast<gqla_path>(3);
            break;
        case 12:
            c.num_threads = -1;
            break;
        case 13:
            c.struct_size = 8;
            break;
        case 15:  // an 8-bit io dtype (FP8_E4M3 is a cache dtype only)
            c.io_dtype = GQLA_DTYPE_FP8_E4M3;
            break;
        case 16:
            c.keep_latent = r.chance(0.5) ? 2 : -1;
            break;
        case 17:  // keep_latent 0: GQLA only, and not with the absorb path
            c.keep_latent = 0;
            if (c.kind == GQLA_KIND_GQLA) c.path = GQLA_PATH_ABSORB;
            break;
        case 18:
            c.cache_dtype = GQLA_DTYPE_I32;  // the dtype of index tensors only
            break;
        case 19:
            c.max_q_tokens = r.chance(0.5) ? -1 : (int64_t(1) << 22) + 1;
            break;
        default:
            if (c.kind == GQLA_KIND_GQA)
                c.head_dim = 0;
            else
                c.latent_dim = -3;
            break;
    }
}

}  // namespace fuzz

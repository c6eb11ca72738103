// SPDX-License-Identifier: Apache-2.0
#include "presets.hpp"

#include <cmath>

#include "core/dtype.hpp"

namespace gqla::bench {

const std::vector<Preset>& all_presets() {
    static const std::vector<Preset> presets = {
        {"llama3-8b", "LLaMA-3-8B GQA (H=32, G=8, D=128)", GQLA_KIND_GQA, 32, 8, 128, 128, 0, 0, 0, 0},
        {"llama3-8b-gqla", "LLaMA-3-8B converted to GQLA (H=32, G=8, r=512, d_c=64, d_r=64, d_v=128)", GQLA_KIND_GQLA,
         32, 8, 0, 0, 512, 64, 64, 128},
        {"deepseek-v3", "DeepSeek-V3 MLA (H=G=128, r=512, d_c=128, d_r=64, d_v=128)", GQLA_KIND_GQLA, 128, 128, 0, 0,
         512, 128, 64, 128},
        {"mla16", "DeepSeek-V3 MLA shape with 16 heads (H=G=16)", GQLA_KIND_GQLA, 16, 16, 0, 0, 512, 128, 64, 128},
    };
    return presets;
}

const Preset* find_preset(const std::string& name) {
    for (const Preset& p : all_presets())
        if (name == p.name) return &p;
    return nullptr;
}

gqla_config make_config(const Preset& p, const SessionShape& s) {
    gqla_config cfg;
    gqla_config_default(&cfg, p.kind);
    cfg.num_heads = p.H;
    cfg.num_kv_heads = p.G;
    if (p.is_gqla()) {
        cfg.latent_dim = p.r;
        cfg.nope_dim = p.d_c;
        cfg.rope_dim = p.d_r;
        cfg.value_dim = p.d_v;
    } else {
        cfg.head_dim = p.D;
        cfg.value_dim = p.Dv;
    }
    cfg.num_layers = 1;
    cfg.cache_dtype = s.cache_dtype;
    cfg.io_dtype = s.io_dtype;
    cfg.device = s.device;
    cfg.path = p.is_gqla() ? s.path : GQLA_PATH_AUTO;
    cfg.num_threads = s.threads;
    if (s.page_size > 0) cfg.page_size = s.page_size;
    if (s.max_tokens > 0) cfg.max_tokens = s.max_tokens;
    if (s.max_sequences > 0) cfg.max_sequences = s.max_sequences;
    if (s.max_batch > 0) cfg.max_batch = s.max_batch;
    if (s.max_q_len > 0) cfg.max_q_len = s.max_q_len;
    if (s.max_q_tokens > 0) cfg.max_q_tokens = s.max_q_tokens;
    return cfg;
}

// An 8-bit cache (docs/fp8-cache.md) stores 1 byte per element plus f32
// scales (per token and KV head or group for K/V and KC/VE, per 128
// elements of the latent) and keeps kr in bf16.
namespace {
bool is_fp8(gqla_dtype t) { return t == GQLA_DTYPE_FP8_E4M3; }
double latent_bytes(const Preset& p, gqla_dtype cache) {
    if (!is_fp8(cache)) return static_cast<double>(dtype_size(cache)) * (p.r + p.d_r);
    return p.r + 4.0 * std::ceil(p.r / 128.0) + 2.0 * p.d_r;
}
double expanded_bytes(const Preset& p, gqla_dtype cache) {
    const double G = p.G;
    return is_fp8(cache) ? G * (p.d_c + p.d_v) + 8.0 * G : static_cast<double>(dtype_size(cache)) * G * (p.d_c + p.d_v);
}
double gqa_kind_bytes(const Preset& p, gqla_dtype cache) {
    return is_fp8(cache) ? p.G * (p.D + p.Dv) + 8.0 * p.G : static_cast<double>(dtype_size(cache)) * p.G * (p.D + p.Dv);
}
}  // namespace

double stored_bytes_per_token(const Preset& p, gqla_path path, gqla_dtype cache) {
    if (!p.is_gqla()) return gqa_kind_bytes(p, cache);
    return latent_bytes(p, cache) + (path == GQLA_PATH_GQA ? expanded_bytes(p, cache) : 0.0);
}

double read_bytes_per_token(const Preset& p, gqla_path path, gqla_dtype cache) {
    if (!p.is_gqla()) return gqa_kind_bytes(p, cache);
    const double kr = (is_fp8(cache) ? 2.0 : static_cast<double>(dtype_size(cache))) * p.d_r;
    if (path == GQLA_PATH_GQA) return expanded_bytes(p, cache) + kr;
    return latent_bytes(p, cache);
}

const char* path_name(gqla_path p) {
    switch (p) {
        case GQLA_PATH_AUTO:
            return "auto";
        case GQLA_PATH_GQA:
            return "gqa";
        case GQLA_PATH_ABSORB:
            return "absorb";
        case GQLA_PATH_GQA_TRANSIENT:
            return "transient";
    }
    return "?";
}

const char* device_name(gqla_device_type d) {
    switch (d) {
        case GQLA_DEVICE_AUTO:
            return "auto";
        case GQLA_DEVICE_CPU:
            return "cpu";
        case GQLA_DEVICE_CUDA:
            return "cuda";
    }
    return "?";
}

const char* dtype_label(gqla_dtype t) {
    switch (t) {
        case GQLA_DTYPE_F32:
            return "f32";
        case GQLA_DTYPE_F16:
            return "f16";
        case GQLA_DTYPE_BF16:
            return "bf16";
        case GQLA_DTYPE_FP8_E4M3:
            return "fp8_e4m3";
        default:
            break;
    }
    return "?";
}

}  // namespace gqla::bench

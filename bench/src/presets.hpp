// SPDX-License-Identifier: Apache-2.0
// Model shapes the bench and the demo run: the attention layer of a few real
// (or GQLA-converted) models, and how many cache bytes each path reads.
#pragma once

#include <string>
#include <vector>

#include "gqla/gqla.h"

namespace gqla::bench {

struct Preset {
    const char* name;
    const char* description;
    gqla_kind kind;
    int H, G;
    int D, Dv;             // GQA kind
    int r, d_c, d_r, d_v;  // GQLA kind

    bool is_gqla() const { return kind == GQLA_KIND_GQLA; }
    int q_dim() const { return is_gqla() ? d_c + d_r : D; }
    int out_dim() const { return is_gqla() ? d_v : Dv; }
};

// nullptr when unknown.
const Preset* find_preset(const std::string& name);
const std::vector<Preset>& all_presets();

// A session config for one layer of `p` with everything the bench varies.
struct SessionShape {
    gqla_device_type device = GQLA_DEVICE_AUTO;
    gqla_path path = GQLA_PATH_AUTO;
    gqla_dtype cache_dtype = GQLA_DTYPE_BF16;
    gqla_dtype io_dtype = GQLA_DTYPE_F32;  // q, o and the appended rows
    int threads = 0;
    int page_size = 0;  // 0: library default
    int64_t max_tokens = 0;
    int max_sequences = 0;
    int max_batch = 0;
    int max_q_len = 0;
    int64_t max_q_tokens = 0;  // most query rows of one call; 0: library default
};
gqla_config make_config(const Preset& p, const SessionShape& s);

// Cache bytes per token the session stores on `path` (GQLA: the latent is
// always kept; the GQA path adds the expanded per-group cache).
double stored_bytes_per_token(const Preset& p, gqla_path path, gqla_dtype cache);
// Cache bytes per token one decode reads on `path`.
double read_bytes_per_token(const Preset& p, gqla_path path, gqla_dtype cache);

const char* path_name(gqla_path p);
const char* device_name(gqla_device_type d);
const char* dtype_label(gqla_dtype t);

}  // namespace gqla::bench

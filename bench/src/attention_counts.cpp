// SPDX-License-Identifier: Apache-2.0
#include "attention_counts.hpp"

#include "core/dtype.hpp"

namespace gqla::bench {

AttentionCounts count_attention(const Preset& p, gqla_path form, gqla_dtype cache, gqla_dtype io,
                                const std::vector<int64_t>& lengths, const std::vector<int32_t>& q_lens) {
    AttentionCounts c;
    for (size_t b = 0; b < lengths.size(); ++b) {
        const double L = static_cast<double>(lengths[b]), q = q_lens[b];
        c.visible_pairs += q * (L - q) + q * (q + 1) / 2;  // query i sees L - q + 1 + i positions
        c.context_tokens += L;
        c.query_rows += q;
    }
    const double e = static_cast<double>(dtype_size(cache));
    const double io_e = static_cast<double>(dtype_size(io));
    const double H = p.H, G = p.G;
    const double q_o_bytes = c.query_rows * H * (p.q_dim() + p.out_dim()) * io_e;
    if (!p.is_gqla()) {
        c.flops = c.visible_pairs * H * 2.0 * (p.D + p.Dv);
        c.bytes = c.context_tokens * read_bytes_per_token(p, GQLA_PATH_GQA, cache) + q_o_bytes;
        return c;
    }
    const double gqa_form_flops = c.visible_pairs * H * 2.0 * (p.q_dim() + p.d_v);
    const double expanded_width = G * (p.d_c + p.d_v);
    // Stored weights counted in the cache dtype: they are read once per call
    // and small next to any context worth timing.
    // (8-bit caches: the weights are kept in f32.)
    const double w_e = cache == GQLA_DTYPE_FP8_E4M3 ? 4.0 : e;
    const double latent_bytes =
        c.context_tokens * read_bytes_per_token(p, GQLA_PATH_ABSORB, cache) + expanded_width * p.r * w_e;
    switch (form) {
        case GQLA_PATH_ABSORB:
            c.flops = c.visible_pairs * H * (2.0 * (p.r + p.d_r) + 2.0 * p.r) +
                      c.query_rows * H * 2.0 * (p.d_c + p.d_v) * p.r;
            c.bytes = latent_bytes + q_o_bytes;
            break;
        case GQLA_PATH_GQA_TRANSIENT:
            c.flops = gqa_form_flops + c.context_tokens * 2.0 * p.r * expanded_width;
            c.bytes = latent_bytes + q_o_bytes;
            break;
        default:  // the kept expanded cache
            c.flops = gqa_form_flops;
            c.bytes = c.context_tokens * read_bytes_per_token(p, GQLA_PATH_GQA, cache) + q_o_bytes;
            break;
    }
    return c;
}

}  // namespace gqla::bench

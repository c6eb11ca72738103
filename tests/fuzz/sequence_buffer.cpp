// SPDX-License-Identifier: Apache-2.0
// The exported-sequence format of sequence_buffer.hpp.
#include "tests/fuzz/sequence_buffer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"

namespace fuzz {

namespace {

void put_le(std::vector<unsigned char>& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

uint64_t get_le64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

// One value in the cache dtype, little-endian (the bit patterns of
// core/dtype.hpp's conversions, which the shadow model's values round-trip).
void put_element(std::vector<unsigned char>& out, gqla_dtype t, double v) {
    const float f = static_cast<float>(v);
    switch (t) {
        case GQLA_DTYPE_F32: {
            uint32_t bits;
            std::memcpy(&bits, &f, 4);
            put_le(out, bits, 4);
            break;
        }
        case GQLA_DTYPE_F16:
            put_le(out, gqla::f32_to_f16(f), 2);
            break;
        case GQLA_DTYPE_BF16:
            put_le(out, gqla::f32_to_bf16(f), 2);
            break;
        default:  // 8-bit caches: put_fp8_part
            break;
    }
}

// An 8-bit part of `tokens` rows of `cols` values as the shadow model holds
// them (e4m3 code x scale, exactly): the codes [tokens][cols], then the f32
// scales [tokens][groups] of its groups of `width` columns (the last one
// may be narrower). A group's scale is its largest finite magnitude / 448,
// since the quantization rule puts that element on e4m3's 448 (1 for a
// group without a finite non-zero element); a NaN keeps its sign.
void put_fp8_part(std::vector<unsigned char>& out, const std::vector<double>& v, int64_t tokens, int64_t cols,
                  int64_t width) {
    std::vector<float> scales;
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t g0 = 0; g0 < cols; g0 += width) {
            const int64_t n = std::min(width, cols - g0);
            const double* x = v.data() + t * cols + g0;
            double amax = 0.0;
            for (int64_t k = 0; k < n; ++k)
                if (std::isfinite(x[k])) amax = std::max(amax, std::fabs(x[k]));
            const float scale = amax > 0.0 ? static_cast<float>(amax / 448.0) : 1.0f;
            for (int64_t k = 0; k < n; ++k)
                put_le(out,
                       std::isnan(x[k]) ? (std::signbit(x[k]) ? 0xffu : 0x7fu)
                                        : gqla::f32_to_e4m3(static_cast<float>(x[k] / scale)),
                       1);
            scales.push_back(scale);
        }
    for (float s : scales) {
        uint32_t bits;
        std::memcpy(&bits, &s, 4);
        put_le(out, bits, 4);
    }
}

}  // namespace

uint64_t sequence_checksum(const unsigned char* data, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) h = (h ^ get_le64(data + i)) * 0x100000001b3ull;
    for (; i < n; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
    return h;
}

namespace {
int32_t served_groups(const gqla_config& c) { return c.group_count ? c.group_count : c.num_kv_heads; }
}  // namespace

size_t sequence_header_bytes(const gqla_config& c) {
    return served_groups(c) == c.num_kv_heads ? kSeqHeaderBytes : kSeqShardHeaderBytes;
}

std::vector<unsigned char> encode_sequence(const gqla_config& c, const ShadowSession::Rows& rows) {
    const bool gqa = c.kind == GQLA_KIND_GQA;
    const int32_t groups = served_groups(c);
    const int64_t a_cols = gqa ? int64_t(groups) * c.head_dim : c.latent_dim;
    const int64_t b_cols = gqa ? int64_t(groups) * c.value_dim : c.rope_dim;
    const size_t header = sequence_header_bytes(c);
    std::vector<unsigned char> out = {'G', 'Q', 'L', 'A', 'S', 'E', 'Q', '\0'};
    put_le(out, 1, 4);  // format version
    put_le(out, header, 4);
    // The resolved dims: GQLA head_dim = d_c + d_r; GQA latent dims 0.
    for (int64_t field : {int64_t(c.kind), int64_t(c.num_heads), int64_t(c.num_kv_heads), int64_t(c.head_dim),
                          int64_t(c.value_dim), int64_t(c.latent_dim), int64_t(c.nope_dim), int64_t(c.rope_dim),
                          int64_t(c.num_layers), int64_t(c.cache_dtype), a_cols, b_cols})
        put_le(out, static_cast<uint64_t>(field), 4);
    if (header == kSeqShardHeaderBytes) {
        put_le(out, static_cast<uint64_t>(c.group_begin), 4);
        put_le(out, static_cast<uint64_t>(groups), 4);
    }
    for (int64_t len : rows.lengths) put_le(out, static_cast<uint64_t>(len), 8);
    for (size_t l = 0; l < rows.lengths.size(); ++l) {
        if (c.cache_dtype != GQLA_DTYPE_FP8_E4M3) {
            for (double v : rows.a[l]) put_element(out, c.cache_dtype, v);
            for (double v : rows.b[l]) put_element(out, c.cache_dtype, v);
            continue;
        }
        // 8-bit: GQA K and V with one scale per (token, KV head); the GQLA
        // latent with one per 128-element block, kr in bf16 without.
        const int64_t n = rows.lengths[l];
        put_fp8_part(out, rows.a[l], n, a_cols, gqa ? c.head_dim : 128);
        if (gqa)
            put_fp8_part(out, rows.b[l], n, b_cols, c.value_dim);
        else
            for (double v : rows.b[l]) put_element(out, GQLA_DTYPE_BF16, v);
    }
    put_le(out, sequence_checksum(out.data(), out.size()), 8);
    return out;
}

std::vector<size_t> sequence_scale_offsets(const gqla_config& c, const ShadowSession::Rows& rows) {
    std::vector<size_t> at;
    if (c.cache_dtype != GQLA_DTYPE_FP8_E4M3) return at;
    const bool gqa = c.kind == GQLA_KIND_GQA;
    const int64_t groups = served_groups(c);
    const int64_t a_cols = gqa ? groups * c.head_dim : c.latent_dim, b_cols = gqa ? groups * c.value_dim : c.rope_dim;
    const int64_t a_scales = gqa ? groups : (c.latent_dim + 127) / 128, b_scales = gqa ? groups : 0;
    size_t off = sequence_header_bytes(c) + 8 * rows.lengths.size();
    for (int64_t n : rows.lengths) {
        off += static_cast<size_t>(n * a_cols);
        for (int64_t k = 0; k < n * a_scales; ++k, off += 4) at.push_back(off);
        off += static_cast<size_t>(n * b_cols * (gqa ? 1 : 2));
        for (int64_t k = 0; k < n * b_scales; ++k, off += 4) at.push_back(off);
    }
    return at;
}

void reseal(std::vector<unsigned char>& buf) {
    if (buf.size() < 8) return;
    const uint64_t h = sequence_checksum(buf.data(), buf.size() - 8);
    for (int i = 0; i < 8; ++i) buf[buf.size() - 8 + i] = static_cast<unsigned char>(h >> (8 * i));
}

}  // namespace fuzz

// SPDX-License-Identifier: Apache-2.0
// The exported-sequence format of sequence_buffer.hpp.
#include "tests/fuzz/sequence_buffer.hpp"

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
        default:  // an 8-bit cache, whose sessions refuse every buffer
            put_le(out, gqla::f32_to_e4m3(f), 1);
            break;
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
        for (double v : rows.a[l]) put_element(out, c.cache_dtype, v);
        for (double v : rows.b[l]) put_element(out, c.cache_dtype, v);
    }
    put_le(out, sequence_checksum(out.data(), out.size()), 8);
    return out;
}

void reseal(std::vector<unsigned char>& buf) {
    if (buf.size() < 8) return;
    const uint64_t h = sequence_checksum(buf.data(), buf.size() - 8);
    for (int i = 0; i < 8; ++i) buf[buf.size() - 8 + i] = static_cast<unsigned char>(h >> (8 * i));
}

}  // namespace fuzz

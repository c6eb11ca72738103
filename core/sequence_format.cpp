// SPDX-License-Identifier: Apache-2.0
// Writing and checking the serialized sequence format (sequence_format.hpp).
#include "core/sequence_format.hpp"

#include <cstring>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace gqla {

namespace {

constexpr unsigned char kMagic[kSequenceMagicBytes] = {'G', 'Q', 'L', 'A', 'S', 'E', 'Q', '\0'};
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

constexpr bool host_is_little_endian() { return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__; }

// The header's shape fields in file order, with their names for messages.
struct Field {
    const char* name;
    int32_t SequenceShape::*member;
};
constexpr Field kFields[] = {
    {"kind", &SequenceShape::kind},
    {"num_heads", &SequenceShape::num_heads},
    {"num_kv_heads", &SequenceShape::num_kv_heads},
    {"head_dim", &SequenceShape::head_dim},
    {"value_dim", &SequenceShape::value_dim},
    {"latent_dim", &SequenceShape::latent_dim},
    {"nope_dim", &SequenceShape::nope_dim},
    {"rope_dim", &SequenceShape::rope_dim},
    {"num_layers", &SequenceShape::num_layers},
    {"cache_dtype", &SequenceShape::cache_dtype},
    {"a_cols", &SequenceShape::a_cols},
    {"b_cols", &SequenceShape::b_cols},
};
constexpr size_t kFieldsOffset = 16;
static_assert(kFieldsOffset + sizeof(kFields) / sizeof(kFields[0]) * 4 == kSequenceHeaderBytes,
              "header layout and field list disagree");

size_t element_size(const SequenceShape& s) { return dtype_size(static_cast<gqla_dtype>(s.cache_dtype)); }

}  // namespace

void store_le32(unsigned char* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void store_le64(unsigned char* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t load_le32(const unsigned char* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}
uint64_t load_le64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

void cache_elements_to_le(unsigned char* p, size_t bytes, size_t element_size) {
    if (host_is_little_endian() || element_size < 2) return;
    for (size_t i = 0; i + element_size <= bytes; i += element_size)
        for (size_t a = 0, b = element_size - 1; a < b; ++a, --b) std::swap(p[i + a], p[i + b]);
}

SequenceShape sequence_shape_of(const gqla_config& c) {
    SequenceShape s{};
    s.kind = c.kind;
    s.num_heads = c.num_heads;
    s.num_kv_heads = c.num_kv_heads;
    s.head_dim = c.head_dim;
    s.value_dim = c.value_dim;
    s.latent_dim = c.latent_dim;
    s.nope_dim = c.nope_dim;
    s.rope_dim = c.rope_dim;
    s.num_layers = c.num_layers;
    s.cache_dtype = c.cache_dtype;
    const bool gqa = c.kind == GQLA_KIND_GQA;
    s.a_cols = gqa ? c.num_kv_heads * c.head_dim : c.latent_dim;
    s.b_cols = gqa ? c.num_kv_heads * c.value_dim : c.rope_dim;
    return s;
}

std::vector<LayerRows> sequence_layout(const SequenceShape& shape, const std::vector<int64_t>& lengths) {
    const size_t es = element_size(shape);
    std::vector<LayerRows> rows(lengths.size());
    size_t off = kSequenceHeaderBytes + 8 * lengths.size();
    for (size_t l = 0; l < lengths.size(); ++l) {
        rows[l].tokens = lengths[l];
        rows[l].a_offset = off;
        off += static_cast<size_t>(lengths[l]) * static_cast<size_t>(shape.a_cols) * es;
        rows[l].b_offset = off;
        off += static_cast<size_t>(lengths[l]) * static_cast<size_t>(shape.b_cols) * es;
    }
    return rows;
}

size_t sequence_bytes(const SequenceShape& shape, const std::vector<int64_t>& lengths) {
    const size_t es = element_size(shape);
    size_t n = kSequenceHeaderBytes + 8 * lengths.size() + kSequenceChecksumBytes;
    for (int64_t len : lengths)
        n += static_cast<size_t>(len) * static_cast<size_t>(shape.a_cols + shape.b_cols) * es;
    return n;
}

void write_sequence_header(const SequenceShape& shape, const std::vector<int64_t>& lengths, unsigned char* out) {
    std::memcpy(out, kMagic, kSequenceMagicBytes);
    store_le32(out + 8, kSequenceFormatVersion);
    store_le32(out + 12, static_cast<uint32_t>(kSequenceHeaderBytes));
    size_t off = kFieldsOffset;
    for (const Field& f : kFields) {
        store_le32(out + off, static_cast<uint32_t>(shape.*f.member));
        off += 4;
    }
    for (size_t l = 0; l < lengths.size(); ++l) store_le64(out + kSequenceHeaderBytes + 8 * l, static_cast<uint64_t>(lengths[l]));
}

uint64_t sequence_checksum(const unsigned char* data, size_t n) {
    uint64_t h = kFnvOffset;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) h = (h ^ load_le64(data + i)) * kFnvPrime;
    for (; i < n; ++i) h = (h ^ data[i]) * kFnvPrime;
    return h;
}

std::vector<int64_t> parse_sequence(const unsigned char* data, size_t size, const SequenceShape& expected) {
    if (size < kSequenceHeaderBytes + kSequenceChecksumBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes is shorter than a sequence header (%zu bytes)", size,
             kSequenceHeaderBytes + kSequenceChecksumBytes);
    if (std::memcmp(data, kMagic, kSequenceMagicBytes) != 0)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: not an exported gqla sequence (magic bytes differ)");
    const uint32_t version = load_le32(data + 8);
    if (version != kSequenceFormatVersion)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: format version %u; this library reads version %u", version,
             kSequenceFormatVersion);
    if (load_le32(data + 12) != kSequenceHeaderBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: header of %u bytes; version %u has %zu", load_le32(data + 12),
             version, kSequenceHeaderBytes);
    // The checksum first: a damaged buffer is reported as such, not as
    // whatever field the damage happened to hit.
    const uint64_t stored = load_le64(data + size - kSequenceChecksumBytes);
    if (sequence_checksum(data, size - kSequenceChecksumBytes) != stored)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: checksum mismatch (the %zu bytes are truncated or corrupted)", size);
    size_t off = kFieldsOffset;
    for (const Field& f : kFields) {
        const int32_t got = static_cast<int32_t>(load_le32(data + off));
        off += 4;
        if (got != expected.*f.member)
            fail(GQLA_ERR_INVALID_ARGUMENT,
                 "buffer: exported from a session with %s %d; this session has %d (sessions must have the same kind, "
                 "heads, dims, layers and cache dtype)",
                 f.name, got, expected.*f.member);
    }
    const size_t layers = static_cast<size_t>(expected.num_layers);
    if (size < kSequenceHeaderBytes + 8 * layers + kSequenceChecksumBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes cannot hold the lengths of %zu layers", size, layers);
    std::vector<int64_t> lengths(layers);
    const size_t es = element_size(expected);
    const uint64_t row_bytes = static_cast<uint64_t>(expected.a_cols + expected.b_cols) * es;
    uint64_t payload = 0;
    for (size_t l = 0; l < layers; ++l) {
        const uint64_t len = load_le64(data + kSequenceHeaderBytes + 8 * l);
        if (len > static_cast<uint64_t>(INT64_MAX) / row_bytes || payload + len * row_bytes < payload)
            fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: layer %zu claims %llu tokens, more than any buffer holds", l,
                 static_cast<unsigned long long>(len));
        lengths[l] = static_cast<int64_t>(len);
        payload += len * row_bytes;
    }
    const size_t want = sequence_bytes(expected, lengths);
    if (size != want)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes, but its header describes %zu", size, want);
    return lengths;
}

}  // namespace gqla

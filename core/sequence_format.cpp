// SPDX-License-Identifier: Apache-2.0
// Writing and checking the serialized sequence format (sequence_format.hpp).
#include "core/sequence_format.hpp"

#include <cstring>

#include "core/config.hpp"
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

bool is_shard(const SequenceShape& s) { return s.group_count != s.num_kv_heads; }

// The groups a buffer was exported from: its shard fields, or all groups of
// a 64-byte header. Refuses a shard other than the importing session's.
void check_shard_fields(const unsigned char* data, size_t header_bytes, const SequenceShape& expected) {
    const int32_t groups = static_cast<int32_t>(load_le32(data + 24));  // num_kv_heads
    if (groups != expected.num_kv_heads) return;                        // another layer: the field check names it
    int32_t begin = 0, count = groups;
    if (header_bytes > kSequenceHeaderBytes) {
        begin = static_cast<int32_t>(load_le32(data + kSequenceHeaderBytes));
        count = static_cast<int32_t>(load_le32(data + kSequenceHeaderBytes + 4));
    }
    if (begin != expected.group_begin || count != expected.group_count)
        fail(GQLA_ERR_INVALID_ARGUMENT,
             "buffer: exported from a session serving groups [%d, %d) of %d; this session serves groups [%d, %d) "
             "(config.group_begin, config.group_count): a shard imports only sequences of the same shard",
             begin, begin + count, groups, expected.group_begin, expected.group_begin + expected.group_count);
}

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
    s.group_begin = c.group_begin;
    s.group_count = shard_groups(c);
    s.a_cols = gqa ? s.group_count * c.head_dim : c.latent_dim;
    s.b_cols = gqa ? s.group_count * c.value_dim : c.rope_dim;
    const bool fp8 = c.cache_dtype == GQLA_DTYPE_FP8_E4M3;
    s.a_elem_bytes = static_cast<int32_t>(dtype_size(c.cache_dtype));
    // An 8-bit GQLA cache keeps kr in bf16 (docs/fp8-cache.md).
    s.b_elem_bytes = fp8 && !gqa ? 2 : s.a_elem_bytes;
    s.a_scale_cols = !fp8 ? 0 : gqa ? s.group_count : (c.latent_dim + kFp8LatentBlock - 1) / kFp8LatentBlock;
    s.b_scale_cols = fp8 && gqa ? s.group_count : 0;
    return s;
}

size_t SequenceShape::a_token_bytes() const {
    return static_cast<size_t>(a_cols) * static_cast<size_t>(a_elem_bytes) + 4 * static_cast<size_t>(a_scale_cols);
}
size_t SequenceShape::b_token_bytes() const {
    return static_cast<size_t>(b_cols) * static_cast<size_t>(b_elem_bytes) + 4 * static_cast<size_t>(b_scale_cols);
}

size_t sequence_header_bytes(const SequenceShape& shape) {
    return kSequenceHeaderBytes + (is_shard(shape) ? kSequenceShardFieldsBytes : 0);
}

std::vector<LayerRows> sequence_layout(const SequenceShape& shape, const std::vector<int64_t>& lengths) {
    std::vector<LayerRows> rows(lengths.size());
    size_t off = sequence_header_bytes(shape) + 8 * lengths.size();
    for (size_t l = 0; l < lengths.size(); ++l) {
        const size_t n = static_cast<size_t>(lengths[l]);
        rows[l].tokens = lengths[l];
        rows[l].a_offset = off;
        off += n * static_cast<size_t>(shape.a_cols) * static_cast<size_t>(shape.a_elem_bytes);
        rows[l].a_scales_offset = off;
        off += n * 4 * static_cast<size_t>(shape.a_scale_cols);
        rows[l].b_offset = off;
        off += n * static_cast<size_t>(shape.b_cols) * static_cast<size_t>(shape.b_elem_bytes);
        rows[l].b_scales_offset = off;
        off += n * 4 * static_cast<size_t>(shape.b_scale_cols);
    }
    return rows;
}

size_t sequence_bytes(const SequenceShape& shape, const std::vector<int64_t>& lengths) {
    size_t n = sequence_header_bytes(shape) + 8 * lengths.size() + kSequenceChecksumBytes;
    for (int64_t len : lengths) n += static_cast<size_t>(len) * (shape.a_token_bytes() + shape.b_token_bytes());
    return n;
}

void write_sequence_header(const SequenceShape& shape, const std::vector<int64_t>& lengths, unsigned char* out) {
    std::memcpy(out, kMagic, kSequenceMagicBytes);
    store_le32(out + 8, kSequenceFormatVersion);
    const size_t header = sequence_header_bytes(shape);
    store_le32(out + 12, static_cast<uint32_t>(header));
    size_t off = kFieldsOffset;
    for (const Field& f : kFields) {
        store_le32(out + off, static_cast<uint32_t>(shape.*f.member));
        off += 4;
    }
    if (is_shard(shape)) {
        store_le32(out + kSequenceHeaderBytes, static_cast<uint32_t>(shape.group_begin));
        store_le32(out + kSequenceHeaderBytes + 4, static_cast<uint32_t>(shape.group_count));
    }
    for (size_t l = 0; l < lengths.size(); ++l) store_le64(out + header + 8 * l, static_cast<uint64_t>(lengths[l]));
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
    const size_t header = load_le32(data + 12);
    if (header != kSequenceHeaderBytes && header != kSequenceHeaderBytes + kSequenceShardFieldsBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: header of %zu bytes; version %u has %zu (or %zu for a shard)", header,
             version, kSequenceHeaderBytes, kSequenceHeaderBytes + kSequenceShardFieldsBytes);
    if (size < header + kSequenceChecksumBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes is shorter than its %zu-byte header", size, header);
    // The checksum first: a damaged buffer is reported as such, not as
    // whatever field the damage happened to hit.
    const uint64_t stored = load_le64(data + size - kSequenceChecksumBytes);
    if (sequence_checksum(data, size - kSequenceChecksumBytes) != stored)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: checksum mismatch (the %zu bytes are truncated or corrupted)", size);
    check_shard_fields(data, header, expected);
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
    if (size < header + 8 * layers + kSequenceChecksumBytes)
        fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes cannot hold the lengths of %zu layers", size, layers);
    std::vector<int64_t> lengths(layers);
    const uint64_t row_bytes = expected.a_token_bytes() + expected.b_token_bytes();
    uint64_t payload = 0;
    for (size_t l = 0; l < layers; ++l) {
        const uint64_t len = load_le64(data + header + 8 * l);
        if (len > static_cast<uint64_t>(INT64_MAX) / row_bytes || payload + len * row_bytes < payload)
            fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: layer %zu claims %llu tokens, more than any buffer holds", l,
                 static_cast<unsigned long long>(len));
        lengths[l] = static_cast<int64_t>(len);
        payload += len * row_bytes;
    }
    const size_t want = sequence_bytes(expected, lengths);
    if (size != want) fail(GQLA_ERR_INVALID_ARGUMENT, "buffer: %zu bytes, but its header describes %zu", size, want);
    return lengths;
}

}  // namespace gqla

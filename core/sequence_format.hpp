// SPDX-License-Identifier: Apache-2.0
// The serialized form of one sequence's cache (gqla_sequence_export /
// gqla_sequence_import), independent of device, page size and byte order of
// the host. All integers little-endian; cache elements little-endian in the
// cache dtype, exactly as stored.
//
//   offset  bytes  field
//   0       8      magic "GQLASEQ\0"
//   8       4      format version (kSequenceFormatVersion)
//   12      4      header bytes (kSequenceHeaderBytes, the fields below)
//   16      4      kind                20  4  num_heads
//   24      4      num_kv_heads        28  4  head_dim (GQLA: d_c + d_r)
//   32      4      value_dim           36  4  latent_dim
//   40      4      nope_dim            44  4  rope_dim
//   48      4      num_layers          52  4  cache_dtype
//   56      4      a_cols              60  4  b_cols
//   a shard's session (config.group_count < num_kv_heads) writes a 72-byte
//   header: 64  4  group_begin           68  4  group_count
//   H       8*num_layers               cached tokens of each layer (H = the
//                                      header bytes: 64, or 72 for a shard)
//   then, layer by layer: that layer's `a` rows [tokens][a_cols] followed by
//   its `b` rows [tokens][b_cols] (GQA: a = K [G*D], b = V [G*Dv] per token;
//   GQLA: a = latent c [r], b = rope key kr [d_r]). An fp8_e4m3 cache adds
//   each part's f32 scales right after its rows, [tokens][scale columns]
//   (GQA: one per KV head for K and for V; GQLA: one per 128-element block
//   of the latent), and stores kr in bf16.
//   last 8 bytes: checksum of everything before it (sequence_checksum)
//
// Only the always-kept cache travels: the expanded cache of the GQLA GQA path
// is rebuilt from the latent on import. A shard's buffer holds its own
// groups (GQA kind: K/V of those groups; GQLA: the latent) and imports only
// into a session of the same shard; a 64-byte header stands for all groups.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gqla/gqla.h"

namespace gqla {

constexpr uint32_t kSequenceFormatVersion = 1;
constexpr size_t kSequenceMagicBytes = 8;
constexpr size_t kSequenceHeaderBytes = 64;      // magic through b_cols
constexpr size_t kSequenceShardFieldsBytes = 8;  // group_begin, group_count (shards only)
constexpr size_t kSequenceChecksumBytes = 8;

// What must match between the exporting and the importing session.
struct SequenceShape {
    int32_t kind, num_heads, num_kv_heads, head_dim, value_dim, latent_dim, nope_dim, rope_dim, num_layers, cache_dtype,
        a_cols, b_cols;
    // The groups the session serves (all: 0 and num_kv_heads).
    int32_t group_begin, group_count;
    // Derived from the fields above (not written): bytes of one element of
    // a and of b, and f32 scales per token after each part's rows (8-bit
    // caches only, else 0).
    int32_t a_elem_bytes, b_elem_bytes, a_scale_cols, b_scale_cols;

    // Bytes of one token's a rows and scales, and of its b rows and scales.
    size_t a_token_bytes() const;
    size_t b_token_bytes() const;
};

// Bytes before the per-layer lengths: kSequenceHeaderBytes, plus the shard
// fields when the shape is a shard's.
size_t sequence_header_bytes(const SequenceShape& shape);

SequenceShape sequence_shape_of(const gqla_config& cfg);

// Bytes of a serialized sequence with these per-layer token counts.
size_t sequence_bytes(const SequenceShape& shape, const std::vector<int64_t>& lengths);

// Header + lengths into out[0 .. sequence_header_bytes + 8*num_layers).
void write_sequence_header(const SequenceShape& shape, const std::vector<int64_t>& lengths, unsigned char* out);

// Byte offsets of layer l's a and b rows (and of their scales: 8-bit
// caches) in the buffer.
struct LayerRows {
    size_t a_offset, a_scales_offset, b_offset, b_scales_offset;
    int64_t tokens;
};
std::vector<LayerRows> sequence_layout(const SequenceShape& shape, const std::vector<int64_t>& lengths);

// 64-bit FNV-1a over little-endian 64-bit words (then the tail bytes): any
// change of a single byte changes it, since every step is a bijection of
// the running value.
uint64_t sequence_checksum(const unsigned char* data, size_t n);

// Checks magic, version, size, checksum and that the shape equals
// `expected`; returns the per-layer lengths. Throws INVALID_ARGUMENT naming
// what is wrong ("buffer: ...").
std::vector<int64_t> parse_sequence(const unsigned char* data, size_t size, const SequenceShape& expected);

// Little-endian loads/stores of fixed-width integers.
void store_le32(unsigned char* p, uint32_t v);
void store_le64(unsigned char* p, uint64_t v);
uint32_t load_le32(const unsigned char* p);
uint64_t load_le64(const unsigned char* p);

// Cache elements between host order and little-endian, in place (no-op on
// little-endian hosts).
void cache_elements_to_le(unsigned char* p, size_t bytes, size_t element_size);

}  // namespace gqla

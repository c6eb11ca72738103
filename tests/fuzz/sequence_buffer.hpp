// SPDX-License-Identifier: Apache-2.0
// The exported-sequence format (version 1) of docs/sequence-format.md,
// written here from that page rather than from the library's code: the
// fuzzer compares every accepted gqla_sequence_export with it byte for byte,
// and hands gqla_sequence_import buffers the library did not write (a live
// sequence's rows, random rows; damaged or reshaped copies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gqla/gqla.h"
#include "tests/fuzz/shadow_session.hpp"

namespace fuzz {

// Byte offsets of the header fields the fuzzer changes.
constexpr size_t kSeqMagicOffset = 0;
constexpr size_t kSeqVersionOffset = 8;
constexpr size_t kSeqHeaderBytesOffset = 12;
constexpr size_t kSeqFieldsOffset = 16;      // kind, num_heads, ... b_cols: 12 int32
constexpr size_t kSeqHeaderBytes = 64;       // a session serving all groups
constexpr size_t kSeqShardHeaderBytes = 72;  // a shard: group_begin and group_count after b_cols

// Header bytes of a session of `cfg` (resolved).
size_t sequence_header_bytes(const gqla_config& cfg);

// The buffer of `rows` exported from a session of `cfg` (resolved; a
// shard's config is its layer's, with its groups): header, per-layer token
// counts, each layer's a rows then b rows in the cache dtype
// (little-endian; 8-bit caches: each part's codes followed by its scales,
// kr in bf16), and the checksum.
std::vector<unsigned char> encode_sequence(const gqla_config& cfg, const ShadowSession::Rows& rows);

// Byte offsets of every f32 scale in encode_sequence's buffer of `rows`
// (empty unless the cache is 8-bit).
std::vector<size_t> sequence_scale_offsets(const gqla_config& cfg, const ShadowSession::Rows& rows);

// 64-bit FNV-1a over little-endian 64-bit words, then the 0-7 bytes left.
uint64_t sequence_checksum(const unsigned char* data, size_t n);

// Rewrites the checksum of a buffer whose other bytes were changed.
void reseal(std::vector<unsigned char>& buf);

}  // namespace fuzz

// SPDX-License-Identifier: Apache-2.0
// A ragged mix of query counts for one gqla_attention call, written
// QLENxCOUNT[,QLENxCOUNT...]: `1x47,2048x1` is 47 sequences decoding one
// token each and one sequence prefilling a chunk of 2048 (its last 2048
// cached tokens). COUNT may be left out (`2048` = `2048x1`). Groups keep
// their order: the call's sequences, and their packed query rows, follow it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gqla::bench {

struct QueryGroup {
    int32_t q_len = 1;
    int count = 1;
};

struct QueryMix {
    std::vector<QueryGroup> groups;

    bool empty() const { return groups.empty(); }
    int batch() const;              // sequences of the call
    int64_t total_queries() const;  // rows of the packed q and o
    int32_t max_q_len() const;
    std::vector<int32_t> q_lens() const;  // per sequence, in call order
    std::string label() const;            // QLENxCOUNT,... as parsed
    // The same kinds of sequences with at most `per_group` of each: what an
    // accuracy check needs of a mix (a row of 47 decoding sequences tests
    // nothing two of them do not).
    QueryMix shrunk(int per_group) const;
};

// Parses QLENxCOUNT[,...]; false with *error set when `text` is malformed.
bool parse_query_mix(const std::string& text, QueryMix* out, std::string* error);

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// Float64 reference outputs for chosen query rows of one attention call,
// from tests/reference/reference.hpp, cheap enough for prefill chunks of 16K queries.
//
// Two things keep the cost down while checking every part of a long chunk:
//  - Rows: query i of a chunk of q over L tokens is the last query of the
//    sequence's first L - q + 1 + i tokens, so blocks of rows (the first,
//    the middle, the last) are reference calls on prefixes; the rows between
//    them differ only in how many keys they see.
//  - GQLA keys: the reference forms every group's key W_UK c and value
//    W_UV c from the latent (tests/reference/reference.cpp), which for DeepSeek-V3 is
//    ~30 MFLOP per token. Here the latent rows of the check come from a
//    small pool, so keys and values are formed once per pool row, and the
//    rope key (kr, random per token) keeps every position's score distinct.
//    Then the GQA reference runs per group, as ref::gqla_decode does after
//    forming the keys.
#pragma once

#include <cstdint>
#include <vector>

#include "presets.hpp"

namespace gqla::bench {

// Query rows [first, first + count) of one sequence's q_len rows.
struct RowBlock {
    int64_t first;
    int32_t count;
};

// Every row of short chunks; of longer ones 8 first, 4 in the middle (across
// the tile boundaries a power-of-two split would put there), 8 last.
std::vector<RowBlock> checked_blocks(int32_t q_len);

// Inputs of one check exactly as the library received them (values already
// rounded to the io dtype), per sequence b.
struct CheckInputs {
    const Preset* preset = nullptr;
    double scale = 0;
    std::vector<int64_t> lengths;  // cached tokens
    std::vector<int32_t> q_lens;   // queries (its last q_lens[b] tokens)
    // q rows packed in sequence order, [sum q_lens, H, Dq]: row n holds the
    // values of row n % q_period of `q` (a 16K-row chunk of distinct random
    // rows would cost gigabytes; a prime period lines up with no tile).
    const float* q = nullptr;  // [q_period, H, Dq]
    int64_t q_period = 1;
    // GQA kind
    std::vector<std::vector<float>> k, v;  // [L, G, D], [L, G, Dv]
    // GQLA
    const float* w = nullptr;                    // [G * (d_c + d_v), r], kv_b_proj layout
    std::vector<float> pool;                     // [pool rows, r]: the latent rows tokens draw from
    std::vector<std::vector<int32_t>> pool_row;  // [L]: the pool row of each token
    std::vector<std::vector<float>> kr;          // [L, d_r]
};

// The pool row of token j of sequence b (a hash: no period a page table
// could line up with).
int32_t latent_pool_row(int b, int64_t j, int pool_rows);

// Reference o [rows, H, Dv] of the checked rows, sequence by sequence and
// block by block in checked_blocks order. Runs on all OpenMP threads.
std::vector<double> reference_rows(const CheckInputs& in);

}  // namespace gqla::bench

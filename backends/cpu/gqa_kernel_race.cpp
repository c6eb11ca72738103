// SPDX-License-Identifier: Apache-2.0
#include "backends/cpu/gqa_kernel_race.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <random>
#include <vector>

#include "backends/cpu/aligned_buffer.hpp"
#include "core/dtype.hpp"

namespace gqla::cpu {

namespace {

constexpr int kRows = 4;  // heads per group of a GQA 32/8 decode
constexpr int kDim = 128;
constexpr int kTokens = 256;
constexpr int kCallsPerTrial = 8;
constexpr int kTrials = 7;

// One item's inputs and outputs, all in one page of kTokens tokens.
struct RaceItem {
    std::vector<uint16_t> k, v;
    std::vector<float> q, acc, m, l;
    std::vector<int64_t> limit;
    AlignedBuffer scratch;
    int32_t page = 0;
    GqaItem item{};

    RaceItem(const RaceItem&) = delete;  // item points into its members
    RaceItem& operator=(const RaceItem&) = delete;
    RaceItem(std::mt19937& rng, bool bf16_queries)
        : k(size_t(kTokens) * kDim),
          v(size_t(kTokens) * kDim),
          q(size_t(kRows) * kDim),
          acc(size_t(kRows) * kDim),
          m(kRows),
          l(kRows),
          limit(kRows, kTokens - 1) {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (uint16_t& x : k) x = f32_to_bf16(normal(rng));
        for (uint16_t& x : v) x = f32_to_bf16(normal(rng));
        const float scale = 1.4426950408889634f / std::sqrt(static_cast<float>(kDim));
        for (float& x : q) {
            const float value = bf16_queries ? bf16_to_f32(f32_to_bf16(normal(rng))) : normal(rng);
            x = value * scale;
        }
        item.rows = kRows;
        item.q = q.data();
        item.q_ld = kDim;
        item.q_scale = scale;
        item.row_limit = limit.data();
        item.page_table = &page;
        item.page_size = kTokens;
        item.t0 = 0;
        item.t1 = kTokens;
        item.k1 = k.data();
        item.k1_page_stride = int64_t(kTokens) * kDim;
        item.d1 = kDim;
        item.k2 = k.data();
        item.k2_page_stride = int64_t(kTokens) * kDim;
        item.d2 = 0;
        item.v = v.data();
        item.v_page_stride = int64_t(kTokens) * kDim;
        item.dv = kDim;
        item.acc = acc.data();
        item.m = m.data();
        item.l = l.data();
        if (scratch.allocate(static_cast<size_t>(gqa_scratch_floats(kRows, kDim)) * sizeof(float)))
            item.scratch = scratch.as<float>();
    }
    bool ready() const { return item.scratch != nullptr; }
};

double trial_seconds(GqaAttendFn fn, const RaceItem& x, const RaceItem& y) {
    const auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < kCallsPerTrial; ++c) {
        fn(x.item);
        fn(y.item);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

bool second_gqa_kernel_wins(GqaAttendFn a, GqaAttendFn b, double margin) try {
    std::mt19937 rng(20261204u);
    const RaceItem f32_queries(rng, false), bf16_queries(rng, true);
    if (!f32_queries.ready() || !bf16_queries.ready()) return false;  // no memory: keep the first
    // Untimed rounds warm the caches and the core's clock.
    trial_seconds(a, f32_queries, bf16_queries);
    trial_seconds(b, f32_queries, bf16_queries);
    double best_a = INFINITY, best_b = INFINITY;
    // Alternating trials, the best of each kept: a trial the scheduler
    // interrupts only reads slow.
    for (int t = 0; t < kTrials; ++t) {
        best_a = std::min(best_a, trial_seconds(a, f32_queries, bf16_queries));
        best_b = std::min(best_b, trial_seconds(b, f32_queries, bf16_queries));
    }
    return best_b <= margin * best_a;
} catch (const std::exception&) {
    return false;  // no memory for the items: keep the first
}

}  // namespace gqla::cpu

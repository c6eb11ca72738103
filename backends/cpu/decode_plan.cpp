// SPDX-License-Identifier: Apache-2.0
// Split-KV planning: see decode_plan.hpp.
#include "backends/cpu/decode_plan.hpp"

#include <algorithm>

namespace gqla::cpu {

namespace {

// Below this many tokens a piece is not worth a merge.
constexpr int64_t kMinPieceTokens = 256;
// Pieces per thread the split aims for: enough to balance uneven lengths.
constexpr int64_t kPiecesPerThread = 4;
constexpr int32_t kMaxPiecesPerUnit = 16;

}  // namespace

DecodePlan plan_arrays(float* workspace, const PathWorkspace& W) {
    DecodePlan plan;
    plan.items = reinterpret_cast<WorkItem*>(workspace + W.items_off);
    plan.units = reinterpret_cast<UnitSplit*>(workspace + W.splits_off);
    plan.order = reinterpret_cast<int32_t*>(workspace + W.order_off);
    return plan;
}

void plan_splits(DecodePlan& plan, int32_t num_units, const PathWorkspace& W, int32_t threads) {
    int64_t total = 0;
    for (int32_t u = 0; u < num_units; ++u) total += plan.items[u].t1;
    // Piece size: the work spread over threads * kPiecesPerThread pieces.
    // Units split into s >= 2 pieces hold at least (s/2) piece sizes of
    // tokens, so split pieces never exceed 2 * threads * kPiecesPerThread.
    const int64_t target = int64_t(threads) * kPiecesPerThread;
    const int64_t piece = std::max(kMinPieceTokens, (total + target - 1) / target);
    int32_t n = num_units;
    int32_t next_partial = 0;
    for (int32_t u = 0; u < num_units && threads > 1; ++u) {
        const int64_t len = plan.items[u].t1;
        int32_t s = static_cast<int32_t>(std::min<int64_t>((len + piece - 1) / piece, kMaxPiecesPerUnit));
        if (s < 2 || next_partial + s > W.max_partials || n + s - 1 > W.max_items) continue;
        plan.units[u].first_partial = next_partial;
        plan.units[u].count = s;
        for (int32_t k = 0; k < s; ++k) {
            WorkItem w{u, next_partial + k, len * k / s, len * (k + 1) / s, plan.items[u].rows};
            if (k == 0)
                plan.items[u] = w;
            else
                plan.items[n++] = w;
        }
        next_partial += s;
    }
    plan.num_items = n;
    plan.num_units = num_units;
    for (int32_t i = 0; i < n; ++i) plan.order[i] = i;
    WorkItem* items = plan.items;
    std::sort(plan.order, plan.order + n, [items](int32_t a, int32_t b) {
        return (items[a].t1 - items[a].t0) * items[a].rows > (items[b].t1 - items[b].t0) * items[b].rows;
    });
}

}  // namespace gqla::cpu

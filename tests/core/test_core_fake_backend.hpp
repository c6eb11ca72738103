// SPDX-License-Identifier: Apache-2.0
// A test double of the backend vtable for the core's bookkeeping tests. It
// does no attention: per cache row it keeps one number (the first element of
// the appended row), so tests can read a sequence's tokens back through its
// page table and see that copy-on-write, rollback and page sharing are right.
// Any operation can be told to fail once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend_api.h"

namespace fake {

enum class Op { None, Create, SetWeights, SetExpanded, Append, Expand, CopyPages, UpdateSequence, Decode };

struct Backend {
    gqla_backend_desc desc{};
    std::vector<float> rows;  // [layer][page][slot]: first element of each row
    bool expanded = false;
    std::vector<int> weights_set;  // per layer
    Op fail_next = Op::None;       // the next call of this op fails
    int append_calls = 0, expand_calls = 0, copy_calls = 0, update_calls = 0, decode_calls = 0;
    int32_t copied_pages = 0;
    // Snapshot of the last decode call.
    gqla_path last_path = GQLA_PATH_AUTO;
    std::vector<int64_t> last_lengths;
    int32_t last_q_len = 0;
    std::string error;

    float row(int32_t layer, int32_t page, int64_t slot) const {
        return rows[(static_cast<size_t>(layer) * desc.num_pages + page) * desc.page_size + slot];
    }
};

// The vtable (device CPU); Backend* is the ctx of every session made with it.
const gqla_backend_vtable* vtable();
// The same vtable declaring GQLA_BACKEND_FEATURE_FP8_CACHE only: 8-bit
// caches, but no kept expanded cache for them (as the CUDA backend).
const gqla_backend_vtable* vtable_fp8_without_expanded();
// The Backend of the session created last through vtable().
Backend* last_created();
// Make the next create fail.
void fail_next_create();

}  // namespace fake

// SPDX-License-Identifier: Apache-2.0
#include "core/workload.hpp"

#include <cstddef>

#include "core/error.hpp"

namespace gqla {

gqla_workload read_workload(const gqla_workload* w, const char* name) {
    constexpr size_t v1_size = offsetof(gqla_workload, q_len) + sizeof(int32_t);
    if (w == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "%s: NULL (expected a gqla_workload)", name);
    if (w->struct_size < v1_size)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s->struct_size: expected >= %zu (sizeof(gqla_workload)), got %zu", name,
             v1_size, w->struct_size);
    if (w->batch < 1) fail(GQLA_ERR_INVALID_ARGUMENT, "%s->batch: expected >= 1, got %d", name, w->batch);
    if (w->context < 1)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s->context: expected >= 1, got %lld", name,
             static_cast<long long>(w->context));
    if (w->q_len < 1) fail(GQLA_ERR_INVALID_ARGUMENT, "%s->q_len: expected >= 1, got %d", name, w->q_len);
    if (w->q_len > w->context)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s->q_len: %d exceeds %s->context %lld (queries are cached tokens)", name,
             w->q_len, name, static_cast<long long>(w->context));
    gqla_workload out{};
    out.struct_size = sizeof(out);
    out.batch = w->batch;
    out.context = w->context;
    out.q_len = w->q_len;
    // 1.2 appended topk; a shorter struct is a dense workload.
    constexpr size_t v2_size = offsetof(gqla_workload, topk) + sizeof(int32_t);
    if (w->struct_size >= v2_size) {
        if (w->topk < 0 || w->topk > (1 << 20))
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s->topk: expected 0 (dense) .. %d, got %d", name, 1 << 20, w->topk);
        out.topk = w->topk;
    }
    return out;
}

}  // namespace gqla

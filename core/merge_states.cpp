// SPDX-License-Identifier: Apache-2.0
// Host implementation of gqla_merge_attention_states. Per row (one query
// token and head) with parts i = 0..n-1:
//   m = max_i lse_i,  w_i = exp(lse_i - m),  W = sum_i w_i
//   o = sum_i w_i o_i / W,  lse = m + log W
// accumulated in double, so the merge adds no error beyond the final
// rounding to the output dtype. A part with lse = -inf attended to nothing:
// it is skipped, never multiplied (its output is undefined, NaN included).
// A NaN or +inf lse of a part that is not empty makes the row NaN.
#include "core/merge_states.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace gqla {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_common(const gqla_tensor* t, const char* name, int32_t index) {
    if (t->struct_size < sizeof(gqla_tensor))
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->struct_size: expected >= %zu (sizeof(gqla_tensor)), got %zu", name,
             index, sizeof(gqla_tensor), t->struct_size);
    if (t->device != GQLA_DEVICE_CPU)
        fail(GQLA_ERR_UNSUPPORTED,
             "%s[%d]: device memory is not supported by this merge yet; expected a host (GQLA_DEVICE_CPU) tensor", name,
             index);
    if (!dtype_valid(t->dtype))
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->dtype: expected f32, f16 or bf16, got %d", name, index,
             static_cast<int>(t->dtype));
    if (t->ndim < 1 || t->ndim > GQLA_MAX_DIMS)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->ndim: expected 1..%d, got %d", name, index, GQLA_MAX_DIMS, t->ndim);
    for (int d = 0; d < t->ndim; ++d)
        if (t->shape[d] < 0)
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->shape[%d]: expected >= 0, got %lld", name, index, d,
                 static_cast<long long>(t->shape[d]));
    if (t->shape[t->ndim - 1] > 1 && t->strides[t->ndim - 1] != 1)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->strides[%d]: expected 1 (innermost dim contiguous), got %lld", name,
             index, t->ndim - 1, static_cast<long long>(t->strides[t->ndim - 1]));
}

// Same leading shape as the reference tensor `like` over its first `dims` dims.
void check_shape(const gqla_tensor* t, const char* name, int32_t index, const gqla_tensor* like, int32_t dims,
                 const char* like_name) {
    if (t->ndim != dims)
        fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->ndim: expected %d (the shape of %s), got %d", name, index, dims,
             like_name, t->ndim);
    for (int d = 0; d < dims; ++d)
        if (t->shape[d] != like->shape[d])
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->shape[%d]: expected %lld (as %s), got %lld", name, index, d,
                 static_cast<long long>(like->shape[d]), like_name, static_cast<long long>(t->shape[d]));
}

// Element offset of row `row` (row-major over the leading dims) plus column c.
int64_t offset_of(const gqla_tensor* t, int32_t lead_dims, int64_t row, int64_t c) {
    int64_t off = 0;
    for (int d = lead_dims - 1; d >= 0; --d) {
        const int64_t extent = t->shape[d];
        off += (row % extent) * t->strides[d];
        row /= extent;
    }
    return off + c;
}

// Byte range [lo, hi) a tensor's elements can touch (for the overlap check).
void byte_span(const gqla_tensor* t, uintptr_t* lo, uintptr_t* hi) {
    int64_t min_off = 0, max_off = 0;
    for (int d = 0; d < t->ndim; ++d) {
        if (t->shape[d] == 0) {
            *lo = *hi = reinterpret_cast<uintptr_t>(t->data);
            return;
        }
        const int64_t reach = (t->shape[d] - 1) * t->strides[d];
        if (reach < 0)
            min_off += reach;
        else
            max_off += reach;
    }
    const int64_t es = static_cast<int64_t>(dtype_size(t->dtype));
    *lo = reinterpret_cast<uintptr_t>(t->data) + min_off * es;
    *hi = reinterpret_cast<uintptr_t>(t->data) + (max_off + 1) * es;
}

bool overlaps(const gqla_tensor* a, const gqla_tensor* b) {
    uintptr_t alo, ahi, blo, bhi;
    byte_span(a, &alo, &ahi);
    byte_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

}  // namespace

void merge_attention_states(int32_t num_states, const gqla_tensor* outputs, const gqla_tensor* lses, gqla_tensor* out,
                            gqla_tensor* out_lse) {
    if (num_states < 1) fail(GQLA_ERR_INVALID_ARGUMENT, "num_states: expected >= 1, got %d", num_states);
    if (!outputs) fail(GQLA_ERR_INVALID_ARGUMENT, "outputs: NULL");
    if (!lses) fail(GQLA_ERR_INVALID_ARGUMENT, "lses: NULL");
    if (!out) fail(GQLA_ERR_INVALID_ARGUMENT, "out: NULL");

    const gqla_tensor* first = &outputs[0];
    check_common(first, "outputs", 0);
    if (first->ndim < 2)
        fail(GQLA_ERR_INVALID_ARGUMENT, "outputs[0]->ndim: expected >= 2 ([rows..., dim]), got %d", first->ndim);
    const int32_t lead = first->ndim - 1;
    const int64_t dim = first->shape[lead];
    int64_t row_count = 1;
    for (int d = 0; d < lead; ++d) row_count *= first->shape[d];

    for (int32_t i = 0; i < num_states; ++i) {
        check_common(&outputs[i], "outputs", i);
        check_shape(&outputs[i], "outputs", i, first, first->ndim, "outputs[0]");
        check_common(&lses[i], "lses", i);
        if (lses[i].dtype != GQLA_DTYPE_F32)
            fail(GQLA_ERR_INVALID_ARGUMENT, "lses[%d]->dtype: expected f32, got %s", i, dtype_name(lses[i].dtype));
        check_shape(&lses[i], "lses", i, first, lead, "the leading dims of outputs[0]");
        if (row_count > 0 && (outputs[i].data == nullptr || lses[i].data == nullptr))
            fail(GQLA_ERR_INVALID_ARGUMENT, "%s[%d]->data: NULL for a non-empty tensor",
                 outputs[i].data == nullptr ? "outputs" : "lses", i);
    }
    check_common(out, "out", 0);
    check_shape(out, "out", 0, first, first->ndim, "outputs[0]");
    if (row_count > 0 && dim > 0 && out->data == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "out->data: NULL");
    if (out_lse) {
        check_common(out_lse, "out_lse", 0);
        if (out_lse->dtype != GQLA_DTYPE_F32)
            fail(GQLA_ERR_INVALID_ARGUMENT, "out_lse->dtype: expected f32, got %s", dtype_name(out_lse->dtype));
        check_shape(out_lse, "out_lse", 0, first, lead, "the leading dims of outputs[0]");
        if (row_count > 0 && out_lse->data == nullptr) fail(GQLA_ERR_INVALID_ARGUMENT, "out_lse->data: NULL");
        if (overlaps(out, out_lse)) fail(GQLA_ERR_INVALID_ARGUMENT, "out_lse: overlaps out; expected separate memory");
    }
    // The output may be one of the inputs exactly (in place: each row is read
    // whole before it is written) but may not partly overlap any of them.
    for (int32_t i = 0; i < num_states; ++i) {
        const gqla_tensor* targets[2] = {out, out_lse};
        for (const gqla_tensor* t : targets) {
            if (!t) continue;
            for (const gqla_tensor* src : {&outputs[i], &lses[i]}) {
                const bool same = src->data == t->data && src->dtype == t->dtype && src->ndim == t->ndim &&
                                  std::equal(src->strides, src->strides + src->ndim, t->strides);
                if (!same && overlaps(src, t))
                    fail(GQLA_ERR_INVALID_ARGUMENT,
                         "%s: overlaps %s[%d] without being the same tensor; expected separate memory or in place",
                         t == out ? "out" : "out_lse", src == &outputs[i] ? "outputs" : "lses", i);
            }
        }
    }
    if (row_count == 0) return;

    std::vector<double> acc(static_cast<size_t>(dim));
    std::vector<double> weight(static_cast<size_t>(num_states));
    for (int64_t row = 0; row < row_count; ++row) {
        double m = kNegInf;
        bool poisoned = false;
        for (int32_t i = 0; i < num_states; ++i) {
            const double l = static_cast<const float*>(lses[i].data)[offset_of(&lses[i], lead, row, 0)];
            weight[i] = l;
            if (std::isnan(l) || l == std::numeric_limits<double>::infinity())
                poisoned = true;
            else if (l > m)
                m = l;
        }
        double total = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        if (!poisoned && m != kNegInf) {
            for (int32_t i = 0; i < num_states; ++i) {
                if (weight[i] == kNegInf) continue;  // an empty part: skipped, never multiplied
                const double w = std::exp(weight[i] - m);
                total += w;
                const int64_t base = offset_of(&outputs[i], lead, row, 0);
                for (int64_t c = 0; c < dim; ++c)
                    acc[c] += w * load_as_f32(outputs[i].data, outputs[i].dtype, static_cast<size_t>(base + c));
            }
        }
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const int64_t obase = offset_of(out, lead, row, 0);
        for (int64_t c = 0; c < dim; ++c) {
            const double v = poisoned ? nan : (total > 0.0 ? acc[c] / total : 0.0);
            store_from_f32(out->data, out->dtype, static_cast<size_t>(obase + c), static_cast<float>(v));
        }
        if (out_lse) {
            const double l = poisoned ? nan : (total > 0.0 ? m + std::log(total) : kNegInf);
            static_cast<float*>(out_lse->data)[offset_of(out_lse, lead, row, 0)] = static_cast<float>(l);
        }
    }
}

}  // namespace gqla

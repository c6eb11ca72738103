// SPDX-License-Identifier: Apache-2.0
// SessionFuzz (session_fuzz.hpp): random arguments of the calls: live and
// unknown sequence ids, valid and out-of-range layers, host tensors in random
// strided layouts, and the flaws that make a tensor descriptor invalid.
#include "tests/fuzz/session_fuzz.hpp"

#include <algorithm>

namespace fuzz {

gqla_seq_id SessionFuzz::unknown_id() { return r_.chance(0.5) ? next_unused_id_ + r_.range(0, 3) : -r_.range(0, 5); }

// A live id, or (rarely, or when none) an unknown one.
gqla_seq_id SessionFuzz::some_id(Expect& e) {
    auto live = shadow_.live();
    if (live.empty() || r_.chance(0.04)) {
        e.error(GQLA_ERR_NOT_FOUND);
        return unknown_id();
    }
    return r_.pick(live);
}

int32_t SessionFuzz::some_layer(Expect& e) {
    if (r_.chance(0.03)) {
        e.error(GQLA_ERR_INVALID_ARGUMENT);
        return r_.chance(0.5) ? -1 : cfg_.num_layers;
    }
    return static_cast<int32_t>(r_.range(0, cfg_.num_layers - 1));
}

SessionFuzz::Tensor SessionFuzz::make_tensor(gqla_dtype dtype, const std::vector<int64_t>& shape, double sd,
                                             bool fill) {
    Tensor x;
    std::vector<int> order;
    for (int d = 0; d + 1 < static_cast<int>(shape.size()); ++d) order.push_back(d);
    if (r_.chance(0.25)) std::shuffle(order.begin(), order.end(), r_.gen());
    std::vector<int64_t> pad(shape.size(), 0);
    if (r_.chance(0.3))
        for (auto& p : pad) p = r_.range(0, 3);
    int64_t span = 0;
    x.t = fuzz::strided_tensor(dtype, shape, order, pad, &span);
    x.buf = TypedBuffer(dtype, static_cast<size_t>(std::max<int64_t>(span, 1)));
    x.t.data = x.buf.data();
    x.in_view.assign(x.buf.size(), 0);
    int64_t numel = 1;
    for (int64_t e : shape) numel *= e;
    x.stored.resize(static_cast<size_t>(numel));
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t flat = 0; flat < numel; ++flat) {
        int64_t rem = flat;
        for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
            idx[static_cast<size_t>(d)] = rem % shape[static_cast<size_t>(d)];
            rem /= shape[static_cast<size_t>(d)];
        }
        const size_t off = static_cast<size_t>(fuzz::element_offset(x.t, idx.data()));
        x.in_view[off] = 1;
        if (fill) {
            x.buf.set(off, r_.normal(sd));
            x.stored[static_cast<size_t>(flat)] = x.buf.get(off);
        }
    }
    return x;
}

std::vector<double> SessionFuzz::read_view(const Tensor& x) {
    std::vector<double> v(x.stored.size());
    int64_t numel = static_cast<int64_t>(v.size());
    std::vector<int64_t> idx(static_cast<size_t>(x.t.ndim), 0);
    for (int64_t flat = 0; flat < numel; ++flat) {
        int64_t rem = flat;
        for (int d = x.t.ndim - 1; d >= 0; --d) {
            idx[static_cast<size_t>(d)] = rem % x.t.shape[d];
            rem /= x.t.shape[d];
        }
        v[static_cast<size_t>(flat)] = x.buf.get(static_cast<size_t>(fuzz::element_offset(x.t, idx.data())));
    }
    return v;
}

void SessionFuzz::write_view(Tensor& x, const std::vector<double>& values) {
    x.stored.resize(values.size());
    std::vector<int64_t> idx(static_cast<size_t>(x.t.ndim), 0);
    for (int64_t flat = 0; flat < static_cast<int64_t>(values.size()); ++flat) {
        int64_t rem = flat;
        for (int d = x.t.ndim - 1; d >= 0; --d) {
            idx[static_cast<size_t>(d)] = rem % x.t.shape[d];
            rem /= x.t.shape[d];
        }
        const size_t off = static_cast<size_t>(fuzz::element_offset(x.t, idx.data()));
        x.buf.set(off, values[static_cast<size_t>(flat)]);
        x.stored[static_cast<size_t>(flat)] = x.buf.get(off);
    }
}

Flaw SessionFuzz::maybe_flaw(double p) {
    if (!r_.chance(p)) return Flaw::None;
    return static_cast<Flaw>(r_.range(1, 10));
}

bool SessionFuzz::apply_flaw(Flaw f, gqla_tensor& t, const gqla_tensor** ptr, gqla_dtype expected_dtype,
                             bool any_dtype) {
    const int inner = t.ndim - 1;
    switch (f) {
        case Flaw::None:
            return false;
        case Flaw::Dtype:
            if (any_dtype) return false;
            t.dtype = expected_dtype == GQLA_DTYPE_F32 ? GQLA_DTYPE_BF16 : GQLA_DTYPE_F32;
            return true;
        case Flaw::Ndim:
            t.ndim = t.ndim == 2 ? 3 : 2;
            return true;
        case Flaw::Extent:
            t.shape[inner] += 1;
            return true;
        case Flaw::InnerStride:
            if (t.shape[inner] <= 1) return false;
            t.strides[inner] = 2;
            return true;
        case Flaw::Null:
            *ptr = nullptr;
            return true;
        case Flaw::StructSize:
            t.struct_size = 4;
            return true;
        case Flaw::Device:
            t.device = static_cast<gqla_device_type>(5);
            return true;
        case Flaw::Negative:
            t.shape[0] = -1;
            return true;
        case Flaw::Overlap: {
            // An outer dim (extent > 1) with a stride that revisits elements
            // (a tensor without elements overlaps nothing).
            for (int d = 0; d <= inner; ++d)
                if (t.shape[d] == 0) return false;
            for (int d = 0; d < inner; ++d)
                if (t.shape[d] > 1 && t.shape[inner] > 1) {
                    t.strides[d] = 1;
                    return true;
                }
            return false;
        }
        case Flaw::DataNull: {
            int64_t numel = 1;
            for (int d = 0; d < t.ndim; ++d) numel *= t.shape[d];
            if (numel == 0) return false;
            t.data = nullptr;
            return true;
        }
    }
    return false;
}

}  // namespace fuzz

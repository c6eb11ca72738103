// SPDX-License-Identifier: Apache-2.0
// A gqla_attention request run over poisoned, optionally strided tensors and
// compared with the float64 reference, sequence by sequence.
#include "attention_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "tests/reference/reference.hpp"

namespace attention {

using abi::Harness;

abi::Buffer random_rows(Harness& h, int64_t rows) {
    return abi::make_input(h.rng(), h.config().io_dtype, static_cast<size_t>(rows * h.config().num_heads * h.q_dim()));
}

Result attend(Harness& h, const Request& rq, abi::Buffer& q_dense) {
    const int64_t B = static_cast<int64_t>(rq.seqs.size()), H = h.config().num_heads, N = rq.total_rows();
    const int64_t Dq = h.q_dim(), Dv = h.out_dim();
    const bool uniform = rq.q_lens.empty();
    using Shape = std::vector<int64_t>;
    const Shape q_shape = uniform ? Shape{B, rq.s_q, H, Dq} : Shape{N, H, Dq};
    const Shape o_shape = uniform ? Shape{B, rq.s_q, H, Dv} : Shape{N, H, Dv};
    const Shape l_shape = uniform ? Shape{B, rq.s_q, H} : Shape{N, H};
    const abi::Layout layout = rq.padded ? abi::Layout::Padded : abi::Layout::Contiguous;
    const auto q_str = abi::strides_for(q_shape, layout), o_str = abi::strides_for(o_shape, layout),
               l_str = abi::strides_for(l_shape, layout);
    const auto q_off = abi::offsets_of(q_shape, q_str), o_off = abi::offsets_of(o_shape, o_str),
               l_off = abi::offsets_of(l_shape, l_str);
    REQUIRE(q_off.size() == q_dense.size());
    const gqla_dtype io = h.config().io_dtype;

    // q: gaps NaN (reading them would poison the result); o/lse: NaN where
    // written, a sentinel in the gaps.
    abi::Buffer q = abi::make_poisoned(io, abi::span_of(q_shape, q_str));
    for (size_t i = 0; i < q_off.size(); ++i) q.set(q_off[i], q_dense.get(i));
    abi::Buffer o = abi::make_poisoned(io, abi::span_of(o_shape, o_str));
    abi::Buffer lse = abi::make_poisoned(GQLA_DTYPE_F32, abi::span_of(l_shape, l_str));
    for (size_t i = 0; i < o.size(); ++i) o.set(i, abi::kGapSentinel);
    for (size_t off : o_off) o.set(off, std::nan(""));
    for (size_t i = 0; i < lse.size(); ++i) lse.set(i, abi::kGapSentinel);
    for (size_t off : l_off) lse.set(off, std::nan(""));
    gqla_tensor tq = abi::view(q, q_shape, q_str), to = abi::view(o, o_shape, o_str),
                tl = abi::view(lse, l_shape, l_str);

    gqla_attention_args args;
    abi::require_ok(gqla_attention_args_default(&args), "gqla_attention_args_default");
    args.layer = rq.layer;
    args.batch = static_cast<int32_t>(B);
    args.seqs = rq.seqs.data();
    args.q_lens = uniform ? nullptr : rq.q_lens.data();
    args.q = &tq;
    args.o = &to;
    args.lse = rq.with_lse ? &tl : nullptr;
    args.path = rq.path;
    Result res;
    args.path_taken = &res.taken;
    res.seed = h.rng().seed();
    res.given_tol = abi::quantization_tolerance(h.config().cache_dtype, io);
    res.status = gqla_attention(h.session(), &args);
    if (res.status != GQLA_OK) return res;

    std::vector<char> is_o(o.size(), 0), is_l(lse.size(), 0);
    for (size_t off : o_off) is_o[off] = 1;
    for (size_t off : l_off) is_l[off] = 1;
    for (size_t i = 0; i < o.size(); ++i)
        if (!is_o[i] && o.get(i) != abi::kGapSentinel) res.gaps_untouched = false;
    for (size_t i = 0; i < lse.size(); ++i)
        if (!is_l[i] && lse.get(i) != abi::kGapSentinel) res.gaps_untouched = false;
    if (!rq.with_lse)  // lse NULL: nothing may be written there
        for (size_t off : l_off)
            if (!std::isnan(lse.get(off))) res.gaps_untouched = false;

    res.o.resize(o_off.size());
    for (size_t i = 0; i < o_off.size(); ++i) res.o[i] = o.get(o_off[i]);
    if (rq.with_lse) {
        res.lse.resize(l_off.size());
        for (size_t i = 0; i < l_off.size(); ++i) res.lse[i] = lse.get(l_off[i]);
    }

    int64_t row = 0;
    for (size_t b = 0; b < rq.seqs.size() && rq.check; ++b) {
        const int32_t n = rq.rows_of(b);
        const size_t nq = static_cast<size_t>(n * H * Dq), no = static_cast<size_t>(n * H * Dv),
                     nl = static_cast<size_t>(n * H);
        std::vector<double> qv(nq), ref_o(no), ref_l(nl);
        for (size_t i = 0; i < nq; ++i) qv[i] = q_dense.get(static_cast<size_t>(row * H * Dq) + i);
        const double* got_o = res.o.data() + row * H * Dv;
        auto compare = [&](bool stored, double& o_err, double& lse_err) {
            h.reference(rq.seqs[b], rq.layer, n, qv.data(), ref_o.data(), ref_l.data(), stored);
            o_err = std::max(o_err, gqla::ref::rel_l2(got_o, ref_o.data(), no));
            if (rq.with_lse) lse_err = std::max(lse_err, abi::lse_error(res.lse.data() + row * H, ref_l.data(), nl));
        };
        compare(true, res.o_err, res.lse_err);
        if (h.cache_rounds_inputs()) compare(false, res.o_err_given, res.lse_err_given);
        row += n;
    }
    if (!h.cache_rounds_inputs()) {
        res.o_err_given = res.o_err;
        res.lse_err_given = res.lse_err;
    }
    return res;
}

Result attend(Harness& h, const Request& rq) {
    abi::Buffer q = random_rows(h, rq.total_rows());
    return attend(h, rq, q);
}

gqla_config light_gqla_config(int32_t groups) {
    gqla_config cfg = abi::odd_gqla_config(groups);
    cfg.latent_dim = 136;
    cfg.nope_dim = 40;
    cfg.rope_dim = 24;
    cfg.value_dim = 56;
    return cfg;
}

}  // namespace attention

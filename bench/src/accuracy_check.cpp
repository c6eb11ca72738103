// SPDX-License-Identifier: Apache-2.0
#include "accuracy_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "reference_rows.hpp"
#include "support.hpp"

namespace gqla::bench {
namespace {

// Distinct latent rows the check's tokens draw from (reference_rows.hpp).
constexpr int kPoolRows = 64;
// Tokens each sequence holds beyond its queries: odd amounts, so the chunks
// start inside a page and the first query already sees a few keys.
constexpr int64_t kExtraTokens[] = {37, 70, 5, 101};
// Distinct query rows; the rest repeat them (prime: lines up with no tile).
constexpr int64_t kQueryPeriod = 1031;

// n random values rounded to the io dtype: raw bytes for the library, the
// same values widened to f32 for the reference.
std::vector<float> rounded(std::vector<unsigned char>& raw, size_t n, uint64_t seed, gqla_dtype io,
                           float scale = 1.0f) {
    raw = to_dtype(random_vector(n, seed, scale), io);
    return from_dtype(raw.data(), io, n);
}

}  // namespace

double error_bound(gqla_dtype cache) {
    switch (cache) {
        case GQLA_DTYPE_F32:
            return 1e-5;
        case GQLA_DTYPE_F16:
            return 2e-3;
        case GQLA_DTYPE_BF16:
            return 1e-2;
        case GQLA_DTYPE_FP8_E4M3:
            return 6e-2;  // against the inputs as given (docs/fp8-cache.md)
        default:
            break;
    }
    return 0;
}

double error_bound(gqla_dtype cache, gqla_dtype io) { return std::max(error_bound(cache), error_bound(io)); }

double relative_error_vs_reference(const AccuracySpec& spec) {
    const Preset& p = *spec.preset;
    const bool ragged = !spec.q_lens.empty();
    const bool attention = spec.attention || ragged;
    // Two sequences; one for chunks beyond 4096 queries, whose q alone is gigabytes.
    const std::vector<int32_t> q_lens = ragged ? spec.q_lens : std::vector<int32_t>(spec.s_q > 4096 ? 1 : 2, spec.s_q);
    const int B = static_cast<int>(q_lens.size());

    CheckInputs in;
    in.preset = &p;
    in.q_lens = q_lens;
    SessionShape shape = spec.shape;
    const int64_t page = shape.page_size > 0 ? shape.page_size : 64;
    int64_t rows = 0, tokens = 0;
    for (int b = 0; b < B; ++b) {
        const int64_t L = q_lens[b] + kExtraTokens[b % 4];
        in.lengths.push_back(L);
        rows += q_lens[b];
        tokens += (L + page - 1) / page * page;
    }
    shape.max_tokens = tokens;
    shape.max_sequences = B;
    shape.max_batch = B;
    shape.max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
    shape.max_q_tokens = rows;
    gqla_config cfg = make_config(p, shape);
    gqla_session* session = nullptr;
    check(gqla_session_create(&cfg, &session), "gqla_session_create");
    struct Guard {
        gqla_session* s;
        ~Guard() { gqla_session_destroy(s); }
    } guard{session};

    in.scale =
        p.is_gqla() ? 1.0 / std::sqrt(static_cast<double>(p.d_c + p.d_r)) : 1.0 / std::sqrt(static_cast<double>(p.D));
    std::vector<float> w;
    if (p.is_gqla()) {
        const int64_t w_rows = static_cast<int64_t>(p.G) * (p.d_c + p.d_v);
        w = random_vector(static_cast<size_t>(w_rows) * p.r, 101, 1.0f / std::sqrt(static_cast<float>(p.r)));
        gqla_tensor tw = host_tensor(w.data(), {w_rows, p.r});
        check(gqla_set_weights(session, 0, &tw), "gqla_set_weights");
        in.w = w.data();
    }

    // Cached rows, in the io dtype; the reference takes them as rounded to it.
    const gqla_dtype io = shape.io_dtype;
    const size_t io_size = dtype_size(io);
    std::vector<unsigned char> pool_raw;
    if (p.is_gqla()) in.pool = rounded(pool_raw, static_cast<size_t>(kPoolRows) * p.r, 200, io);
    std::vector<gqla_seq_id> ids(B);
    for (int b = 0; b < B; ++b) {
        const int64_t L = in.lengths[b];
        std::vector<unsigned char> a_raw, b_raw;
        gqla_tensor ta, tb;
        if (p.is_gqla()) {
            std::vector<int32_t>& pool_row = in.pool_row.emplace_back(static_cast<size_t>(L));
            a_raw.resize(static_cast<size_t>(L) * p.r * io_size);
            const size_t row_bytes = static_cast<size_t>(p.r) * io_size;
            for (int64_t j = 0; j < L; ++j) {
                pool_row[j] = latent_pool_row(b, j, kPoolRows);
                std::memcpy(a_raw.data() + j * row_bytes, pool_raw.data() + pool_row[j] * row_bytes, row_bytes);
            }
            in.kr.push_back(rounded(b_raw, static_cast<size_t>(L) * p.d_r, 300 + b, io));
            ta = host_tensor(a_raw.data(), io, {L, p.r});
            tb = host_tensor(b_raw.data(), io, {L, p.d_r});
        } else {
            in.k.push_back(rounded(a_raw, static_cast<size_t>(L) * p.G * p.D, 200 + b, io));
            in.v.push_back(rounded(b_raw, static_cast<size_t>(L) * p.G * p.Dv, 300 + b, io));
            ta = host_tensor(a_raw.data(), io, {L, p.G, p.D});
            tb = host_tensor(b_raw.data(), io, {L, p.G, p.Dv});
        }
        check(gqla_sequence_add(session, &ids[b]), "gqla_sequence_add");
        check(gqla_append(session, 0, ids[b], &ta, &tb), "gqla_append");
    }
    if (p.is_gqla() && shape.path != GQLA_PATH_AUTO) check(gqla_select_path(session, shape.path), "gqla_select_path");

    // Queries: kQueryPeriod distinct rows, repeated.
    const int64_t q_row_elems = static_cast<int64_t>(p.H) * p.q_dim();
    const int64_t o_row_elems = static_cast<int64_t>(p.H) * p.out_dim();
    in.q_period = std::min(rows, kQueryPeriod);
    std::vector<unsigned char> q_block_raw;
    const std::vector<float> q_block = rounded(q_block_raw, static_cast<size_t>(in.q_period * q_row_elems), 400, io);
    in.q = q_block.data();
    std::vector<unsigned char> q_raw(static_cast<size_t>(rows * q_row_elems) * io_size);
    for (size_t at = 0; at < q_raw.size(); at += q_block_raw.size())
        std::memcpy(q_raw.data() + at, q_block_raw.data(), std::min(q_block_raw.size(), q_raw.size() - at));
    std::vector<unsigned char> o_raw(static_cast<size_t>(rows * o_row_elems) * io_size);
    const std::vector<unsigned char> nan_row =  // poison: a row the call leaves unwritten fails the check
        to_dtype(std::vector<float>(static_cast<size_t>(o_row_elems), std::numeric_limits<float>::quiet_NaN()), io);
    for (size_t at = 0; at < o_raw.size(); at += nan_row.size())
        std::memcpy(o_raw.data() + at, nan_row.data(), nan_row.size());

    const int64_t s_q = q_lens[0];
    gqla_tensor tq = ragged ? host_tensor(q_raw.data(), io, {rows, p.H, p.q_dim()})
                            : host_tensor(q_raw.data(), io, {B, s_q, p.H, p.q_dim()});
    gqla_tensor to = ragged ? host_tensor(o_raw.data(), io, {rows, p.H, p.out_dim()})
                            : host_tensor(o_raw.data(), io, {B, s_q, p.H, p.out_dim()});
    if (attention) {
        gqla_attention_args args;
        check(gqla_attention_args_default(&args), "gqla_attention_args_default");
        gqla_path taken = GQLA_PATH_AUTO;
        args.layer = 0;
        args.batch = B;
        args.seqs = ids.data();
        args.q_lens = ragged ? q_lens.data() : nullptr;
        args.q = &tq;
        args.o = &to;
        args.path = spec.call_path;
        args.path_taken = &taken;
        check(gqla_attention(session, &args), "gqla_attention");
        const bool same_form = !p.is_gqla() || spec.call_path == GQLA_PATH_AUTO || taken == spec.call_path;
        if (!same_form)
            throw GqlaError(GQLA_ERR_INTERNAL, std::string("gqla_attention ran on ") + path_name(taken) +
                                                   " when asked for " + path_name(spec.call_path));
    } else {
        check(gqla_decode(session, 0, B, ids.data(), &tq, &to, nullptr), "gqla_decode");
    }
    check(gqla_session_synchronize(session), "gqla_session_synchronize");

    // The library's rows in the order reference_rows lists them.
    std::vector<float> o;
    int64_t first_row = 0;
    for (int b = 0; b < B; ++b) {
        for (const RowBlock& blk : checked_blocks(q_lens[b])) {
            const size_t at = static_cast<size_t>((first_row + blk.first) * o_row_elems);
            const std::vector<float> part =
                from_dtype(o_raw.data() + at * io_size, io, static_cast<size_t>(blk.count * o_row_elems));
            o.insert(o.end(), part.begin(), part.end());
        }
        first_row += q_lens[b];
    }
    const std::vector<double> ref = reference_rows(in);
    return ref::rel_l2(o.data(), ref.data(), o.size());
}

}  // namespace gqla::bench

// SPDX-License-Identifier: Apache-2.0
// Non-finite values through the C ABI, on every CPU kernel table the host
// has, for GQA and both GQLA paths and every cache dtype: a position a query
// may not see never reaches it (not even a NaN), and a NaN or inf at a
// position it sees always does, wherever the position falls in a vector
// lane, a register tile, a block or a page.
#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>
#include <set>
#include <string>

#include "nonfinite_support.hpp"

using nonfinite::Injection;
using nonfinite::Kind;
using nonfinite::kInf;
using nonfinite::kNaN;
using nonfinite::QueryNaN;
using nonfinite::SequenceSpec;
using nonfinite::Session;

namespace {

// Length of the test sequences: two pages and one token, so the causal tail
// of s_q = 4 (positions L-3 .. L-1) crosses a page (and block) boundary.
int64_t length_for(const Session& s) { return 2 * int64_t(s.page_size()) + 1; }

// Values put at positions a query may not see: NaN, +-inf and, for f16
// caches, numbers past f16's range (stored as +-inf).
std::vector<double> hidden_values(gqla_dtype dtype) {
    std::vector<double> v{kNaN, kInf, -kInf};
    if (dtype == GQLA_DTYPE_F16) {
        v.push_back(1e5);
        v.push_back(-1e5);
    }
    return v;
}

// Positions query 0 sees at lane, tile, block and page edges.
std::vector<int64_t> edge_positions(const Session& s, int64_t L, int32_t s_q) {
    const int64_t P = s.page_size();
    std::set<int64_t> pos{0, 3, 5, 12, P - 1, P, L - s_q};
    std::vector<int64_t> out;
    for (int64_t p : pos)
        if (p >= 0 && p <= L - s_q) out.push_back(p);
    return out;
}

template <class F>
void for_each_session_kind(F&& f) {
    nonfinite::for_each_isa([&](const char*) {
        for (Kind kind : nonfinite::kKinds)
            for (gqla_dtype dt : nonfinite::kDtypes) {
                const std::string kind_and_dtype =
                    std::string(nonfinite::kind_label(kind)) + ", " + gqla::dtype_name(dt) + " cache";
                CAPTURE(kind_and_dtype);
                f(kind, dt);
            }
    });
}

// One sequence of length L per (position, tensor a or b) with `value` in one
// element of that row. Elements rotate over the row (first, a middle one, the
// last) so that they fall into vector bodies and scalar tails. An inf in the
// latent is not tried: its key and value are the same numbers, where IEEE
// leaves the order of the GQLA algebra to decide between NaN and inf.
std::vector<gqla_seq_id> sequences_with_one_value(Session& s, Kind kind, int64_t L,
                                                  const std::vector<int64_t>& positions, double value) {
    std::vector<gqla_seq_id> seqs;
    int turn = 0;
    for (int64_t pos : positions)
        for (bool in_b : {false, true}) {
            if (kind != Kind::Gqa && !in_b && !std::isnan(value)) continue;
            const int64_t cols = in_b ? s.b_cols() : s.a_cols();
            const int64_t elem = turn % 3 == 0 ? 0 : turn % 3 == 1 ? cols / 2 + 1 : cols - 1;
            ++turn;
            seqs.push_back(s.add(SequenceSpec{L, {Injection{in_b, pos, elem, value}}}));
        }
    return seqs;
}

void release_all(Session& s, const std::vector<gqla_seq_id>& seqs) {
    for (gqla_seq_id id : seqs) s.release(id);
}

}  // namespace

TEST_CASE("non-finite values at positions a query may not see never reach it") {
    for_each_session_kind([](Kind kind, gqla_dtype dt) {
        Session s(kind, dt);
        const int64_t L = length_for(s);
        for (int32_t s_q = 2; s_q <= 4; ++s_q)
            for (double value : hidden_values(dt)) {
                CAPTURE(value);
                // One sequence per causal-tail position and tensor (whole
                // rows: every element of the key, value or latent), decoded
                // in one batch: query 0 stays finite and exact, the queries
                // that see the row do not (values and latents).
                std::vector<gqla_seq_id> seqs;
                for (int64_t pos = L - s_q + 1; pos < L; ++pos)
                    for (bool in_b : {false, true})
                        seqs.push_back(s.add(SequenceSpec{L, {Injection{in_b, pos, -1, value}}}));
                s.decode_and_check(seqs, s_q);
                release_all(s, seqs);
            }
        // A long sequence, split over threads and merged: NaN rows at every
        // causal-tail position of both tensors.
        std::vector<Injection> tail;
        const int64_t long_len = 600;
        for (int64_t pos = long_len - 3; pos < long_len; ++pos)
            for (bool in_b : {false, true}) tail.push_back(Injection{in_b, pos, -1, kNaN});
        const gqla_seq_id id = s.add(SequenceSpec{long_len, tail});
        s.decode_and_check({id}, 4);
        s.release(id);
    });
}

TEST_CASE("a NaN or inf at a visible position reaches every output it feeds") {
    for_each_session_kind([](Kind kind, gqla_dtype dt) {
        Session s(kind, dt);
        const int64_t L = length_for(s);
        // NaN for every s_q; +-inf (which follow IEEE softmax) for one.
        for (int32_t s_q = 1; s_q <= 4; ++s_q)
            for (double value : {kNaN, kInf, -kInf}) {
                if (!std::isnan(value) && s_q != 3) continue;
                CAPTURE(value);
                // One element per sequence: edges seen by query 0, then the
                // causal tail (seen by later queries only).
                std::vector<int64_t> positions = edge_positions(s, L, s_q);
                for (int64_t pos = L - s_q + 1; pos < L; ++pos) positions.push_back(pos);
                const std::vector<gqla_seq_id> seqs = sequences_with_one_value(s, kind, L, positions, value);
                s.decode_and_check(seqs, s_q);
                release_all(s, seqs);
            }
    });
}

// The same in a prefill chunk of 40 queries, which the CPU runs on its wide
// kernels (rows in SIMD lanes; on AVX512-BF16 hosts f32 queries as two bf16
// parts, whose low part must not turn an inf key's score into NaN).
TEST_CASE("a NaN or inf at a visible position of a prefill chunk reaches every output it feeds") {
    for_each_session_kind([](Kind kind, gqla_dtype dt) {
        Session s(kind, dt);
        const int32_t s_q = 40;
        const int64_t L = std::max<int64_t>(length_for(s), 50);
        for (double value : {kNaN, kInf, -kInf}) {
            CAPTURE(value);
            // Seen by every query, by the later half, by the last one only.
            const std::vector<gqla_seq_id> seqs = sequences_with_one_value(s, kind, L, {0, L - s_q / 2, L - 1}, value);
            s.decode_and_check(seqs, s_q);
            release_all(s, seqs);
        }
    });
}

TEST_CASE("recycled pages: slots past a sequence's length are never read") {
    for_each_session_kind([](Kind kind, gqla_dtype dt) {
        // Three pages in the pool: sequence B must reuse what A wrote.
        const int64_t P = nonfinite::page_size_for(dt);
        Session s(kind, dt, 3 * P);
        std::vector<Injection> all_nan;
        for (int64_t pos = 0; pos < 3 * P; ++pos)
            for (bool in_b : {false, true}) all_nan.push_back(Injection{in_b, pos, -1, kNaN});
        const gqla_seq_id a = s.add(SequenceSpec{3 * P, all_nan});
        s.release(a);
        const gqla_seq_id b = s.add(SequenceSpec{P + P / 2 + 1, {}});  // ends mid-page
        for (int32_t s_q = 1; s_q <= 4; ++s_q) s.decode_and_check({b}, s_q);
        s.release(b);
    });
}

TEST_CASE("a NaN in one head's query makes that head non-finite and no other") {
    for_each_session_kind([](Kind kind, gqla_dtype dt) {
        Session s(kind, dt);
        const int64_t L = length_for(s);
        const gqla_seq_id id = s.add(SequenceSpec{L, {}});
        for (int32_t s_q = 1; s_q <= 4; ++s_q) {
            // A different head, query token and element each time (the rope
            // part of a GQLA query too).
            const int32_t head = (s_q * 5) % s.H();
            const int32_t dim = s_q % 2 ? 1 : s.q_dim() - 1;
            s.decode_and_check({id}, s_q, {QueryNaN{s_q - 1, head, dim}});
            s.decode_and_check({id}, s_q, {QueryNaN{0, (head + 1) % s.H(), s.q_dim() / 2}});
        }
        s.release(id);
    });
}

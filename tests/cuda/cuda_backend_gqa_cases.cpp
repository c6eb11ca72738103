// SPDX-License-Identifier: Apache-2.0
// gqla_cuda_backend_test, GQA-kind decode against the float64 reference:
// the causal rule on a tiny f32 case, then per cache dtype paged sequences
// of ragged lengths at s_q 1-8, long single sequences (split KV), odd dims,
// pages that cut or match the TMA boxes, 256-wide keys, and copy-on-write
// forks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cuda_backend_fixture.hpp"

using namespace gqla::test;

namespace {

void test_gqa(gqla_dtype cache, int H, int G, int D, int Dv, int page_size, const std::vector<int64_t>& lengths) {
    gqla_backend_desc d = base_desc(GQLA_KIND_GQA, cache, H, G, page_size);
    d.head_dim = D;
    d.value_dim = Dv;
    d.softmax_scale = 1.f / std::sqrt(float(D));
    d.num_pages = 0;
    for (int64_t L : lengths) d.num_pages += (L + 40 + page_size - 1) / page_size + 1;
    Harness h(d);
    std::vector<int> ids;
    for (int64_t L : lengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    int64_t min_len = *std::min_element(lengths.begin(), lengths.end());
    char name[160];
    // With 4 heads per group: 4, 8, 12, 20 and 32 rows, i.e. one narrow row
    // block, or 2-4 (with GQLA_CUDA_NARROW_SHARED=1 sharing one CTA's rings,
    // the last of 3 + 1 empty).
    for (int s_q : {1, 2, 3, 5, 8}) {
        if (s_q > min_len) continue;
        std::snprintf(name, sizeof name, "gqa %s H=%d G=%d D=%d Dv=%d P=%d B=%zu s_q=%d", gqla::dtype_name(cache), H, G,
                      D, Dv, page_size, lengths.size(), s_q);
        check_decode(h, name, 1, ids, s_q, GQLA_PATH_GQA);
    }
    // Fork: child shares the parent's pages; both then append different rows
    // (copy-on-write of the shared partial page) and must see their own data.
    int child = h.fork(ids[0]);
    for (int layer = 0; layer < d.num_layers; ++layer) {
        fill_sequence(h, layer, child, 5, false);
        fill_sequence(h, layer, ids[0], 3, false);
    }
    std::snprintf(name, sizeof name, "gqa fork+cow %s P=%d", cache == GQLA_DTYPE_BF16 ? "bf16" : "f16/f32", page_size);
    check_decode(h, name, 0, {ids[0], child}, 1, GQLA_PATH_GQA);
}

const std::vector<int64_t> kRagged = {1, 63, 64, 65, 1000, 3001};
const std::vector<int64_t> kLongRagged = {8, 130, 2000, 4097};

void gqa_32_8(gqla_dtype t) { test_gqa(t, 32, 8, 128, 128, 64, kLongRagged); }

// One sequence: 2-16 splits per row block (by s_q), merged inside a
// thread-block cluster on Hopper; then more splits than a cluster holds,
// merged by the combine pass.
void gqa_single(gqla_dtype t) {
    test_gqa(t, 32, 8, 128, 128, 64, {1100});
    test_gqa(t, 32, 8, 128, 128, 64, {5000});
}

void gqa_odd(gqla_dtype t) { test_gqa(t, 6, 2, 40, 80, 63, kRagged); }

// Pages that hold whole 16-token TMA boxes but are not a power of two
// (48) or one box (16), and 256-wide keys (four boxes per key half);
// lengths end mid-box so the last box of a sequence is copied instead.
void gqa_tma_pages_48(gqla_dtype t) { test_gqa(t, 16, 4, 128, 128, 48, {1, 17, 100, 1000}); }
void gqa_tma_pages_16(gqla_dtype t) { test_gqa(t, 8, 8, 64, 64, 16, {15, 16, 33, 700}); }
void gqa_tma_keys_256(gqla_dtype t) { test_gqa(t, 16, 2, 256, 128, 32, {31, 64, 500}); }

void gqa_odd_simt_dims(gqla_dtype t) { test_gqa(t, 6, 3, 36, 20, 65, {1, 70, 300}); }

}  // namespace

// Causal rule on a tiny f32 case: query row i must match the attention over
// exactly the first L - s_q + i + 1 tokens (and not its neighbours).
TEST_CASE("causal rule") {
    gqla_backend_desc d = base_desc(GQLA_KIND_GQA, GQLA_DTYPE_F32, 1, 1, 64);
    d.head_dim = 8;
    d.value_dim = 8;
    d.softmax_scale = 0.5f;
    d.num_pages = 8;
    Harness h(d);
    int id = h.add();
    const int L = 6, s_q = 3, D = 8;
    for (int layer = 0; layer < 2; ++layer) fill_sequence(h, layer, id, L, false);
    std::vector<float> q = randn(s_q * D), o(s_q * D, NAN), lse(s_q, NAN);
    auto seqs = h.decode_seqs({id}, 1, s_q);
    gqla_decode_args a{};
    a.layer = 1;
    a.path = GQLA_PATH_GQA;
    a.batch = 1;
    a.q_len = s_q;
    a.seqs = seqs.data();
    a.q = host_view(q.data(), GQLA_DTYPE_F32, {1, s_q, 1, D});
    a.o = host_view(o.data(), GQLA_DTYPE_F32, {1, s_q, 1, D});
    a.lse = host_view(lse.data(), GQLA_DTYPE_F32, {1, s_q, 1});
    require_ok(h, h.vt->decode(h.ctx, &a), "decode");
    const auto& s = h.seqs[id];
    for (int i = 0; i < s_q; ++i) {
        const int expected = L - s_q + i + 1;
        for (int vis = expected - 1; vis <= std::min(L, expected + 1); ++vis) {
            std::vector<double> qd(q.begin() + i * D, q.begin() + (i + 1) * D), ro(D), rl(1);
            std::vector<double> K(s.a_rows[1].begin(), s.a_rows[1].end()), V(s.b_rows[1].begin(), s.b_rows[1].end());
            gqla::ref::gqa_decode(1, 1, D, D, vis, 1, 0.5, qd.data(), K.data(), V.data(), ro.data(), rl.data());
            const double err = gqla::ref::rel_l2(o.data() + i * D, ro.data(), D);
            CAPTURE(i);
            CAPTURE(vis);
            if (vis == expected)
                check_error("causal row matches its prefix", err, 1e-5);
            else
                CHECK_MESSAGE(err > 1e-3, "a neighbour prefix must not match");
        }
    }
}

GQLA_CASES_PER_CACHE_DTYPE("gqa 32/8", gqa_32_8)
GQLA_CASES_PER_CACHE_DTYPE("gqa single", gqa_single)
GQLA_CASES_PER_CACHE_DTYPE("gqa odd", gqa_odd)
GQLA_CASES_PER_CACHE_DTYPE("gqa tma pages 48", gqa_tma_pages_48)
GQLA_CASES_PER_CACHE_DTYPE("gqa tma pages 16", gqa_tma_pages_16)
GQLA_CASES_PER_CACHE_DTYPE("gqa tma keys 256", gqa_tma_keys_256)
GQLA_CASES_PER_CACHE_DTYPE("gqa odd simt dims", gqa_odd_simt_dims)

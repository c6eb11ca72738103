// SPDX-License-Identifier: Apache-2.0
// gqla_cuda_backend_test, GQLA decode against the float64 reference, per
// cache dtype: the absorb path, then the switch to the GQA path mid-sequence
// (the expanded cache filled by expand, then by write_expanded appends);
// the bytes of W_UKV as the session keeps it; shapes of the latent kernel
// (MLA, odd dims, pages that cut its tiles, 72 and 128 heads, batches whose
// splits merge in a cluster); the absorb path on device q and o in the io
// dtype with padded strides; and more absorb GEMM shapes than the cuBLASLt
// plan cache holds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cuda_backend_fixture.hpp"

using namespace gqla::test;

namespace {

// GQLA decode on the absorb path (s_q 1 and 3), then on the GQA path after a
// switch mid-sequence, and on the absorb path again after the switch.
void test_gqla(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
               const std::vector<int64_t>& lengths, int max_q_len = 8) {
    gqla_backend_desc d = gqla_desc(cache, H, G, r, dc, dr, dv, page_size, lengths);
    d.max_q_len = max_q_len;
    Harness h(d);
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    const char* cn = gqla::dtype_name(cache);
    // W_UKV per layer in the cache dtype, which the absorb projections and
    // the expansion GEMM read alike: one block per group, or with several
    // heads per group one copy of its group's block per head (unless
    // GQLA_CUDA_HEAD_WEIGHTS=0).
    int64_t mem[4] = {0, 0, 0, 0};
    h.vt->memory_usage(h.ctx, mem);
    const char* head_knob = std::getenv("GQLA_CUDA_HEAD_WEIGHTS");
    const int blocks = H > G && !(head_knob && std::string(head_knob) == "0") ? H : G;
    const int64_t w_bytes = int64_t(d.num_layers) * blocks * (dc + dv) * r * int64_t(gqla::dtype_size(cache));
    {
        INFO("gqla weight bytes (one block per " << (blocks == G ? "group) " : "head) ") << cn);
        CHECK(mem[2] == w_bytes);
    }
    char name[160];
    const int64_t min_len = *std::min_element(lengths.begin(), lengths.end());
    for (int s_q : {1, 3}) {
        if (s_q > min_len || s_q > max_q_len) continue;
        std::snprintf(name, sizeof name, "gqla absorb %s H=%d G=%d r=%d dc=%d dr=%d dv=%d s_q=%d", cn, H, G, r, dc, dr,
                      dv, s_q);
        check_decode(h, name, 1, ids, s_q, GQLA_PATH_ABSORB);
    }
    // Switch to the GQA path mid-sequence: enable + expand what is cached,
    // then keep appending with write_expanded.
    require_ok(h, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    for (int layer = 0; layer < d.num_layers; ++layer) {
        std::vector<gqla_append_item> items;
        for (int id : ids) {
            auto& s = h.seqs[id];
            items.push_back({s.pages.data(), s.slot, 0, s.len[size_t(layer)], 0});
        }
        gqla_expand_args e{layer, static_cast<int32_t>(items.size()), items.data()};
        require_ok(h, h.vt->expand(h.ctx, &e), "expand");
        for (int id : ids) fill_sequence(h, layer, id, 7, true);
    }
    for (int s_q : {1, 4}) {
        if (s_q > max_q_len) continue;
        std::snprintf(name, sizeof name, "gqla gqa-path %s H=%d G=%d r=%d dc=%d dr=%d dv=%d s_q=%d", cn, H, G, r, dc,
                      dr, dv, s_q);
        check_decode(h, name, 1, ids, s_q, GQLA_PATH_GQA);
        std::snprintf(name, sizeof name, "gqla absorb after switch %s s_q=%d", cn, s_q);
        check_decode(h, name, 1, ids, s_q, GQLA_PATH_ABSORB);
    }
}

// The absorb path with device q and o in the io dtype (the cache's 16-bit
// dtype, or f32), viewed inside wider tensors (padded head, token and
// sequence strides, an odd element offset for o's 16-bit case): no host
// staging, so the query pack reads q and the output projection or unpack
// writes o where they are, and nothing may touch the padding. The reference
// takes the queries as rounded to the io dtype. even_tokens: no padding
// between a sequence's tokens, so with one head per group their columns are
// evenly spaced at s_q > 1 too.
void test_absorb_device_io(gqla_dtype io, int H, int G, int r, int dc, int dr, int dv,
                           const std::vector<int64_t>& lengths, int s_q, bool even_tokens = false) {
    gqla_backend_desc d = gqla_desc(io, H, G, r, dc, dr, dv, 64, lengths);
    d.io_dtype = io;
    Harness h(d);
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    const int B = static_cast<int>(lengths.size()), dq = dc + dr;
    const size_t es = gqla::dtype_size(io);
    const int64_t qsH = dq + 8, qsQ = H * qsH + 16, qsB = s_q * qsQ + (even_tokens ? 0 : 24);
    const int64_t osH = dv + 8, osQ = H * osH + 8, osB = s_q * osQ + (even_tokens ? 0 : 40);
    const int64_t o_first = io == GQLA_DTYPE_F32 ? 0 : 1;
    const float poison = -768.f;  // exact in every io dtype
    std::vector<unsigned char> hq(size_t(B * qsB) * es), ho(size_t(B * osB + o_first) * es);
    for (size_t i = 0; i < size_t(B * qsB); ++i) gqla::store_from_f32(hq.data(), io, i, poison);
    for (size_t i = 0; i < size_t(B * osB + o_first); ++i) gqla::store_from_f32(ho.data(), io, i, poison);
    std::vector<double> qd(size_t(B) * s_q * H * dq);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int b = 0; b < B; ++b)
        for (int qi = 0; qi < s_q; ++qi)
            for (int hh = 0; hh < H; ++hh)
                for (int c = 0; c < dq; ++c) {
                    const size_t at = size_t(b * qsB + qi * qsQ + hh * qsH + c);
                    gqla::store_from_f32(hq.data(), io, at, nd(rng));
                    qd[((size_t(b) * s_q + qi) * H + hh) * dq + c] = gqla::load_as_f32(hq.data(), io, at);
                }
    void *dqp = nullptr, *dop = nullptr;
    cudaMalloc(&dqp, hq.size());
    cudaMalloc(&dop, ho.size());
    cudaMemcpy(dqp, hq.data(), hq.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dop, ho.data(), ho.size(), cudaMemcpyHostToDevice);

    auto seqs = h.decode_seqs(ids, 1, s_q);
    gqla_decode_args a{};
    a.layer = 1;
    a.path = GQLA_PATH_ABSORB;
    a.batch = B;
    a.q_len = s_q;
    a.seqs = seqs.data();
    a.q = host_view(dqp, io, {B, s_q, H, dq});
    a.q.strides[0] = qsB;
    a.q.strides[1] = qsQ;
    a.q.strides[2] = qsH;
    a.q.on_device = 1;
    a.o = host_view(static_cast<unsigned char*>(dop) + o_first * es, io, {B, s_q, H, dv});
    a.o.strides[0] = osB;
    a.o.strides[1] = osQ;
    a.o.strides[2] = osH;
    a.o.on_device = 1;
    require_ok(h, h.vt->decode(h.ctx, &a), "decode");
    REQUIRE_MESSAGE(cudaMemcpy(ho.data(), dop, ho.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "copy o");
    cudaFree(dqp);
    cudaFree(dop);

    std::vector<float> o(size_t(B) * s_q * H * dv);
    int64_t padding_touched = 0;
    for (int64_t i = 0; i < B * osB + o_first; ++i) {
        const int64_t j = i - o_first, b = j / osB, jb = j % osB, qi = jb / osQ, jq = jb % osQ, hh = jq / osH,
                      c = jq % osH;
        const bool inside = j >= 0 && qi < s_q && hh < H && c < dv;
        const float v = gqla::load_as_f32(ho.data(), io, size_t(i));
        if (inside)
            o[((size_t(b) * s_q + qi) * H + hh) * dv + c] = v;
        else
            padding_touched += v != poison;
    }
    std::vector<double> ref(o.size());
    for (int b = 0; b < B; ++b) {
        const auto& s = h.seqs[ids[size_t(b)]];
        std::vector<double> q1(qd.begin() + size_t(b) * s_q * H * dq, qd.begin() + size_t(b + 1) * s_q * H * dq);
        std::vector<double> A(s.a_rows[1].begin(), s.a_rows[1].end()), Bv(s.b_rows[1].begin(), s.b_rows[1].end());
        std::vector<double> W(h.weights[1].begin(), h.weights[1].end());
        gqla::ref::gqla_decode(H, G, r, dc, dr, dv, s.len[1], s_q, d.softmax_scale, q1.data(), W.data(), A.data(),
                               Bv.data(), ref.data() + size_t(b) * s_q * H * dv, nullptr);
    }
    char name[160];
    std::snprintf(name, sizeof name, "gqla absorb device io %s H=%d G=%d dc=%d dv=%d s_q=%d%s", gqla::dtype_name(io), H,
                  G, dc, dv, s_q, even_tokens ? " even tokens" : "");
    check_error(std::string(name) + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(io));
    INFO(std::string(name) << " padding untouched");
    CHECK(padding_touched == 0);
}

// The absorb projections keep one cuBLASLt plan per GEMM shape, at most 64,
// replacing the least recently used: decode 34 batch x s_q shapes (68
// GEMM shapes, one head per group) on one session, then the first ones
// again, rebuilt after their eviction; every result against the reference.
void test_absorb_many_shapes(gqla_dtype cache) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 16; ++i) lengths.push_back(5 + 5 * i);
    Harness h(gqla_desc(cache, 4, 4, 64, 16, 16, 24, 16, lengths));
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    std::vector<std::pair<int, int>> shapes;  // (batch, s_q), batch * s_q all distinct
    for (int b = 1; b <= 16; ++b) shapes.push_back({b, 1});
    for (int b = 9; b <= 16; ++b) shapes.push_back({b, 2});
    for (int b = 11; b <= 16; ++b) shapes.push_back({b, 3});
    for (int b = 13; b <= 16; ++b) shapes.push_back({b, 4});
    shapes.push_back({1, 1});
    shapes.push_back({2, 1});
    const char* cn = gqla::dtype_name(cache);
    for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [b, s_q] = shapes[i];
        char name[160];
        std::snprintf(name, sizeof name, "gqla absorb shape %zu of %zu %s B=%d s_q=%d", i + 1, shapes.size(), cn, b,
                      s_q);
        check_decode(h, name, 1, std::vector<int>(ids.end() - b, ids.end()), s_q, GQLA_PATH_ABSORB);
    }
}

void gqla_odd(gqla_dtype t) { test_gqla(t, 6, 2, 384, 96, 32, 80, 63, {1, 64, 65, 900}); }
void gqla_mla(gqla_dtype t) { test_gqla(t, 16, 16, 512, 128, 64, 128, 64, {5, 700, 2000}); }
void gqla_32_8(gqla_dtype t) { test_gqla(t, 32, 8, 512, 64, 64, 128, 64, {3, 1500}); }

// 15 sequences: the latent kernel's 2-8 splits of a row block merge
// inside a thread-block cluster (Hopper), as at H=32, B=64.
void gqla_batch(gqla_dtype t) {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 15; ++i) lengths.push_back(150 + 37 * i);
    test_gqla(t, 32, 8, 512, 64, 64, 128, 64, lengths);
    // With max_q_len 1 the partials hold 4 splits of these 15
    // sequences: the 8 that merge in a cluster do not need them.
    lengths.clear();
    for (int i = 0; i < 15; ++i) lengths.push_back(600 + 23 * i);
    test_gqla(t, 32, 8, 512, 64, 64, 128, 64, lengths, 1);
}

// Latent kernel shapes with pages that cut its 64-token tiles (37: no
// TMA box fits, copies; 16: one TMA box per page; 128: two tiles per
// page), a partial second row block (72 heads) and the DeepSeek-V3
// head count.
void gqla_mla_odd_pages(gqla_dtype t) { test_gqla(t, 72, 8, 512, 64, 64, 64, 37, {2, 500, 1300}); }
void gqla_mla_page_16(gqla_dtype t) { test_gqla(t, 16, 4, 512, 64, 64, 64, 16, {40, 777}); }
void gqla_mla_page_128(gqla_dtype t) { test_gqla(t, 32, 8, 512, 64, 64, 64, 128, {200, 1100}); }
void gqla_mla_128(gqla_dtype t) { test_gqla(t, 128, 128, 512, 32, 64, 32, 64, {70, 900}); }

// Device q and o in the io dtype with padded strides: 4 heads per
// group (with per-head weight copies batched over heads like one
// head per group, else the rows of a group are not evenly spaced in
// q or o), one head per group (s_q 1, or s_q 3 with evenly spaced
// tokens: its columns are evenly spaced, so the projections read q
// and write o where they lie and, on Hopper, the latent kernel reads
// q's rope part; s_q 3 with padded tokens: they are not), and widths
// that are not multiples of 8. One head per group with d_c = 40
// leaves q's rope part 16-byte aligned (read in place), with d_c = 36
// not (packed).
void gqla_absorb_device_io(gqla_dtype t) {
    test_absorb_device_io(t, 32, 8, 512, 64, 64, 128, {3, 700, 1500}, 1);
    test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 1);
    test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 3);
    test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 3, true);
    test_absorb_device_io(t, 8, 8, 512, 40, 64, 40, {70, 300}, 1);
    test_absorb_device_io(t, 8, 8, 512, 36, 64, 40, {70, 300}, 2, true);
    test_absorb_device_io(t, 6, 2, 384, 36, 20, 44, {2, 64, 300}, 2);
}

}  // namespace

GQLA_CASES_PER_CACHE_DTYPE("gqla odd", gqla_odd)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla", gqla_mla)
GQLA_CASES_PER_CACHE_DTYPE("gqla 32/8", gqla_32_8)
GQLA_CASES_PER_CACHE_DTYPE("gqla batch", gqla_batch)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla odd pages", gqla_mla_odd_pages)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla page 16", gqla_mla_page_16)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla page 128", gqla_mla_page_128)
GQLA_CASES_PER_CACHE_DTYPE("gqla mla 128", gqla_mla_128)
GQLA_CASES_PER_CACHE_DTYPE("gqla absorb device io", gqla_absorb_device_io)
GQLA_CASES_PER_CACHE_DTYPE("gqla absorb many shapes", test_absorb_many_shapes)

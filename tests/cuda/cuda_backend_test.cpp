// SPDX-License-Identifier: Apache-2.0
// GPU tests of the CUDA backend through its vtable (no core needed): decode
// vs the float64 reference for GQA and GQLA (both paths), paged with ragged
// lengths and s_q > 1, odd dims, f32/f16/bf16 caches, copy-on-write forks,
// a path switch mid-sequence, CUDA graph replay after more appends, ragged
// calls (per-sequence query counts) and the transient GQA form of GQLA.
// Exit 77 (ctest SKIP_RETURN_CODE) when no GPU is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "vtable_harness.hpp"

using namespace gqla::test;

namespace {

std::mt19937 rng(12345);
int failures = 0;

std::vector<float> randn(size_t n, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

double tolerance(gqla_dtype cache) { return cache == GQLA_DTYPE_F32 ? 1e-5 : cache == GQLA_DTYPE_F16 ? 2e-3 : 1e-2; }

void report(const std::string& name, double err, double tol) {
    bool ok = err <= tol;
    if (!ok) ++failures;
    std::printf("%-4s %-72s rel_l2 %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", name.c_str(), err, tol);
}

gqla_backend_desc base_desc(gqla_kind kind, gqla_dtype cache, int H, int G, int page_size) {
    gqla_backend_desc d{};
    d.kind = kind;
    d.num_heads = H;
    d.num_kv_heads = G;
    d.num_layers = 2;
    d.keep_latent = 1;  // GQLA: the latent pool exists (backend_api.h)
    d.cache_dtype = cache;
    d.io_dtype = GQLA_DTYPE_F32;
    d.page_size = page_size;
    d.num_pages = 512;
    d.max_sequences = 16;
    d.max_batch = 16;
    d.max_q_len = 8;
    d.device_index = 0;
    d.num_threads = 1;
    return d;
}

// Decodes `ids` with host q/o/lse and checks against the reference.
void check_decode(Harness& h, const std::string& name, int layer, const std::vector<int>& ids, int s_q,
                  gqla_path path) {
    const gqla_backend_desc& d = h.desc;
    const bool gqla = d.kind == GQLA_KIND_GQLA;
    const int H = d.num_heads, dq = gqla ? d.nope_dim + d.rope_dim : d.head_dim, dv = d.value_dim;
    const int B = static_cast<int>(ids.size());
    std::vector<float> q = randn(size_t(B) * s_q * H * dq);
    std::vector<float> o(size_t(B) * s_q * H * dv, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(size_t(B) * s_q * H, std::numeric_limits<float>::quiet_NaN());
    auto seqs = h.decode_seqs(ids, layer, s_q);
    gqla_decode_args a{};
    a.layer = layer;
    a.path = path;
    a.batch = B;
    a.q_len = s_q;
    a.seqs = seqs.data();
    a.q = host_view(q.data(), GQLA_DTYPE_F32, {B, s_q, H, dq});
    a.o = host_view(o.data(), GQLA_DTYPE_F32, {B, s_q, H, dv});
    a.lse = host_view(lse.data(), GQLA_DTYPE_F32, {B, s_q, H});
    expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &a), "decode");

    std::vector<double> ref_o(o.size()), ref_lse(lse.size());
    for (int b = 0; b < B; ++b) {
        const auto& s = h.seqs[ids[static_cast<size_t>(b)]];
        const int64_t L = s.len[static_cast<size_t>(layer)];
        std::vector<double> qd(q.begin() + size_t(b) * s_q * H * dq, q.begin() + size_t(b + 1) * s_q * H * dq);
        std::vector<double> A(s.a_rows[size_t(layer)].begin(), s.a_rows[size_t(layer)].end());
        std::vector<double> Bv(s.b_rows[size_t(layer)].begin(), s.b_rows[size_t(layer)].end());
        double* ro = ref_o.data() + size_t(b) * s_q * H * dv;
        double* rl = ref_lse.data() + size_t(b) * s_q * H;
        if (!gqla) {
            gqla::ref::gqa_decode(H, d.num_kv_heads, d.head_dim, dv, L, s_q, d.softmax_scale, qd.data(), A.data(),
                                  Bv.data(), ro, rl);
        } else {
            std::vector<double> W(h.weights[size_t(layer)].begin(), h.weights[size_t(layer)].end());
            gqla::ref::gqla_decode(H, d.num_kv_heads, d.latent_dim, d.nope_dim, d.rope_dim, dv, L, s_q, d.softmax_scale,
                                   qd.data(), W.data(), A.data(), Bv.data(), ro, rl);
        }
    }
    const double tol = tolerance(d.cache_dtype);
    report(name + " o", gqla::ref::rel_l2(o.data(), ref_o.data(), o.size()), tol);
    report(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()), tol);
}

void fill_sequence(Harness& h, int layer, int id, int64_t n, bool expanded) {
    // Two appends per sequence so rows cross page boundaries mid-call.
    int64_t first = n / 3;
    for (int64_t part : {first, n - first}) {
        if (part == 0) continue;
        auto a = randn(size_t(part) * h.a_width());
        auto b = randn(size_t(part) * h.b_width());
        h.append(layer, id, part, a.data(), b.data(), expanded);
    }
}

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

// A GQLA session's description with pages for `lengths` plus 40 more rows each.
gqla_backend_desc gqla_desc(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
                            const std::vector<int64_t>& lengths) {
    gqla_backend_desc d = base_desc(GQLA_KIND_GQLA, cache, H, G, page_size);
    d.latent_dim = r;
    d.nope_dim = dc;
    d.rope_dim = dr;
    d.value_dim = dv;
    d.softmax_scale = 1.f / std::sqrt(float(dc + dr));
    d.num_pages = 0;
    for (int64_t L : lengths) d.num_pages += (L + 40 + page_size - 1) / page_size + 1;
    return d;
}

// Random W_UKV on every layer, then one sequence per length, filled on every layer.
std::vector<int> add_gqla_sequences(Harness& h, const std::vector<int64_t>& lengths) {
    const gqla_backend_desc& d = h.desc;
    for (int layer = 0; layer < d.num_layers; ++layer)
        h.set_weights(layer, randn(size_t(d.num_kv_heads) * (d.nope_dim + d.value_dim) * d.latent_dim,
                                   1.f / std::sqrt(float(d.latent_dim))));
    std::vector<int> ids;
    for (int64_t L : lengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    return ids;
}

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
    report(std::string("gqla weight bytes (one block per ") + (blocks == G ? "group) " : "head) ") + cn,
           std::fabs(double(mem[2] - w_bytes)) / double(w_bytes), 0.0);
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
    expect_ok(h.vt, h.ctx, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    for (int layer = 0; layer < d.num_layers; ++layer) {
        std::vector<gqla_append_item> items;
        for (int id : ids) {
            auto& s = h.seqs[id];
            items.push_back({s.pages.data(), s.slot, 0, s.len[size_t(layer)], 0});
        }
        gqla_expand_args e{layer, static_cast<int32_t>(items.size()), items.data()};
        expect_ok(h.vt, h.ctx, h.vt->expand(h.ctx, &e), "expand");
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
    expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &a), "decode");
    if (cudaMemcpy(ho.data(), dop, ho.size(), cudaMemcpyDeviceToHost) != cudaSuccess)
        throw std::runtime_error("copy o");
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
    report(std::string(name) + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(io));
    report(std::string(name) + " padding untouched", double(padding_touched), 0.0);
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

// One decode call captured in a CUDA graph on a stream of the session's own;
// the caller replays `exec` on `stream`. The session gets the default
// stream back at the end.
struct CapturedDecode {
    Harness& h;
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CapturedDecode(Harness& harness, const gqla_decode_args& a) : h(harness) {
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, stream), "set_stream");
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess)
            throw std::runtime_error("capture");
        expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &a), "decode (captured)");
        if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) throw std::runtime_error("end capture");
        if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) throw std::runtime_error("instantiate");
    }
    ~CapturedDecode() {
        if (h.vt->set_stream(h.ctx, nullptr) != GQLA_OK) {
            ++failures;
            std::printf("FAIL set_stream(NULL) after a captured decode\n");
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
    }
};

// Contiguous device tensors of a decode over B sequences: q [B, s_q, H, dq]
// and o [B, s_q, H, dv] in `io`, lse [B, s_q, H] in f32.
struct DeviceDecodeTensors {
    int64_t B, s_q, H, dq, dv;
    gqla_dtype io;
    void* q = nullptr;
    void* o = nullptr;
    float* lse = nullptr;
    size_t q_bytes() const { return size_t(B * s_q * H * dq) * gqla::dtype_size(io); }
    size_t o_bytes() const { return size_t(B * s_q * H * dv) * gqla::dtype_size(io); }
    size_t lse_count() const { return size_t(B * s_q * H); }
    DeviceDecodeTensors(int64_t B_, int64_t s_q_, int64_t H_, int64_t dq_, int64_t dv_, gqla_dtype io_)
        : B(B_), s_q(s_q_), H(H_), dq(dq_), dv(dv_), io(io_) {
        if (cudaMalloc(&q, q_bytes()) != cudaSuccess || cudaMalloc(&o, o_bytes()) != cudaSuccess ||
            cudaMalloc(&lse, lse_count() * sizeof(float)) != cudaSuccess)
            throw std::runtime_error("cudaMalloc of the decode tensors");
    }
    ~DeviceDecodeTensors() {
        cudaFree(q);
        cudaFree(o);
        cudaFree(lse);
    }
    // Arguments of a decode of layer 1 of `seqs` (B of them) over these tensors.
    gqla_decode_args args(const std::vector<gqla_decode_seq>& seqs, gqla_path path) const {
        gqla_decode_args a{};
        a.layer = 1;
        a.path = path;
        a.batch = static_cast<int32_t>(B);
        a.q_len = static_cast<int32_t>(s_q);
        a.seqs = seqs.data();
        a.q = host_view(q, io, {B, s_q, H, dq});
        a.q.on_device = 1;
        a.o = host_view(o, io, {B, s_q, H, dv});
        a.o.on_device = 1;
        a.lse = host_view(lse, GQLA_DTYPE_F32, {B, s_q, H});
        a.lse.on_device = 1;
        return a;
    }
};

// GQA 8 heads over 2 KV heads of 128, pages of 64: the stream and graph tests' session.
gqla_backend_desc gqa_8_2_d128(gqla_dtype cache, int64_t num_pages) {
    gqla_backend_desc d = base_desc(GQLA_KIND_GQA, cache, 8, 2, 64);
    d.head_dim = 128;
    d.value_dim = 128;
    d.softmax_scale = 1.f / std::sqrt(128.f);
    d.num_pages = num_pages;
    return d;
}

// Checks o and lse of a layer-1 decode of `ids` on a gqa_8_2_d128 session
// (q, o, lse as the host copies of the device tensors) against the float64
// reference over the sequences' rows as the harness recorded them.
void report_gqa_8_2_d128(const Harness& h, const std::vector<int>& ids, int s_q, const std::vector<float>& q,
                         const std::vector<float>& o, const std::vector<float>& lse, const std::string& name) {
    const int H = 8, D = 128;
    const size_t q_rows = size_t(s_q) * H * D, lse_rows = size_t(s_q) * H;
    std::vector<double> ref(o.size()), ref_lse(lse.size());
    for (size_t b = 0; b < ids.size(); ++b) {
        const auto& s = h.seqs.at(ids[b]);
        std::vector<double> qd(q.begin() + b * q_rows, q.begin() + (b + 1) * q_rows);
        std::vector<double> K(s.a_rows[1].begin(), s.a_rows[1].end()), V(s.b_rows[1].begin(), s.b_rows[1].end());
        gqla::ref::gqa_decode(H, 2, D, D, s.len[1], s_q, h.desc.softmax_scale, qd.data(), K.data(), V.data(),
                              ref.data() + b * q_rows, ref_lse.data() + b * lse_rows);
    }
    report(name + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(h.desc.cache_dtype));
    report(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()), tolerance(h.desc.cache_dtype));
}

// Decode captured in a CUDA graph with device tensors; replayed after more
// appends (new lengths, new pages) it must produce the new result.
// lengths {100, 1000, 3000} split past the cluster limit (a combine pass
// merges); {100, 700, 900} split 15 ways, merged inside a cluster (Hopper),
// and after the appends the last splits of the captured launch are empty.
void test_graph_replay(gqla_dtype cache, const std::vector<int64_t>& lengths) {
    const gqla_backend_desc d = gqa_8_2_d128(cache, 256);
    Harness h(d);
    std::vector<int> ids;
    for (int64_t L : lengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    const int B = 3, s_q = 2, H = 8, D = 128;
    const DeviceDecodeTensors t(B, s_q, H, D, D, GQLA_DTYPE_F32);
    float *dq = static_cast<float*>(t.q), *dout = static_cast<float*>(t.o), *dlse = t.lse;
    const auto seqs = h.decode_seqs(ids, 1, s_q);
    CapturedDecode captured(h, t.args(seqs, GQLA_PATH_GQA));
    cudaStream_t stream = captured.stream;

    for (int round = 0; round < 2; ++round) {
        if (round == 1)
            for (int id : ids) fill_sequence(h, 1, id, 77, false);  // more tokens, new pages
        std::vector<float> q = randn(size_t(B) * s_q * H * D);
        cudaMemcpyAsync(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice, stream);
        cudaMemsetAsync(dout, 0xff, sizeof(float) * B * s_q * H * D, stream);  // NaN poison
        cudaGraphLaunch(captured.exec, stream);
        std::vector<float> o(size_t(B) * s_q * H * D), lse(size_t(B) * s_q * H);
        cudaMemcpyAsync(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost, stream);
        cudaMemcpyAsync(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost, stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("graph replay failed");
        report_gqa_8_2_d128(
            h, ids, s_q, q, o, lse,
            "graph replay T<=" + std::to_string(lengths.back()) + (round ? " after appends" : " as captured"));
    }
}

// A stream switch orders the session's later work after what it queued on
// the old stream: an append is still copying its rows on the legacy default
// stream when the session moves to a stream that does not synchronize with
// it, and the decode queued there at once must read those rows. Twice: onto
// a plain stream, then onto a stream being captured into a CUDA graph (the
// capture cannot wait on outside work, so the switch waits on the host; the
// graph is replayed right after).
void test_stream_switch(gqla_dtype cache) {
    const gqla_backend_desc d = gqa_8_2_d128(cache, 320);
    Harness h(d);
    const int id = h.add();
    fill_sequence(h, 1, id, 100, false);
    const int H = 8, D = 128;
    const int64_t more = 8000;  // 16 MB of f32 rows: copies that outlast the decode's launch
    const DeviceDecodeTensors t(1, 1, H, D, D, GQLA_DTYPE_F32);
    for (const bool capture : {false, true}) {
        const std::vector<float> q = randn(size_t(H) * D);
        cudaMemcpy(t.q, q.data(), q.size() * 4, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        const std::vector<float> a = randn(size_t(more) * h.a_width()), b = randn(size_t(more) * h.b_width());
        h.append(1, id, more, a.data(), b.data(), false);  // queued on the legacy default stream

        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        const auto seqs = h.decode_seqs({id}, 1);
        const gqla_decode_args args = t.args(seqs, GQLA_PATH_GQA);
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        if (capture) {
            if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess)
                throw std::runtime_error("capture");
            expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, stream), "set_stream (capturing)");
            expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &args), "decode (captured) after the switch");
            if (cudaStreamEndCapture(stream, &graph) != cudaSuccess ||
                cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
                throw std::runtime_error("end capture / instantiate");
            cudaGraphLaunch(exec, stream);
        } else {
            expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, stream), "set_stream");
            expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &args), "decode after the switch");
        }
        std::vector<float> o(size_t(H) * D), lse(H);
        cudaMemcpyAsync(o.data(), t.o, o.size() * 4, cudaMemcpyDeviceToHost, stream);
        cudaMemcpyAsync(lse.data(), t.lse, lse.size() * 4, cudaMemcpyDeviceToHost, stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess)
            throw std::runtime_error("decode after a stream switch failed");
        expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, nullptr), "set_stream(NULL)");
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);

        report_gqa_8_2_d128(
            h, {id}, 1, q, o, lse,
            capture ? "decode captured right after a stream switch" : "decode right after a stream switch");
    }
}

// The absorb path captured in a CUDA graph with device q / o in the io dtype
// (MLA shape: on Hopper in 16-bit the projection and the latent kernel read
// q in place, the latent kernel launched as a programmatic dependent of the
// projection); replayed after more appends it must produce the new result.
void test_absorb_graph_replay(gqla_dtype io) {
    const std::vector<int64_t> lengths = {90, 650, 1500};
    gqla_backend_desc d = gqla_desc(io, 16, 16, 512, 128, 64, 128, 64, lengths);
    d.io_dtype = io;
    Harness h(d);
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    const int B = 3, s_q = 2, H = d.num_heads, dq = d.nope_dim + d.rope_dim, dv = d.value_dim;
    const std::vector<double> W(h.weights[1].begin(), h.weights[1].end());
    const size_t es = gqla::dtype_size(io), nq = size_t(B) * s_q * H * dq, no = size_t(B) * s_q * H * dv;
    const DeviceDecodeTensors t(B, s_q, H, dq, dv, io);
    void *dqp = t.q, *dop = t.o;
    float* dlse = t.lse;
    const auto seqs = h.decode_seqs(ids, 1, s_q);
    CapturedDecode captured(h, t.args(seqs, GQLA_PATH_ABSORB));
    cudaStream_t stream = captured.stream;

    for (int round = 0; round < 2; ++round) {
        if (round == 1)
            for (int id : ids) fill_sequence(h, 1, id, 30, false);  // more tokens, past a page end
        std::vector<unsigned char> hq(nq * es), ho(no * es);
        std::vector<double> qd(nq);
        const std::vector<float> q = randn(nq);
        for (size_t i = 0; i < nq; ++i) {
            gqla::store_from_f32(hq.data(), io, i, q[i]);
            qd[i] = gqla::load_as_f32(hq.data(), io, i);  // the reference takes q as rounded to the io dtype
        }
        cudaMemcpyAsync(dqp, hq.data(), hq.size(), cudaMemcpyHostToDevice, stream);
        cudaMemsetAsync(dop, 0xff, ho.size(), stream);  // NaN poison
        cudaGraphLaunch(captured.exec, stream);
        std::vector<float> lse(size_t(B) * s_q * H);
        cudaMemcpyAsync(ho.data(), dop, ho.size(), cudaMemcpyDeviceToHost, stream);
        cudaMemcpyAsync(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost, stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("graph replay failed");
        std::vector<float> o(no);
        for (size_t i = 0; i < no; ++i) o[i] = gqla::load_as_f32(ho.data(), io, i);
        std::vector<double> ref(no), ref_lse(lse.size());
        for (int b = 0; b < B; ++b) {
            const auto& s = h.seqs[ids[size_t(b)]];
            std::vector<double> A(s.a_rows[1].begin(), s.a_rows[1].end()), Bv(s.b_rows[1].begin(), s.b_rows[1].end());
            gqla::ref::gqla_decode(H, d.num_kv_heads, d.latent_dim, d.nope_dim, d.rope_dim, dv, s.len[1], s_q,
                                   d.softmax_scale, qd.data() + size_t(b) * s_q * H * dq, W.data(), A.data(), Bv.data(),
                                   ref.data() + size_t(b) * s_q * H * dv, ref_lse.data() + size_t(b) * s_q * H);
        }
        const std::string name =
            std::string("absorb graph replay ") + gqla::dtype_name(io) + (round ? " after appends" : " as captured");
        report(name + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(io));
        report(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()), tolerance(io));
    }
}

// Causal rule on a tiny f32 case: query row i must match the attention over
// exactly the first L - s_q + i + 1 tokens (and not its neighbours).
void test_causal_rule() {
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
    expect_ok(h.vt, h.ctx, h.vt->decode(h.ctx, &a), "decode");
    const auto& s = h.seqs[id];
    for (int i = 0; i < s_q; ++i) {
        const int expected = L - s_q + i + 1;
        for (int vis = expected - 1; vis <= std::min(L, expected + 1); ++vis) {
            std::vector<double> qd(q.begin() + i * D, q.begin() + (i + 1) * D), ro(D), rl(1);
            std::vector<double> K(s.a_rows[1].begin(), s.a_rows[1].end()), V(s.b_rows[1].begin(), s.b_rows[1].end());
            gqla::ref::gqa_decode(1, 1, D, D, vis, 1, 0.5, qd.data(), K.data(), V.data(), ro.data(), rl.data());
            const double err = gqla::ref::rel_l2(o.data() + i * D, ro.data(), D);
            char name[96];
            std::snprintf(name, sizeof name, "causal row %d vs prefix %d (%s)", i, vis,
                          vis == expected ? "match" : "differ");
            if (vis == expected)
                report(name, err, 1e-5);
            else
                report(name, err > 1e-3 ? 0.0 : 1.0, 0.5);  // a neighbour prefix must not match
        }
    }
}

// ---- ragged calls and the GQA_TRANSIENT form ----

// Float64 reference o [s_q, H, dv] and lse [s_q, H] of one sequence's last
// s_q queries q [s_q, H, dq], over the rows the harness recorded.
void reference_rows(const Harness& h, int id, int layer, int s_q, const double* q, double* o, double* lse) {
    const gqla_backend_desc& d = h.desc;
    const auto& s = h.seqs.at(id);
    const int64_t L = s.len[size_t(layer)];
    const std::vector<double> A(s.a_rows[size_t(layer)].begin(), s.a_rows[size_t(layer)].end());
    const std::vector<double> Bv(s.b_rows[size_t(layer)].begin(), s.b_rows[size_t(layer)].end());
    if (d.kind == GQLA_KIND_GQA) {
        gqla::ref::gqa_decode(d.num_heads, d.num_kv_heads, d.head_dim, d.value_dim, L, s_q, d.softmax_scale, q,
                              A.data(), Bv.data(), o, lse);
    } else {
        const std::vector<double> W(h.weights[size_t(layer)].begin(), h.weights[size_t(layer)].end());
        gqla::ref::gqla_decode(d.num_heads, d.num_kv_heads, d.latent_dim, d.nope_dim, d.rope_dim, d.value_dim, L, s_q,
                               d.softmax_scale, q, W.data(), A.data(), Bv.data(), o, lse);
    }
}

int query_dim(const gqla_backend_desc& d) { return d.kind == GQLA_KIND_GQLA ? d.nope_dim + d.rope_dim : d.head_dim; }
int64_t sum_of(const std::vector<int>& v) {
    int64_t n = 0;
    for (int x : v) n += x;
    return n;
}

// Outputs of one call, rows packed in sequence order: o [N, H, dv], lse [N, H].
struct CallOutput {
    std::vector<float> o, lse;
};

// One call of layer `layer` over `ids`, sequence b with q_lens[b] queries,
// q [N, H, dq] (f32, rows in sequence order). ragged: [N, H, .] views;
// otherwise every q_len must be equal and the views are [B, s_q, H, .].
// device_io: q / o / lse in device memory with padded head and token strides
// (so every run's view must use them), else contiguous host tensors.
CallOutput attention_call(Harness& h, int layer, const std::vector<int>& ids, const std::vector<int>& q_lens,
                          const std::vector<float>& q, gqla_path path, bool transient, bool ragged, bool device_io) {
    const gqla_backend_desc& d = h.desc;
    const int H = d.num_heads, dq = query_dim(d), dv = d.value_dim, B = static_cast<int>(ids.size());
    const int64_t N = sum_of(q_lens);
    const auto seqs = h.ragged_seqs(ids, layer, q_lens);
    const int64_t qh = device_io ? dq + 4 : dq, qt = H * qh + (device_io ? 8 : 0);
    const int64_t oh = device_io ? dv + 4 : dv, ot = H * oh + (device_io ? 8 : 0);
    const int64_t lt = device_io ? H + 3 : H;
    std::vector<float> hq(size_t(N * qt), 0.f), ho(size_t(N * ot), std::numeric_limits<float>::quiet_NaN()),
        hl(size_t(N * lt), std::numeric_limits<float>::quiet_NaN());
    for (int64_t t = 0; t < N; ++t)
        for (int hh = 0; hh < H; ++hh) std::copy_n(q.begin() + (t * H + hh) * dq, dq, hq.begin() + t * qt + hh * qh);
    void *pq = hq.data(), *po = ho.data(), *pl = hl.data();
    if (device_io) {
        if (cudaMalloc(&pq, hq.size() * 4) != cudaSuccess || cudaMalloc(&po, ho.size() * 4) != cudaSuccess ||
            cudaMalloc(&pl, hl.size() * 4) != cudaSuccess)
            throw std::runtime_error("cudaMalloc of the call's tensors");
        cudaMemcpy(pq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(po, ho.data(), ho.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(pl, hl.data(), hl.size() * 4, cudaMemcpyHostToDevice);
    }
    gqla_decode_args a{};
    a.layer = layer;
    a.path = path;
    a.batch = B;
    a.q_len = *std::max_element(q_lens.begin(), q_lens.end());
    a.seqs = seqs.data();
    a.ragged = ragged ? 1 : 0;
    a.transient = transient ? 1 : 0;
    a.total_q = N;
    if (ragged) {
        a.q = host_view(pq, GQLA_DTYPE_F32, {N, H, dq});
        a.q.strides[0] = qt;
        a.q.strides[1] = qh;
        a.o = host_view(po, GQLA_DTYPE_F32, {N, H, dv});
        a.o.strides[0] = ot;
        a.o.strides[1] = oh;
        a.lse = host_view(pl, GQLA_DTYPE_F32, {N, H});
        a.lse.strides[0] = lt;
    } else {
        const int64_t s_q = q_lens[0];
        a.q = host_view(pq, GQLA_DTYPE_F32, {B, s_q, H, dq});
        a.q.strides[0] = s_q * qt;
        a.q.strides[1] = qt;
        a.q.strides[2] = qh;
        a.o = host_view(po, GQLA_DTYPE_F32, {B, s_q, H, dv});
        a.o.strides[0] = s_q * ot;
        a.o.strides[1] = ot;
        a.o.strides[2] = oh;
        a.lse = host_view(pl, GQLA_DTYPE_F32, {B, s_q, H});
        a.lse.strides[0] = s_q * lt;
        a.lse.strides[1] = lt;
    }
    a.q.on_device = a.o.on_device = a.lse.on_device = device_io ? 1 : 0;
    const gqla_status st = h.vt->decode(h.ctx, &a);
    if (device_io) {
        cudaMemcpy(ho.data(), po, ho.size() * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hl.data(), pl, hl.size() * 4, cudaMemcpyDeviceToHost);
        cudaFree(pq);
        cudaFree(po);
        cudaFree(pl);
    }
    expect_ok(h.vt, h.ctx, st, ragged ? "decode (ragged)" : "decode (uniform)");
    CallOutput out;
    out.o.resize(size_t(N) * H * dv);
    out.lse.resize(size_t(N) * H);
    for (int64_t t = 0; t < N; ++t)
        for (int hh = 0; hh < H; ++hh) {
            std::copy_n(ho.begin() + t * ot + hh * oh, dv, out.o.begin() + (t * H + hh) * dv);
            out.lse[size_t(t * H + hh)] = hl[size_t(t * lt + hh)];
        }
    return out;
}

void check_reference(const Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                     const std::vector<int>& q_lens, const std::vector<float>& q, const CallOutput& out) {
    const gqla_backend_desc& d = h.desc;
    const int H = d.num_heads, dq = query_dim(d), dv = d.value_dim;
    std::vector<double> ro(out.o.size()), rl(out.lse.size());
    int64_t row = 0;
    for (size_t b = 0; b < ids.size(); ++b) {
        const std::vector<double> qd(q.begin() + row * H * dq, q.begin() + (row + q_lens[b]) * H * dq);
        reference_rows(h, ids[b], layer, q_lens[b], qd.data(), ro.data() + row * H * dv, rl.data() + row * H);
        row += q_lens[b];
    }
    const double tol = tolerance(d.cache_dtype);
    report(name + " o", gqla::ref::rel_l2(out.o.data(), ro.data(), ro.size()), tol);
    report(name + " lse", gqla::ref::rel_l2(out.lse.data(), rl.data(), rl.size()), tol);
}

// Two computations that should agree to f32 rounding (the same kernels on
// the same rows, or expanded rows rounded the same way).
void check_agree(const std::string& name, const CallOutput& a, const CallOutput& b, double tol = 1e-5) {
    const std::vector<double> bo(b.o.begin(), b.o.end()), bl(b.lse.begin(), b.lse.end());
    report(name + " o", gqla::ref::rel_l2(a.o.data(), bo.data(), bo.size()), tol);
    report(name + " lse", gqla::ref::rel_l2(a.lse.data(), bl.data(), bl.size()), tol);
}

// A ragged call (host and device tensors) against the reference, and against
// one uniform call per run of equal query counts, which is what it runs
// (the same kernels on the same rows: equal to f32 rounding).
void check_ragged(Harness& h, const std::string& name, int layer, const std::vector<int>& ids,
                  const std::vector<int>& q_lens, gqla_path path, bool transient) {
    const int H = h.desc.num_heads, dq = query_dim(h.desc);
    const std::vector<float> q = randn(size_t(sum_of(q_lens)) * H * dq);
    const CallOutput host = attention_call(h, layer, ids, q_lens, q, path, transient, true, false);
    check_reference(h, name + " host", layer, ids, q_lens, q, host);
    const CallOutput device = attention_call(h, layer, ids, q_lens, q, path, transient, true, true);
    check_reference(h, name + " device", layer, ids, q_lens, q, device);
    CallOutput runs;
    int64_t row = 0;
    for (size_t first = 0; first < ids.size();) {
        size_t end = first + 1;
        while (end < ids.size() && q_lens[end] == q_lens[first]) ++end;
        const std::vector<int> run_ids(ids.begin() + first, ids.begin() + end);
        const std::vector<int> run_lens(q_lens.begin() + first, q_lens.begin() + end);
        const int64_t n = sum_of(run_lens);
        const std::vector<float> run_q(q.begin() + row * H * dq, q.begin() + (row + n) * H * dq);
        const CallOutput r = attention_call(h, layer, run_ids, run_lens, run_q, path, transient, false, false);
        runs.o.insert(runs.o.end(), r.o.begin(), r.o.end());
        runs.lse.insert(runs.lse.end(), r.lse.begin(), r.lse.end());
        row += n;
        first = end;
    }
    // A transient run expands only its own sequences, in other GEMM shapes
    // than the whole call: its expanded rows may round differently by an ulp.
    check_agree(name + " = uniform runs", host, runs, transient ? tolerance(h.desc.cache_dtype) : 1e-5);
}

// Query counts of the ragged cases: runs {1}, {3, 3}, {1, 1}, {8}, {2}.
const std::vector<int> kRaggedQLens = {1, 3, 3, 1, 1, 8, 2};
const std::vector<int64_t> kRaggedLengths = {9, 40, 130, 64, 700, 33, 300};

// GQA kind: ragged calls with 4 heads per group (4-32 rows a group).
void test_ragged_gqa(gqla_dtype cache) {
    gqla_backend_desc d = gqa_8_2_d128(cache, 0);
    d.num_heads = 16;
    d.num_kv_heads = 4;
    for (int64_t L : kRaggedLengths) d.num_pages += (L + 63) / 64 + 1;
    d.max_q_tokens = sum_of(kRaggedQLens);  // exactly one ragged call's rows
    Harness h(d);
    std::vector<int> ids;
    for (int64_t L : kRaggedLengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    check_ragged(h, std::string("gqa ragged ") + gqla::dtype_name(cache), 1, ids, kRaggedQLens, GQLA_PATH_GQA, false);
}

// Prefill chunks: 4 heads per group x 32-300 queries (128-1200 rows a
// group: the sm_90a prefill kernel on Hopper, partial last row blocks), a
// ragged call mixing chunks of 40 and 64 queries, a whole 300-token prompt
// in one chunk (n = L) and a decode token; then one long sequence whose one
// row block per group is split many ways (merged by the combine pass).
const std::vector<int> kPrefillQLens = {40, 40, 64, 300, 1};
const std::vector<int64_t> kPrefillLengths = {100, 333, 64, 300, 3000};

void test_prefill_gqa(gqla_dtype cache, int page_size) {
    gqla_backend_desc d = gqa_8_2_d128(cache, 0);
    d.page_size = page_size;
    for (int64_t L : kPrefillLengths) d.num_pages += (L + page_size - 1) / page_size + 1;
    d.max_q_len = 300;
    d.max_q_tokens = sum_of(kPrefillQLens);
    Harness h(d);
    std::vector<int> ids;
    for (int64_t L : kPrefillLengths) {
        ids.push_back(h.add());
        for (int layer = 0; layer < d.num_layers; ++layer) fill_sequence(h, layer, ids.back(), L, false);
    }
    const std::string name = "gqa prefill P=" + std::to_string(page_size) + " " + gqla::dtype_name(cache);
    check_ragged(h, name, 1, ids, kPrefillQLens, GQLA_PATH_GQA, false);
    check_ragged(h, name + " split", 1, {ids[4]}, {32}, GQLA_PATH_GQA, false);
}

// GQLA: ragged calls on the absorb path, the transient GQA form (no kept
// expanded cache) and the kept GQA path; the three forms agree.
void test_ragged_gqla(gqla_dtype cache, int H, int G, int r, int dc, int dr, int dv, int page_size,
                      const std::vector<int>& q_lens = kRaggedQLens,
                      const std::vector<int64_t>& lengths = kRaggedLengths) {
    gqla_backend_desc d = gqla_desc(cache, H, G, r, dc, dr, dv, page_size, lengths);
    d.max_q_len = *std::max_element(q_lens.begin(), q_lens.end());
    d.max_q_tokens = sum_of(q_lens);
    Harness h(d);
    const std::vector<int> ids = add_gqla_sequences(h, lengths);
    char shape[96];
    std::snprintf(shape, sizeof shape, "H=%d G=%d r=%d dc=%d dr=%d dv=%d P=%d %s", H, G, r, dc, dr, dv, page_size,
                  gqla::dtype_name(cache));
    const std::string sh = shape;
    check_ragged(h, "gqla ragged absorb " + sh, 1, ids, q_lens, GQLA_PATH_ABSORB, false);
    check_ragged(h, "gqla ragged transient " + sh, 1, ids, q_lens, GQLA_PATH_GQA, true);
    expect_ok(h.vt, h.ctx, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    std::vector<gqla_append_item> items;
    for (int id : ids) items.push_back({h.seqs[id].pages.data(), h.seqs[id].slot, 0, h.seqs[id].len[1], 0});
    gqla_expand_args e{1, static_cast<int32_t>(items.size()), items.data()};
    expect_ok(h.vt, h.ctx, h.vt->expand(h.ctx, &e), "expand");
    check_ragged(h, "gqla ragged kept gqa " + sh, 1, ids, q_lens, GQLA_PATH_GQA, false);
    // The transient rows are expanded and rounded like the kept ones, in the
    // same chunks (the sequences in the same order): the two GQA forms agree
    // to f32 rounding, and both agree with absorb within the cache's tolerance.
    const std::vector<float> q = randn(size_t(sum_of(q_lens)) * H * (dc + dr));
    const CallOutput transient = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, true, true, true);
    const CallOutput kept = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, false, true, true);
    const CallOutput absorb = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_ABSORB, false, true, true);
    check_agree("gqla transient = kept gqa " + sh, transient, kept);
    check_agree("gqla transient ~ absorb " + sh, transient, absorb, tolerance(cache));
}

// The GQA_TRANSIENT form: its pool is allocated by the first call and
// reported as workspace; shared pages of a fork in the same call; uniform
// calls; the kept expanded cache switched on and off around it; a CUDA graph
// of a transient ragged call (after the uncaptured one) replays to the same
// result.
void test_transient(gqla_dtype cache) {
    const std::vector<int64_t> lengths = {70, 200, 129};
    const int H = 8, G = 2, r = 256, dc = 64, dr = 32, dv = 64, P = 32;
    gqla_backend_desc d = gqla_desc(cache, H, G, r, dc, dr, dv, P, lengths);
    d.num_pages += 8;  // the fork's copy-on-write page
    d.max_q_tokens = 16;
    Harness h(d);
    std::vector<int> ids = add_gqla_sequences(h, lengths);
    const int child = h.fork(ids[1]);  // shares ids[1]'s pages, then its own last page
    fill_sequence(h, 1, child, 5, false);
    ids.push_back(child);
    const std::string dt = gqla::dtype_name(cache);

    int64_t before[4] = {0, 0, 0, 0}, after[4] = {0, 0, 0, 0};
    h.vt->memory_usage(h.ctx, before);
    const std::vector<int> q_lens = {2, 1, 5, 4};
    const std::vector<float> q = randn(size_t(sum_of(q_lens)) * H * (dc + dr));
    const CallOutput first = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, true, true, false);
    check_reference(h, "gqla transient first call (fork in the call) " + dt, 1, ids, q_lens, q, first);
    h.vt->memory_usage(h.ctx, after);
    const int64_t es = int64_t(gqla::dtype_size(cache));
    // The expansion chunk as the session sizes it (backends/cuda/session.cpp):
    // 64 MiB of products in the cache dtype, at most the session's capacity.
    const int64_t chunk =
        std::clamp<int64_t>(std::min<int64_t>((int64_t(64) << 20) / (G * (dc + dv) * es), d.num_pages * P), 64, 8192);
    const int64_t pool = d.num_pages * P * G * (dc + dv) * es + chunk * 8;
    report("gqla transient pool in workspace bytes " + dt, std::fabs(double(after[3] - before[3] - pool)), 0.0);
    report("gqla transient no kept expanded cache " + dt, double(after[1]), 0.0);

    const std::vector<int> ones(ids.size(), 1);
    const std::vector<float> q1 = randn(ids.size() * size_t(H) * (dc + dr));
    const CallOutput uniform = attention_call(h, 0, ids, ones, q1, GQLA_PATH_GQA, true, false, true);
    check_reference(h, "gqla transient uniform layer 0 " + dt, 0, ids, ones, q1, uniform);

    // Kept expanded cache on, then off: transient calls neither read nor need it.
    expect_ok(h.vt, h.ctx, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    const CallOutput with_kept = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, true, true, false);
    check_agree("gqla transient beside an empty kept cache " + dt, with_kept, first, 1e-6);
    expect_ok(h.vt, h.ctx, h.vt->set_expanded(h.ctx, 0), "set_expanded(0)");

    // Graph capture of a transient ragged call on device tensors.
    const int64_t N = sum_of(q_lens);
    float *dq = nullptr, *dout = nullptr, *dlse = nullptr;
    if (cudaMalloc(&dq, q.size() * 4) != cudaSuccess || cudaMalloc(&dout, size_t(N) * H * dv * 4) != cudaSuccess ||
        cudaMalloc(&dlse, size_t(N) * H * 4) != cudaSuccess)
        throw std::runtime_error("cudaMalloc");
    cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice);
    const auto seqs = h.ragged_seqs(ids, 1, q_lens);
    gqla_decode_args a{};
    a.layer = 1;
    a.path = GQLA_PATH_GQA;
    a.batch = static_cast<int32_t>(ids.size());
    a.q_len = 5;
    a.seqs = seqs.data();
    a.ragged = 1;
    a.transient = 1;
    a.total_q = N;
    a.q = host_view(dq, GQLA_DTYPE_F32, {N, H, dc + dr});
    a.q.on_device = 1;
    a.o = host_view(dout, GQLA_DTYPE_F32, {N, H, dv});
    a.o.on_device = 1;
    a.lse = host_view(dlse, GQLA_DTYPE_F32, {N, H});
    a.lse.on_device = 1;
    {
        CapturedDecode captured(h, a);
        cudaMemsetAsync(dout, 0xff, size_t(N) * H * dv * 4, captured.stream);  // NaN poison
        cudaGraphLaunch(captured.exec, captured.stream);
        CallOutput replay;
        replay.o.resize(size_t(N) * H * dv);
        replay.lse.resize(size_t(N) * H);
        cudaMemcpyAsync(replay.o.data(), dout, replay.o.size() * 4, cudaMemcpyDeviceToHost, captured.stream);
        cudaMemcpyAsync(replay.lse.data(), dlse, replay.lse.size() * 4, cudaMemcpyDeviceToHost, captured.stream);
        if (cudaStreamSynchronize(captured.stream) != cudaSuccess) throw std::runtime_error("graph replay failed");
        check_agree("gqla transient graph replay " + dt, replay, first, 1e-6);
    }
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dlse);
}

// What the backend refuses: a transient call on a GQA-kind session, a call
// with more query tokens than max_q_tokens; and a session whose workspace
// for max_q_tokens cannot be allocated names that setting.
void test_call_limits(gqla_dtype cache) {
    const std::string dt = gqla::dtype_name(cache);
    gqla_backend_desc d = gqa_8_2_d128(cache, 16);
    d.max_q_tokens = 4;
    Harness h(d);
    const int id = h.add();
    fill_sequence(h, 1, id, 40, false);
    const std::vector<float> q = randn(size_t(5) * 8 * 128);
    std::vector<float> o(q.size());
    const auto seqs = h.ragged_seqs({id}, 1, {5});
    gqla_decode_args a{};
    a.layer = 1;
    a.path = GQLA_PATH_GQA;
    a.batch = 1;
    a.q_len = 5;
    a.seqs = seqs.data();
    a.ragged = 1;
    a.total_q = 5;
    a.q = host_view(q.data(), GQLA_DTYPE_F32, {5, 8, 128});
    a.o = host_view(o.data(), GQLA_DTYPE_F32, {5, 8, 128});
    report("refuses more query tokens than max_q_tokens " + dt,
           h.vt->decode(h.ctx, &a) == GQLA_ERR_INVALID_ARGUMENT ? 0.0 : 1.0, 0.0);
    const auto seqs1 = h.ragged_seqs({id}, 1, {1});
    a.seqs = seqs1.data();
    a.q_len = 1;
    a.total_q = 1;
    a.transient = 1;
    a.q.shape[0] = a.o.shape[0] = 1;
    report("refuses GQA_TRANSIENT on a GQA-kind session " + dt,
           h.vt->decode(h.ctx, &a) == GQLA_ERR_INVALID_ARGUMENT ? 0.0 : 1.0, 0.0);

    // 2^22 query tokens x 128 heads: terabytes of workspace.
    gqla_backend_desc big = gqla_desc(cache, 128, 128, 512, 128, 64, 128, 64, {64});
    big.max_q_tokens = int64_t(1) << 22;
    void* ctx = nullptr;
    char err[1024] = {0};
    const gqla_status st = h.vt->create(&big, &ctx, err, sizeof err);
    if (ctx) h.vt->destroy(ctx);
    const bool named = st == GQLA_ERR_OUT_OF_MEMORY && std::strstr(err, "config.max_q_tokens = 4194304");
    if (!named) std::printf("     create said (status %d): %s\n", int(st), err);
    report("workspace failure names config.max_q_tokens " + dt, named ? 0.0 : 1.0, 0.0);
}

// argv[1]: run only the cases whose name contains one of its comma-separated
// parts (each case's name ends in " bf16", " f16" or " f32" but "causal rule").
std::vector<std::string> only;
int cases_run = 0;

bool selected(const char* name) {
    if (only.empty()) return true;
    for (const std::string& part : only)
        if (std::strstr(name, part.c_str())) return true;
    return false;
}

void run(const char* name, const std::function<void()>& f) {
    if (!selected(name)) return;
    ++cases_run;
    try {
        f();
    } catch (const std::exception& e) {
        ++failures;
        std::printf("FAIL %s: %s\n", name, e.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1) {
        std::string parts = argv[1];
        for (size_t at = 0; at <= parts.size();) {
            const size_t end = std::min(parts.find(',', at), parts.size());
            if (end > at) only.push_back(parts.substr(at, end - at));
            at = end + 1;
        }
    }
    const gqla_backend_vtable* vt = gqla_cuda_backend_get(GQLA_BACKEND_ABI_VERSION);
    int32_t n = 0;
    if (!vt || vt->device_count(&n) != GQLA_OK || n == 0) {
        std::printf("no CUDA device visible: skipping\n");
        return 77;
    }
    gqla_probe_info info{};
    info.struct_size = sizeof info;
    if (vt->probe(0, GQLA_PROBE_CALIBRATE, &info) == GQLA_OK)
        std::printf("probe: %s cc %d.%d, %d SMs, %.0f GB/s read, %.0f TFLOP/s bf16 (calibrated %d)\n", info.name,
                    info.cc_major, info.cc_minor, info.sm_count, info.read_gbps, info.peak_gflops_bf16 / 1e3,
                    info.calibrated);

    run("causal rule", test_causal_rule);
    const std::vector<int64_t> ragged = {1, 63, 64, 65, 1000, 3001};
    const std::vector<int64_t> long_ragged = {8, 130, 2000, 4097};
    for (gqla_dtype t : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16, GQLA_DTYPE_F32}) {
        const std::string dt = std::string(" ") + gqla::dtype_name(t);
        auto run_t = [&](const char* name, const std::function<void()>& f) { run((name + dt).c_str(), f); };
        run_t("gqa 32/8", [&] { test_gqa(t, 32, 8, 128, 128, 64, long_ragged); });
        // One sequence: 2-16 splits per row block (by s_q), merged inside a
        // thread-block cluster on Hopper; then more splits than a cluster
        // holds, merged by the combine pass.
        run_t("gqa single", [&] {
            test_gqa(t, 32, 8, 128, 128, 64, {1100});
            test_gqa(t, 32, 8, 128, 128, 64, {5000});
        });
        run_t("gqa odd", [&] { test_gqa(t, 6, 2, 40, 80, 63, ragged); });
        // Pages that hold whole 16-token TMA boxes but are not a power of two
        // (48) or one box (16), and 256-wide keys (four boxes per key half);
        // lengths end mid-box so the last box of a sequence is copied instead.
        run_t("gqa tma pages 48", [&] { test_gqa(t, 16, 4, 128, 128, 48, {1, 17, 100, 1000}); });
        run_t("gqa tma pages 16", [&] { test_gqa(t, 8, 8, 64, 64, 16, {15, 16, 33, 700}); });
        run_t("gqa tma keys 256", [&] { test_gqa(t, 16, 2, 256, 128, 32, {31, 64, 500}); });
        run_t("gqa odd simt dims", [&] { test_gqa(t, 6, 3, 36, 20, 65, {1, 70, 300}); });
        run_t("gqla odd", [&] { test_gqla(t, 6, 2, 384, 96, 32, 80, 63, {1, 64, 65, 900}); });
        run_t("gqla mla", [&] { test_gqla(t, 16, 16, 512, 128, 64, 128, 64, {5, 700, 2000}); });
        run_t("gqla 32/8", [&] { test_gqla(t, 32, 8, 512, 64, 64, 128, 64, {3, 1500}); });
        // 15 sequences: the latent kernel's 2-8 splits of a row block merge
        // inside a thread-block cluster (Hopper), as at H=32, B=64.
        run_t("gqla batch", [&] {
            std::vector<int64_t> lengths;
            for (int i = 0; i < 15; ++i) lengths.push_back(150 + 37 * i);
            test_gqla(t, 32, 8, 512, 64, 64, 128, 64, lengths);
            // With max_q_len 1 the partials hold 4 splits of these 15
            // sequences: the 8 that merge in a cluster do not need them.
            lengths.clear();
            for (int i = 0; i < 15; ++i) lengths.push_back(600 + 23 * i);
            test_gqla(t, 32, 8, 512, 64, 64, 128, 64, lengths, 1);
        });
        // Latent kernel shapes with pages that cut its 64-token tiles (37: no
        // TMA box fits, copies; 16: one TMA box per page; 128: two tiles per
        // page), a partial second row block (72 heads) and the DeepSeek-V3
        // head count.
        run_t("gqla mla odd pages", [&] { test_gqla(t, 72, 8, 512, 64, 64, 64, 37, {2, 500, 1300}); });
        run_t("gqla mla page 16", [&] { test_gqla(t, 16, 4, 512, 64, 64, 64, 16, {40, 777}); });
        run_t("gqla mla page 128", [&] { test_gqla(t, 32, 8, 512, 64, 64, 64, 128, {200, 1100}); });
        run_t("gqla mla 128", [&] { test_gqla(t, 128, 128, 512, 32, 64, 32, 64, {70, 900}); });
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
        run_t("gqla absorb device io", [&] {
            test_absorb_device_io(t, 32, 8, 512, 64, 64, 128, {3, 700, 1500}, 1);
            test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 1);
            test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 3);
            test_absorb_device_io(t, 16, 16, 512, 128, 64, 128, {90, 650}, 3, true);
            test_absorb_device_io(t, 8, 8, 512, 40, 64, 40, {70, 300}, 1);
            test_absorb_device_io(t, 8, 8, 512, 36, 64, 40, {70, 300}, 2, true);
            test_absorb_device_io(t, 6, 2, 384, 36, 20, 44, {2, 64, 300}, 2);
        });
        run_t("gqla absorb many shapes", [&] { test_absorb_many_shapes(t); });
        run_t("graph", [&] {
            test_graph_replay(t, {100, 1000, 3000});
            test_graph_replay(t, {100, 700, 900});
        });
        run_t("absorb graph", [&] { test_absorb_graph_replay(t); });
        run_t("stream switch", [&] { test_stream_switch(t); });
        // Ragged calls (runs of equal query counts) and the transient GQA form.
        run_t("gqa ragged", [&] { test_ragged_gqa(t); });
        run_t("gqla ragged", [&] {
            test_ragged_gqla(t, 16, 4, 512, 64, 64, 128, 64);  // narrow kernel / latent kernel
            test_ragged_gqla(t, 6, 2, 384, 96, 32, 80, 63);    // generic kernels, odd pages
        });
        run_t("gqla transient", [&] { test_transient(t); });
        run_t("prefill", [&] {
            test_prefill_gqa(t, 48);
            test_prefill_gqa(t, 64);
            // The GQLA GQA path (kept and transient) with keys 128 + 64 and
            // 64 + 64 wide, against absorb.
            test_ragged_gqla(t, 8, 2, 256, 128, 64, 128, 64, kPrefillQLens, kPrefillLengths);
            test_ragged_gqla(t, 8, 2, 256, 64, 64, 128, 48, kPrefillQLens, kPrefillLengths);
        });
        run_t("call limits", [&] { test_call_limits(t); });
    }
    if (cases_run == 0) {  // a filter that selects nothing must not pass as a test
        std::printf("FAIL: no case matches \"%s\"\n", argc > 1 ? argv[1] : "");
        return 1;
    }
    std::printf("%s: %d failure(s) in %d case(s)\n", failures ? "FAILED" : "PASSED", failures, cases_run);
    return failures ? 1 : 0;
}

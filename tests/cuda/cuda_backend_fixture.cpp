// SPDX-License-Identifier: Apache-2.0
// What every case of gqla_cuda_backend_test shares (cuda_backend_fixture.hpp).
#include "cuda_backend_fixture.hpp"
#include "run_seed.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

namespace gqla::test {

std::mt19937 rng;
void reseed_rng() { rng.seed(run_seed()); }

std::vector<float> randn(size_t n, float scale) { return randn(rng, n, scale); }

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

gqla_backend_desc gqa_8_2_d128(gqla_dtype cache, int64_t num_pages) {
    gqla_backend_desc d = base_desc(GQLA_KIND_GQA, cache, 8, 2, 64);
    d.head_dim = 128;
    d.value_dim = 128;
    d.softmax_scale = 1.f / std::sqrt(128.f);
    d.num_pages = num_pages;
    return d;
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
    require_ok(h, h.vt->decode(h.ctx, &a), "decode");

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
    check_error(name + " o", gqla::ref::rel_l2(o.data(), ref_o.data(), o.size()), tol);
    check_error(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()), tol);
}

CapturedDecode::CapturedDecode(Harness& harness, const gqla_decode_args& a) : h(harness) {
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    require_ok(h, h.vt->set_stream(h.ctx, stream), "set_stream");
    REQUIRE_MESSAGE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
    require_ok(h, h.vt->decode(h.ctx, &a), "decode (captured)");
    REQUIRE_MESSAGE(cudaStreamEndCapture(stream, &graph) == cudaSuccess, "end capture");
    REQUIRE_MESSAGE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, "instantiate");
}

CapturedDecode::~CapturedDecode() {
    CHECK_MESSAGE(h.vt->set_stream(h.ctx, nullptr) == GQLA_OK, "set_stream(NULL) after a captured decode");
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
}

DeviceDecodeTensors::DeviceDecodeTensors(int64_t B_, int64_t s_q_, int64_t H_, int64_t dq_, int64_t dv_, gqla_dtype io_)
    : B(B_), s_q(s_q_), H(H_), dq(dq_), dv(dv_), io(io_) {
    REQUIRE_MESSAGE((cudaMalloc(&q, q_bytes()) == cudaSuccess && cudaMalloc(&o, o_bytes()) == cudaSuccess &&
                     cudaMalloc(&lse, lse_count() * sizeof(float)) == cudaSuccess),
                    "cudaMalloc of the decode tensors");
}

DeviceDecodeTensors::~DeviceDecodeTensors() {
    cudaFree(q);
    cudaFree(o);
    cudaFree(lse);
}

gqla_decode_args DeviceDecodeTensors::args(const std::vector<gqla_decode_seq>& seqs, gqla_path path) const {
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

}  // namespace gqla::test

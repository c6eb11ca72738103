// SPDX-License-Identifier: Apache-2.0
// gqla_cuda_backend_test, decodes on streams and in CUDA graphs, per cache
// dtype: a GQA decode on device tensors captured in a graph and replayed
// after more appends (split KV merged by the combine pass or in a cluster);
// the same for the absorb path with device q and o in the io dtype; and a
// stream switch while an append is still copying on the old stream.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "cuda_backend_fixture.hpp"

using namespace gqla::test;

namespace {

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
    check_error(name + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(h.desc.cache_dtype));
    check_error(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()),
                tolerance(h.desc.cache_dtype));
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
        REQUIRE_MESSAGE(cudaStreamSynchronize(stream) == cudaSuccess, "graph replay failed");
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
            REQUIRE_MESSAGE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
            require_ok(h, h.vt->set_stream(h.ctx, stream), "set_stream (capturing)");
            require_ok(h, h.vt->decode(h.ctx, &args), "decode (captured) after the switch");
            REQUIRE_MESSAGE((cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
                             cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess),
                            "end capture / instantiate");
            cudaGraphLaunch(exec, stream);
        } else {
            require_ok(h, h.vt->set_stream(h.ctx, stream), "set_stream");
            require_ok(h, h.vt->decode(h.ctx, &args), "decode after the switch");
        }
        std::vector<float> o(size_t(H) * D), lse(H);
        cudaMemcpyAsync(o.data(), t.o, o.size() * 4, cudaMemcpyDeviceToHost, stream);
        cudaMemcpyAsync(lse.data(), t.lse, lse.size() * 4, cudaMemcpyDeviceToHost, stream);
        REQUIRE_MESSAGE(cudaStreamSynchronize(stream) == cudaSuccess, "decode after a stream switch failed");
        require_ok(h, h.vt->set_stream(h.ctx, nullptr), "set_stream(NULL)");
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
        REQUIRE_MESSAGE(cudaStreamSynchronize(stream) == cudaSuccess, "graph replay failed");
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
        check_error(name + " o", gqla::ref::rel_l2(o.data(), ref.data(), o.size()), tolerance(io));
        check_error(name + " lse", gqla::ref::rel_l2(lse.data(), ref_lse.data(), lse.size()), tolerance(io));
    }
}

void graph(gqla_dtype t) {
    test_graph_replay(t, {100, 1000, 3000});
    test_graph_replay(t, {100, 700, 900});
}

}  // namespace

GQLA_CASES_PER_CACHE_DTYPE("graph", graph)
GQLA_CASES_PER_CACHE_DTYPE("absorb graph", test_absorb_graph_replay)
GQLA_CASES_PER_CACHE_DTYPE("stream switch", test_stream_switch)

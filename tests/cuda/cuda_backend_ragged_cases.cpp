// SPDX-License-Identifier: Apache-2.0
// gqla_cuda_backend_test, ragged calls (per-sequence query counts) per cache
// dtype: the GQA kind; GQLA through absorb, the transient GQA form and the
// kept GQA path; the transient form's pool, forks inside a call, uniform
// calls and graph replay; and what the backend refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_backend_ragged.hpp"

using namespace gqla::test;

namespace {

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
    CHECK_MESSAGE(after[3] - before[3] == pool, "gqla transient pool in workspace bytes " << dt);
    CHECK_MESSAGE(after[1] == 0, "gqla transient no kept expanded cache " << dt);

    const std::vector<int> ones(ids.size(), 1);
    const std::vector<float> q1 = randn(ids.size() * size_t(H) * (dc + dr));
    const CallOutput uniform = attention_call(h, 0, ids, ones, q1, GQLA_PATH_GQA, true, false, true);
    check_reference(h, "gqla transient uniform layer 0 " + dt, 0, ids, ones, q1, uniform);

    // Kept expanded cache on, then off: transient calls neither read nor need it.
    require_ok(h, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    const CallOutput with_kept = attention_call(h, 1, ids, q_lens, q, GQLA_PATH_GQA, true, true, false);
    check_agree("gqla transient beside an empty kept cache " + dt, with_kept, first, 1e-6);
    require_ok(h, h.vt->set_expanded(h.ctx, 0), "set_expanded(0)");

    // Graph capture of a transient ragged call on device tensors.
    const int64_t N = sum_of(q_lens);
    float *dq = nullptr, *dout = nullptr, *dlse = nullptr;
    REQUIRE_MESSAGE(
        (cudaMalloc(&dq, q.size() * 4) == cudaSuccess && cudaMalloc(&dout, size_t(N) * H * dv * 4) == cudaSuccess &&
         cudaMalloc(&dlse, size_t(N) * H * 4) == cudaSuccess),
        "cudaMalloc");
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
        REQUIRE_MESSAGE(cudaStreamSynchronize(captured.stream) == cudaSuccess, "graph replay failed");
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
    CHECK_MESSAGE(h.vt->decode(h.ctx, &a) == GQLA_ERR_INVALID_ARGUMENT,
                  "refuses more query tokens than max_q_tokens " << dt);
    const auto seqs1 = h.ragged_seqs({id}, 1, {1});
    a.seqs = seqs1.data();
    a.q_len = 1;
    a.total_q = 1;
    a.transient = 1;
    a.q.shape[0] = a.o.shape[0] = 1;
    CHECK_MESSAGE(h.vt->decode(h.ctx, &a) == GQLA_ERR_INVALID_ARGUMENT,
                  "refuses GQA_TRANSIENT on a GQA-kind session " << dt);

    // 2^22 query tokens x 128 heads: terabytes of workspace.
    gqla_backend_desc big = gqla_desc(cache, 128, 128, 512, 128, 64, 128, 64, {64});
    big.max_q_tokens = int64_t(1) << 22;
    void* ctx = nullptr;
    char err[1024] = {0};
    const gqla_status st = h.vt->create(&big, &ctx, err, sizeof err);
    if (ctx) h.vt->destroy(ctx);
    const bool named = st == GQLA_ERR_OUT_OF_MEMORY && std::strstr(err, "config.max_q_tokens = 4194304");
    INFO("create said (status " << int(st) << "): " << std::string(err));
    CHECK_MESSAGE(named, "workspace failure names config.max_q_tokens " << dt);
}

void gqla_ragged(gqla_dtype t) {
    test_ragged_gqla(t, 16, 4, 512, 64, 64, 128, 64);  // narrow kernel / latent kernel
    test_ragged_gqla(t, 6, 2, 384, 96, 32, 80, 63);    // generic kernels, odd pages
}

}  // namespace

GQLA_CASES_PER_CACHE_DTYPE("gqa ragged", test_ragged_gqa)
GQLA_CASES_PER_CACHE_DTYPE("gqla ragged", gqla_ragged)
GQLA_CASES_PER_CACHE_DTYPE("gqla transient", test_transient)
GQLA_CASES_PER_CACHE_DTYPE("call limits", test_call_limits)

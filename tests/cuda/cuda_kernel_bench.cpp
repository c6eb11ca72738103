// SPDX-License-Identifier: Apache-2.0
// Times the CUDA backend's decode through its vtable on the target shapes
// (bf16 cache, page 64, device tensors): median of per-call CUDA-event times
// (host launch latency included), and the mean device time per decode step
// of one CUDA graph holding many steps; both rotate over layers so small
// caches do not live in L2; and the host time one decode call costs (calls
// queued back to back without synchronizing, so the GPU never holds the host
// up): what an engine that does not capture graphs pays per layer on the CPU.
// Prints a table and one JSON line per shape.
// Usage: gqla_cuda_kernel_bench [reps] [filter on "<shape name> B=<b> T=<t>"]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/dtype.hpp"
#include "vtable_harness.hpp"

using namespace gqla::test;

namespace {

struct Shape {
    const char* name;
    gqla_kind kind;
    gqla_path path;
    int H, G, D;        // GQA kind
    int r, dc, dr, dv;  // GQLA kind
    int B;
    int64_t T;
};

uint16_t* random_bf16_device(size_t n) {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<uint16_t> h(n);
    for (auto& x : h) x = gqla::f32_to_bf16(d(rng));
    uint16_t* p = nullptr;
    cudaMalloc(&p, n * 2);
    cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice);
    return p;
}

// Bytes one layer's cache of shape s holds, the one quantity the GB/s
// figures divide.
double layer_bytes_of(const Shape& s) {
    const bool gqla = s.kind == GQLA_KIND_GQLA;
    const int64_t per_token =
        gqla ? (s.path == GQLA_PATH_ABSORB ? s.r + s.dr : int64_t(s.G) * (s.dc + s.dv) + s.dr) : int64_t(s.G) * 2 * s.D;
    return double(per_token) * 2 * s.B * s.T;
}

// The session of shape s: bf16 cache and io, pages of 64, `layers` layers.
gqla_backend_desc bench_desc(const Shape& s, int layers) {
    const bool gqla = s.kind == GQLA_KIND_GQLA;
    gqla_backend_desc d{};
    d.kind = s.kind;
    d.num_heads = s.H;
    d.num_kv_heads = s.G;
    d.head_dim = s.D;
    d.value_dim = gqla ? s.dv : s.D;
    d.latent_dim = s.r;
    d.nope_dim = s.dc;
    d.rope_dim = s.dr;
    d.num_layers = layers;
    d.keep_latent = 1;  // GQLA: the latent pool exists (backend_api.h)
    d.cache_dtype = GQLA_DTYPE_BF16;
    d.io_dtype = GQLA_DTYPE_BF16;
    d.softmax_scale = 1.f / std::sqrt(float(gqla ? s.dc + s.dr : s.D));
    d.page_size = 64;
    d.num_pages = int64_t(s.B) * ((s.T + 63) / 64) + 8;
    d.max_sequences = s.B;
    d.max_batch = s.B;
    d.max_q_len = 1;
    return d;
}

// Weights (GQLA) and B sequences of T tokens on every layer, appended in
// chunks of rows_a / rows_b; returns the sequence ids.
std::vector<int> fill_cache(Harness& h, const Shape& s, int layers, int64_t chunk, const uint16_t* rows_a,
                            const uint16_t* rows_b) {
    const bool gqla = s.kind == GQLA_KIND_GQLA;
    if (gqla) {
        std::mt19937 rng(3);
        std::normal_distribution<float> nd(0.f, 1.f / std::sqrt(float(s.r)));
        std::vector<float> w(size_t(s.G) * (s.dc + s.dv) * s.r);
        for (auto& x : w) x = nd(rng);
        for (int l = 0; l < layers; ++l) h.set_weights(l, w);
        if (s.path == GQLA_PATH_GQA) expect_ok(h.vt, h.ctx, h.vt->set_expanded(h.ctx, 1), "set_expanded");
    }
    std::vector<int> ids;
    for (int b = 0; b < s.B; ++b) ids.push_back(h.add());
    for (int l = 0; l < layers; ++l)
        for (int id : ids)
            for (int64_t t = 0; t < s.T; t += chunk)
                h.append(l, id, std::min(chunk, s.T - t), nullptr, nullptr, s.path == GQLA_PATH_GQA && gqla, rows_a,
                         rows_b);
    return ids;
}

// One decode call per step on device q/o, rotating over the layers.
struct DecodeSteps {
    Harness& h;
    int layers;
    std::vector<std::vector<gqla_decode_seq>> seqs;  // per layer
    gqla_decode_args a{};
    // Decode step i: layer i % layers, so consecutive steps read different caches.
    gqla_status step(int i) {
        a.layer = i % layers;
        a.seqs = seqs[size_t(a.layer)].data();
        return h.vt->decode(h.ctx, &a);
    }
};

// Per-call CUDA-event times in us (after 5 warm-up calls), sorted.
std::vector<float> time_calls(DecodeSteps& steps, int reps, cudaEvent_t e0, cudaEvent_t e1) {
    std::vector<float> times;
    for (int i = 0; i < reps + 5; ++i) {
        cudaEventRecord(e0, nullptr);
        expect_ok(steps.h.vt, steps.h.ctx, steps.step(i), "decode");
        cudaEventRecord(e1, nullptr);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 5) times.push_back(ms * 1e3f);
    }
    std::sort(times.begin(), times.end());
    return times;
}

// Host cost per call: median over rounds of a few calls queued without
// synchronizing (few enough that the launch queue never fills).
double host_us_per_call(DecodeSteps& steps) {
    std::vector<double> host;
    for (int round = 0; round < 7; ++round) {
        cudaDeviceSynchronize();
        constexpr int kCalls = 8;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) expect_ok(steps.h.vt, steps.h.ctx, steps.step(i), "decode");
        host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                       kCalls);
    }
    cudaDeviceSynchronize();
    std::sort(host.begin(), host.end());
    return host[host.size() / 2];
}

// Device time without the host: the decode steps of every layer, several
// rounds, captured back to back in one CUDA graph (as an engine replays a
// whole forward pass), so host launch cost is paid once per graph and the
// mean over the graph's steps is what the GPU spends per decode step,
// gaps between kernels included. -1 where the capture failed.
double graph_us_per_step(DecodeSteps& steps, cudaEvent_t e0, cudaEvent_t e1) {
    Harness& h = steps.h;
    const int layers = steps.layers;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, stream), "set_stream");
    cudaGraphExec_t exec = nullptr;
    const int n_steps = std::max(layers, 32 / layers * layers);
    {
        cudaGraph_t graph;
        bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
        int rc = GQLA_OK;
        for (int i = 0; ok && i < n_steps && rc == GQLA_OK; ++i) rc = steps.step(i);
        if (ok && cudaStreamEndCapture(stream, &graph) == cudaSuccess && rc == GQLA_OK) {
            if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
            cudaGraphDestroy(graph);
        }
    }
    double graph_us = -1;
    if (exec) {
        const int launches = std::max(3, 200 / n_steps);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(e0, stream);
        for (int i = 0; i < launches; ++i) cudaGraphLaunch(exec, stream);
        cudaEventRecord(e1, stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        graph_us = ms * 1e3 / (double(launches) * n_steps);
    }
    if (exec) cudaGraphExecDestroy(exec);
    expect_ok(h.vt, h.ctx, h.vt->set_stream(h.ctx, nullptr), "set_stream(NULL)");
    cudaStreamDestroy(stream);
    return graph_us;
}

// Times shape s: prints its table row and JSON line; returns the median us.
double run_shape(const Shape& s, int reps, double read_gbps) {
    const bool gqla = s.kind == GQLA_KIND_GQLA;
    const double layer_bytes = layer_bytes_of(s);
    const int layers = static_cast<int>(std::clamp(std::ceil(256e6 / layer_bytes), 1.0, 32.0));
    const gqla_backend_desc d = bench_desc(s, layers);
    Harness h(d);

    const int64_t chunk = std::min<int64_t>(s.T, 2048);
    const int aw = h.a_width(), bw = h.b_width();
    uint16_t* rows_a = random_bf16_device(size_t(chunk) * aw);
    uint16_t* rows_b = random_bf16_device(size_t(chunk) * bw);
    const std::vector<int> ids = fill_cache(h, s, layers, chunk, rows_a, rows_b);

    const int dq = gqla ? s.dc + s.dr : s.D, dv = d.value_dim;
    uint16_t* q = random_bf16_device(size_t(s.B) * s.H * dq);
    uint16_t* o = nullptr;
    cudaMalloc(&o, size_t(s.B) * s.H * dv * 2);
    DecodeSteps steps{h, layers, {}, {}};
    for (int l = 0; l < layers; ++l) steps.seqs.push_back(h.decode_seqs(ids, l));
    gqla_decode_args& a = steps.a;
    a.path = s.path;
    a.batch = s.B;
    a.q_len = 1;
    a.q = host_view(q, GQLA_DTYPE_BF16, {s.B, 1, s.H, dq});
    a.q.on_device = 1;
    a.o = host_view(o, GQLA_DTYPE_BF16, {s.B, 1, s.H, dv});
    a.o.on_device = 1;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const std::vector<float> times = time_calls(steps, reps, e0, e1);
    const double us = times[times.size() / 2];
    const double gbps = layer_bytes / (us * 1e-6) / 1e9;
    const double host_us = host_us_per_call(steps);
    const double graph_us = graph_us_per_step(steps, e0, e1);

    std::printf(
        "%-40s B=%-4d T=%-6lld %9.1f us %8.0f GB/s %5.1f%% of read BW  (min %.1f, p90 %.1f) graph %.1f us (%.0f GB/s) "
        "host %.1f us/call\n",
        s.name, s.B, (long long)s.T, us, gbps, 100.0 * gbps / read_gbps, times.front(), times[times.size() * 9 / 10],
        graph_us, graph_us > 0 ? layer_bytes / (graph_us * 1e-6) / 1e9 : 0.0, host_us);
    std::printf(
        "JSON {\"name\":\"%s\",\"B\":%d,\"T\":%lld,\"median_us\":%.2f,\"gbps\":%.1f,\"graph_us\":%.2f,"
        "\"host_us_per_call\":%.2f}\n",
        s.name, s.B, (long long)s.T, us, gbps, graph_us, host_us);
    cudaFree(rows_a);
    cudaFree(rows_b);
    cudaFree(q);
    cudaFree(o);
    return us;
}

}  // namespace

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
    const gqla_backend_vtable* vt = gqla_cuda_backend_get(GQLA_BACKEND_ABI_VERSION);
    int32_t n = 0;
    if (!vt || vt->device_count(&n) != GQLA_OK || n == 0) {
        std::printf("no CUDA device visible: skipping\n");
        return 77;
    }
    gqla_probe_info info{};
    info.struct_size = sizeof info;
    vt->probe(0, GQLA_PROBE_CALIBRATE, &info);
    std::printf("%s: %d SMs, calibrated read %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", info.name, info.sm_count,
                info.read_gbps, info.peak_gflops_bf16 / 1e3);
    const char* only = argc > 2 ? argv[2] : nullptr;
    const Shape shapes[] = {
        {"gqa 32/8 D128", GQLA_KIND_GQA, GQLA_PATH_GQA, 32, 8, 128, 0, 0, 0, 0, 64, 4096},
        {"gqa 32/8 D128", GQLA_KIND_GQA, GQLA_PATH_GQA, 32, 8, 128, 0, 0, 0, 0, 128, 8192},
        {"gqa 32/8 D128", GQLA_KIND_GQA, GQLA_PATH_GQA, 32, 8, 128, 0, 0, 0, 0, 1, 32768},
        {"gqa 32/8 D128", GQLA_KIND_GQA, GQLA_PATH_GQA, 32, 8, 128, 0, 0, 0, 0, 1, 1024},
        {"gqa 32/8 D128", GQLA_KIND_GQA, GQLA_PATH_GQA, 32, 8, 128, 0, 0, 0, 0, 4, 16384},
        {"absorb H32 G8 r512 dr64 (llama3-8b-gqla)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 32, 8, 0, 512, 64, 64, 128, 64,
         16384},
        {"absorb H128 G128 r512 dr64 (dsv3)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 128, 128, 0, 512, 128, 64, 128, 64,
         16384},
        // DeepSeek-V3's heads on one GPU of 8-way tensor parallelism.
        {"absorb H16 G16 r512 dr64 (dsv3 tp8)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 16, 16, 0, 512, 128, 64, 128, 64,
         16384},
        // Small batches, where the absorb path's fixed costs weigh most.
        {"absorb H32 G8 r512 dr64 (llama3-8b-gqla)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 32, 8, 0, 512, 64, 64, 128, 16,
         4096},
        {"absorb H128 G128 r512 dr64 (dsv3)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 128, 128, 0, 512, 128, 64, 128, 1,
         4096},
        {"absorb H128 G128 r512 dr64 (dsv3)", GQLA_KIND_GQLA, GQLA_PATH_ABSORB, 128, 128, 0, 512, 128, 64, 128, 8,
         4096},
        {"gqa-path llama3-8b-gqla", GQLA_KIND_GQLA, GQLA_PATH_GQA, 32, 8, 0, 512, 64, 64, 128, 16, 4096},
        {"gqa-path llama3-8b-gqla", GQLA_KIND_GQLA, GQLA_PATH_GQA, 32, 8, 0, 512, 64, 64, 128, 64, 4096},
        // MLA's GQA path: 128 groups of one head, 192-wide keys (128 + the shared 64 rope).
        {"gqa-path dsv3", GQLA_KIND_GQLA, GQLA_PATH_GQA, 128, 128, 0, 512, 128, 64, 128, 1, 4096},
        {"gqa-path dsv3", GQLA_KIND_GQLA, GQLA_PATH_GQA, 128, 128, 0, 512, 128, 64, 128, 8, 4096},
    };
    for (const Shape& s : shapes) {
        char label[128];
        std::snprintf(label, sizeof label, "%s B=%d T=%lld", s.name, s.B, (long long)s.T);
        if (only && !std::strstr(label, only)) continue;
        try {
            run_shape(s, reps, info.read_gbps);
        } catch (const std::exception& e) {
            std::printf("%s: FAILED %s\n", s.name, e.what());
        }
    }
    return 0;
}

// SPDX-License-Identifier: Apache-2.0
// Sparse (top-k) attention on CUDA sessions: tests/abi/test_sparse.cpp's
// cases on the GPU (odd shapes: the mma, per-warp, narrow and SIMT kernels;
// ctest passes the case names), plus model shapes that reach the latent
// wgmma kernel (r 512, d_r 64; 32-row transposed and 64-row layouts) and the
// narrow kernel at LLaMA-3-8B's 128-wide heads (16-bit and 8-bit caches),
// with lists long enough to be split across CTAs, rows without a visible
// entry and ragged calls. Every
// call against the float64 sparse reference (docs/sparse-attention.md).
// Calls captured in a CUDA graph replay new lists and queries.
// Exits 77 (skipped) where no GPU is visible.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gqla/gqla.h"
#include "tests/abi/sparse_support.hpp"
#include "tests/cuda/gpu_doctest_main.hpp"

namespace {

using sparse_test::CallCheck;
using sparse_test::Fixture;
using sparse_test::Form;

void check(Fixture& fx, const CallCheck& r, const std::string& what) {
    CAPTURE(what);
    INFO("gqla_attention: " << std::string(gqla_last_error_message()));
    INFO(abi::replay_hint(fx.rng().seed()));
    REQUIRE(r.status == GQLA_OK);
    const double tol = abi::tolerance(fx.config().cache_dtype, GQLA_DTYPE_F32);
    CHECK(r.o_err <= tol);
    CHECK(r.lse_err <= tol);
    CHECK(r.empty_rows_ok);
}

gqla_config latent_config(int32_t heads, int32_t groups, gqla_dtype cache) {
    gqla_config c = abi::deepseek_latent_config(heads, groups);
    c.num_layers = 1;
    c.cache_dtype = cache;
    c.io_dtype = GQLA_DTYPE_F32;
    c.page_size = 64;
    c.max_tokens = 1 << 14;
    c.max_sequences = 16;
    c.max_batch = 16;
    c.max_q_len = 8;
    return c;
}

gqla_config llama_config(gqla_dtype cache, int32_t page_size) {
    gqla_config c;
    REQUIRE(gqla_config_default(&c, GQLA_KIND_GQA) == GQLA_OK);
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.num_layers = 1;
    c.cache_dtype = cache;
    c.io_dtype = GQLA_DTYPE_F32;
    c.page_size = page_size;
    c.max_tokens = 1 << 14;
    c.max_sequences = 16;
    c.max_batch = 16;
    c.max_q_len = 8;
    return c;
}

// Sequences across page edges and one long one; uniform calls at s_q 1, 2
// and 4 with lists longer than most prefixes (split over CTAs on the long
// sequence) and a query of the last sequence without a visible entry; then
// a ragged call of decoding rows beside a chunk.
void run_model_cases(Fixture& fx, int32_t topk) {
    for (int64_t len : {int64_t(1), int64_t(63), int64_t(64), int64_t(65), int64_t(700), int64_t(3000)}) fx.add(len);
    const int last = static_cast<int>(fx.seqs().size()) - 1;
    for (int32_t s_q : {1, 2, 4}) {
        std::vector<int> which;
        std::vector<int32_t> q_lens, idx;
        for (int i = last; i >= 0; --i) {
            const sparse_test::Seq& s = fx.seqs()[static_cast<size_t>(i)];
            if (s.length < s_q) continue;
            which.push_back(i);
            q_lens.push_back(s_q);
            const std::vector<int32_t> l = fx.lists(s, s_q, topk, i == last ? s_q - 1 : -1);
            idx.insert(idx.end(), l.begin(), l.end());
        }
        check(fx, fx.call(which, q_lens, topk, idx, false), "s_q " + std::to_string(s_q));
    }
    std::vector<int> which;
    std::vector<int32_t> q_lens, idx;
    const int32_t counts[] = {1, 4, 1, 8, 1, 3};
    for (int i = 0; i <= last; ++i) {
        const sparse_test::Seq& s = fx.seqs()[static_cast<size_t>(i)];
        const int32_t n = static_cast<int32_t>(std::min<int64_t>(counts[i], s.length));
        which.push_back(i);
        q_lens.push_back(n);
        const std::vector<int32_t> l = fx.lists(s, n, topk, i == 3 ? 0 : -1);
        idx.insert(idx.end(), l.begin(), l.end());
    }
    check(fx, fx.call(which, q_lens, topk, idx, true), "ragged");
}

void cuda_ok(cudaError_t e, const char* what) {
    INFO(std::string(what) << ": " << std::string(cudaGetErrorString(e)));
    REQUIRE(e == cudaSuccess);
}

// Runs a Fixture's calls from a CUDA graph: q and the lists are copied to
// device buffers; the first call runs uncaptured (sizing the workspaces)
// and is then captured; every call replays the graph on the new contents,
// copies o and lse back for the Fixture's reference check, and must equal
// an uncaptured call on the same inputs bit for bit.
class GraphRunner {
public:
    GraphRunner() { cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
    ~GraphRunner() {
        if (exec_) cudaGraphExecDestroy(exec_);
        if (graph_) cudaGraphDestroy(graph_);
        for (void* p : {q_, o_, l_, i_})
            if (p) cudaFree(p);
        cudaStreamDestroy(stream_);
    }
    GraphRunner(const GraphRunner&) = delete;
    GraphRunner& operator=(const GraphRunner&) = delete;
    int replays = 0;

    gqla_status operator()(gqla_session* s, gqla_attention_args& args) {
        gqla_tensor q = *args.q, o = *args.o, l = *args.lse, idx = *args.indices;
        const size_t qb = elems(q) * 4, ob = elems(o) * 4, lb = elems(l) * 4, ib = elems(idx) * 4;
        if (!q_) {
            REQUIRE(gqla_session_set_stream(s, stream_) == GQLA_OK);
            cuda_ok(cudaMalloc(&q_, qb), "cudaMalloc");
            cuda_ok(cudaMalloc(&o_, ob), "cudaMalloc");
            cuda_ok(cudaMalloc(&l_, lb), "cudaMalloc");
            cuda_ok(cudaMalloc(&i_, ib), "cudaMalloc");
        }
        cuda_ok(cudaMemcpyAsync(q_, q.data, qb, cudaMemcpyHostToDevice, stream_), "copy q");
        cuda_ok(cudaMemcpyAsync(i_, idx.data, ib, cudaMemcpyHostToDevice, stream_), "copy indices");
        gqla_tensor dq = on_device(q, q_), dout = on_device(o, o_), dl = on_device(l, l_), di = on_device(idx, i_);
        gqla_attention_args d = args;
        d.q = &dq;
        d.o = &dout;
        d.lse = &dl;
        d.indices = &di;
        if (!exec_) {
            const gqla_status st = gqla_attention(s, &d);  // uncaptured first
            if (st != GQLA_OK) return st;
            cuda_ok(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
            const gqla_status cst = gqla_attention(s, &d);
            cuda_ok(cudaStreamEndCapture(stream_, &graph_), "cudaStreamEndCapture");
            if (cst != GQLA_OK) return cst;
            cuda_ok(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
        }
        cuda_ok(cudaGraphLaunch(exec_, stream_), "cudaGraphLaunch");
        ++replays;
        std::vector<float> o_replay(elems(o)), l_replay(elems(l));
        download(o_replay, l_replay);
        const gqla_status st = gqla_attention(s, &d);  // the same inputs, uncaptured
        if (st != GQLA_OK) return st;
        std::vector<float> o_direct(elems(o)), l_direct(elems(l));
        download(o_direct, l_direct);
        CHECK(std::memcmp(o_replay.data(), o_direct.data(), ob) == 0);
        CHECK(std::memcmp(l_replay.data(), l_direct.data(), lb) == 0);
        std::memcpy(o.data, o_replay.data(), ob);
        std::memcpy(l.data, l_replay.data(), lb);
        return GQLA_OK;
    }

private:
    static size_t elems(const gqla_tensor& t) {
        size_t n = 1;
        for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
        return n;
    }
    static gqla_tensor on_device(gqla_tensor t, void* p) {
        t.data = p;
        t.device = GQLA_DEVICE_CUDA;
        t.device_index = 0;
        return t;
    }
    void download(std::vector<float>& o, std::vector<float>& l) {
        cuda_ok(cudaMemcpyAsync(o.data(), o_, o.size() * 4, cudaMemcpyDeviceToHost, stream_), "copy o");
        cuda_ok(cudaMemcpyAsync(l.data(), l_, l.size() * 4, cudaMemcpyDeviceToHost, stream_), "copy lse");
        cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
    cudaStream_t stream_ = nullptr;
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    void *q_ = nullptr, *o_ = nullptr, *l_ = nullptr, *i_ = nullptr;
};

}  // namespace

TEST_CASE("cuda sparse: calls captured in a CUDA graph replay new lists and queries") {
    for (Form form : {Form::Absorb, Form::Gqa, Form::Transient}) {
        CAPTURE(sparse_test::form_label(form));
        Fixture fx(form == Form::Gqa ? llama_config(GQLA_DTYPE_BF16, 16) : latent_config(16, 2, GQLA_DTYPE_BF16), form);
        for (int64_t len : {int64_t(90), int64_t(1000), int64_t(17)}) fx.add(len);
        GraphRunner graph;
        fx.set_runner(std::ref(graph));
        const std::vector<int32_t> q_lens{1, 5, 2};
        const int32_t topk = 300;
        for (int round = 0; round < 3; ++round) {
            std::vector<int32_t> idx;
            for (size_t i = 0; i < q_lens.size(); ++i) {
                const std::vector<int32_t> l = fx.lists(fx.seqs()[i], q_lens[i], topk, round == 2 && i == 1 ? 3 : -1);
                idx.insert(idx.end(), l.begin(), l.end());
            }
            check(fx, fx.call({0, 1, 2}, q_lens, topk, idx, true), "replay " + std::to_string(round));
        }
        CHECK(graph.replays == 3);
        fx.set_runner(nullptr);
        REQUIRE(gqla_session_set_stream(fx.session(), nullptr) == GQLA_OK);
    }
}

TEST_CASE("cuda sparse: latent kernel shapes, 32-row (16 heads) and 64-row (64 heads) blocks") {
    for (int32_t heads : {16, 64})
        for (gqla_dtype cache : {GQLA_DTYPE_BF16, GQLA_DTYPE_F16}) {
            CAPTURE(heads);
            CAPTURE(abi::dtype_label(cache));
            Fixture fx(latent_config(heads, 1, cache), Form::Absorb);
            run_model_cases(fx, 1500);
        }
}

TEST_CASE("cuda sparse: GQLA GQA path over the kept expanded cache, 128 + 64 wide keys") {
    Fixture fx(latent_config(32, 8, GQLA_DTYPE_BF16), Form::GqlaGqaKept);
    run_model_cases(fx, 700);
}

TEST_CASE("cuda sparse: LLaMA-3-8B GQA heads, page sizes 16 and 64 (aligned) and 24 (unaligned)") {
    for (int32_t page : {16, 24, 64}) {
        CAPTURE(page);
        Fixture fx(llama_config(GQLA_DTYPE_BF16, page), Form::Gqa);
        run_model_cases(fx, 900);
    }
}

// The 8-bit narrow kernel gathering listed byte rows and their scales (and,
// run with GQLA_CUDA_NARROW_KERNEL=0, the per-warp kernel); checked against
// the reference on the dequantized rows (the bf16 bound).
TEST_CASE("cuda sparse: LLaMA-3-8B GQA heads over an fp8_e4m3 cache, page sizes 16, 24 and 64") {
    for (int32_t page : {16, 24, 64}) {
        CAPTURE(page);
        Fixture fx(llama_config(GQLA_DTYPE_FP8_E4M3, page), Form::Gqa);
        run_model_cases(fx, 900);
    }
}

// The latent kernel's 8-bit forms: listed latent rows gathered as bytes with
// their block scales and widened, in a 32-row block (16 heads), a 64-row one
// over half tiles (64 heads) and two of those (128); GQA_TRANSIENT
// up-projecting the listed rows widened to bf16. Against the reference on
// the dequantized rows.
TEST_CASE("cuda sparse: an fp8_e4m3 latent, 16, 64 and 128 heads (32- and 64-row blocks), and GQA_TRANSIENT") {
    for (int32_t heads : {16, 64, 128}) {
        CAPTURE(heads);
        Fixture fx(latent_config(heads, 1, GQLA_DTYPE_FP8_E4M3), Form::Absorb);
        run_model_cases(fx, 1500);
    }
    Fixture fx(latent_config(16, 2, GQLA_DTYPE_FP8_E4M3), Form::Transient);
    run_model_cases(fx, 700);
}

int main(int argc, char** argv) { return gpu_doctest_main(argc, argv, sparse_test::use_device); }

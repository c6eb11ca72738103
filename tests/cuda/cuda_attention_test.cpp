// SPDX-License-Identifier: Apache-2.0
// gqla_attention on a CUDA session through the public C ABI, with device
// tensors: ragged query counts (decoding sequences beside prefill chunks,
// chunks on page edges) against the float64 reference for GQA and for GQLA
// through each of its three forms, on f32 and bf16 caches; the transient
// form's workspace; the uniform call against gqla_decode; host tensors; and
// ragged calls captured in a CUDA graph (after one uncaptured call, which
// allocates the transient workspace) and replayed. One doctest case per
// family and cache dtype, the ragged family's per kind and page size too.
// Exit 77 when no GPU is usable. A run draws one random seed, which every
// case starts from; GQLA_TEST_SEED=<n> replays the inputs of a run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "tests/reference/reference.hpp"
#include "gqla/gqla.h"
#include "tests/cuda/cuda_suite_main.hpp"
#include "tests/cuda/gpu_test_support.hpp"
#include "tests/test_seed.hpp"

namespace {

using gqla::test::check_error;
using gqla::test::randn;
using gqla::test::tolerance;

// The run's seed; the engine is reset to it before every case
// (cuda_suite_main.hpp).
uint64_t seed = 0;
std::mt19937_64 rng;
void reseed_rng() { rng.seed(seed); }

// path_taken is preset to AUTO, which gqla_attention never reports.
const gqla_path kUnwritten = GQLA_PATH_AUTO;

// A C ABI call returned GQLA_OK (else the case stops, showing `what` and the
// library's message).
void require(gqla_status st, const char* what) {
    const std::string detail =
        st == GQLA_OK ? std::string() : std::string(gqla_status_string(st)) + " (" + gqla_last_error_message() + ")";
    INFO(std::string(what) << ": " << detail);
    REQUIRE(st == GQLA_OK);
}

void cuda_check(cudaError_t e, const char* what) {
    INFO(std::string(what) << ": " << std::string(cudaGetErrorString(e)));
    REQUIRE(e == cudaSuccess);
}

std::string form_name(gqla_path p) {  // std::string: doctest prints a const char* as an address
    switch (p) {
        case GQLA_PATH_AUTO:
            return "auto";
        case GQLA_PATH_GQA:
            return "gqa";
        case GQLA_PATH_ABSORB:
            return "absorb";
        case GQLA_PATH_GQA_TRANSIENT:
            return "gqa_transient";
    }
    return "?";
}

// ||lse - ref|| / ||max(1, |ref|)|| (docs/numerics.md); +inf on a NaN or inf.
double lse_error(const float* lse, const double* ref, size_t n) {
    double diff = 0, floor = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(lse[i])) return INFINITY;
        const double s = std::max(1.0, std::abs(ref[i]));
        diff += (lse[i] - ref[i]) * (lse[i] - ref[i]);
        floor += s * s;
    }
    return n ? std::sqrt(diff / floor) : 0.0;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> bd(b.begin(), b.end());
    return gqla::ref::rel_l2(a.data(), bd.data(), bd.size());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A CUDA session (f32 io) plus a host mirror of its cache as stored.
struct Session {
    gqla_config cfg{};
    gqla_session* s = nullptr;
    bool gqla = false;
    int H = 0, G = 0, dq = 0, dv = 0;
    int64_t a_cols = 0, b_cols = 0;
    std::map<int32_t, std::vector<double>> w;                             // per layer
    std::map<std::pair<gqla_seq_id, int32_t>, std::vector<double>> a, b;  // per (sequence, layer), as stored

    Session(gqla_kind kind, gqla_dtype cache, int32_t page_size, gqla_path path, int32_t layers = 1) {
        gqla_config_default(&cfg, kind);
        gqla = kind == GQLA_KIND_GQLA;
        cfg.num_heads = H = 6;
        cfg.num_kv_heads = G = 2;
        if (gqla) {
            cfg.latent_dim = 384;
            cfg.nope_dim = 96;
            cfg.rope_dim = 32;
            cfg.value_dim = 80;
        } else {
            cfg.head_dim = 72;
            cfg.value_dim = 40;
        }
        cfg.num_layers = layers;
        cfg.cache_dtype = cache;
        cfg.io_dtype = GQLA_DTYPE_F32;
        cfg.page_size = page_size;
        cfg.max_tokens = 1 << 14;
        cfg.max_sequences = 32;
        cfg.max_batch = 8;
        cfg.max_q_len = 128;
        cfg.device = GQLA_DEVICE_CUDA;
        cfg.path = path;
        require(gqla_session_create(&cfg, &s), "gqla_session_create");
        dq = gqla ? cfg.nope_dim + cfg.rope_dim : cfg.head_dim;
        dv = cfg.value_dim;
        a_cols = gqla ? cfg.latent_dim : int64_t(G) * cfg.head_dim;
        b_cols = gqla ? cfg.rope_dim : int64_t(G) * cfg.value_dim;
        if (gqla)
            for (int32_t l = 0; l < layers; ++l) set_weights(l);
    }

    // Fresh random W_UKV of a layer (stddev 1/sqrt(r): scores of order one).
    void set_weights(int32_t layer) {
        const int64_t rows = int64_t(G) * (cfg.nope_dim + cfg.value_dim);
        std::vector<float> wf = randn(rng, size_t(rows * cfg.latent_dim), 1.f / std::sqrt(float(cfg.latent_dim)));
        gqla_tensor t;
        const int64_t shape[2] = {rows, cfg.latent_dim};
        gqla_tensor_init(&t, wf.data(), GQLA_DTYPE_F32, 2, shape);
        require(gqla_set_weights(s, layer, &t), "gqla_set_weights");
        w[layer].assign(wf.begin(), wf.end());
    }
    ~Session() { gqla_session_destroy(s); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    double as_stored(float x) const {
        unsigned char cell[4];
        gqla::store_from_f32(cell, cfg.cache_dtype, 0, x);
        return gqla::load_as_f32(cell, cfg.cache_dtype, 0);
    }

    // A sequence of length L, appended in two parts so rows cross pages mid-call.
    gqla_seq_id add(int64_t L) {
        gqla_seq_id id = -1;
        require(gqla_sequence_add(s, &id), "gqla_sequence_add");
        const int64_t first = L / 3;
        for (int64_t n : {first, L - first}) append(id, 0, n);
        return id;
    }

    // n random rows appended to one layer of a sequence, mirrored as stored.
    void append(gqla_seq_id id, int32_t layer, int64_t n) {
        if (n == 0) return;
        std::vector<float> av = randn(rng, size_t(n * a_cols)), bv = randn(rng, size_t(n * b_cols));
        gqla_tensor ta, tb;
        const int64_t as[3] = {n, gqla ? cfg.latent_dim : G, gqla ? 0 : cfg.head_dim};
        const int64_t bs[3] = {n, gqla ? cfg.rope_dim : G, gqla ? 0 : cfg.value_dim};
        gqla_tensor_init(&ta, av.data(), GQLA_DTYPE_F32, gqla ? 2 : 3, as);
        gqla_tensor_init(&tb, bv.data(), GQLA_DTYPE_F32, gqla ? 2 : 3, bs);
        require(gqla_append(s, layer, id, &ta, &tb), "gqla_append");
        for (float x : av) a[{id, layer}].push_back(as_stored(x));
        for (float x : bv) b[{id, layer}].push_back(as_stored(x));
    }

    void reference(gqla_seq_id id, int s_q, const float* q, double* o, double* lse, int32_t layer = 0) const {
        const std::vector<double>& A = a.at({id, layer});
        const std::vector<double>& Bv = b.at({id, layer});
        const int64_t L = int64_t(A.size()) / a_cols;
        std::vector<double> qd(q, q + size_t(s_q) * H * dq);
        if (gqla)
            gqla::ref::gqla_decode(H, G, cfg.latent_dim, cfg.nope_dim, cfg.rope_dim, dv, L, s_q,
                                   1.0 / std::sqrt(double(dq)), qd.data(), w.at(layer).data(), A.data(), Bv.data(), o,
                                   lse);
        else
            gqla::ref::gqa_decode(H, G, cfg.head_dim, dv, L, s_q, 1.0 / std::sqrt(double(dq)), qd.data(), A.data(),
                                  Bv.data(), o, lse);
    }

    gqla_stats stats() const {
        gqla_stats st;
        std::memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        require(gqla_session_stats(s, &st), "gqla_session_stats");
        return st;
    }
};

// q [N, H, dq], o [N, H, dv], lse [N, H] (f32) in GPU memory, viewed packed
// (ragged) or as [B, s_q, ...] (uniform).
struct DeviceRows {
    int64_t N, H, dq, dv;
    float *q = nullptr, *o = nullptr, *lse = nullptr;
    DeviceRows(int64_t N_, int64_t H_, int64_t dq_, int64_t dv_) : N(N_), H(H_), dq(dq_), dv(dv_) {
        cuda_check(cudaMalloc(&q, size_t(N * H * dq) * 4), "cudaMalloc q");
        cuda_check(cudaMalloc(&o, size_t(N * H * dv) * 4), "cudaMalloc o");
        cuda_check(cudaMalloc(&lse, size_t(N * H) * 4), "cudaMalloc lse");
    }
    ~DeviceRows() {
        cudaFree(q);
        cudaFree(o);
        cudaFree(lse);
    }
    DeviceRows(const DeviceRows&) = delete;
    DeviceRows& operator=(const DeviceRows&) = delete;
    static gqla_tensor device_tensor(float* p, std::vector<int64_t> shape) {
        gqla_tensor t;
        gqla_tensor_init(&t, p, GQLA_DTYPE_F32, int32_t(shape.size()), shape.data());
        t.device = GQLA_DEVICE_CUDA;
        t.device_index = 0;
        return t;
    }
    // B == 0: ragged views; else uniform [B, N / B, ...].
    gqla_tensor tq(int64_t B = 0) const {
        return B ? device_tensor(q, {B, N / B, H, dq}) : device_tensor(q, {N, H, dq});
    }
    gqla_tensor to(int64_t B = 0) const {
        return B ? device_tensor(o, {B, N / B, H, dv}) : device_tensor(o, {N, H, dv});
    }
    gqla_tensor tl(int64_t B = 0) const { return B ? device_tensor(lse, {B, N / B, H}) : device_tensor(lse, {N, H}); }
    void upload(const std::vector<float>& hq, cudaStream_t st) {
        cuda_check(cudaMemcpyAsync(q, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice, st), "upload q");
        cuda_check(cudaMemsetAsync(o, 0xff, size_t(N * H * dv) * 4, st), "poison o");  // NaN
        cuda_check(cudaMemsetAsync(lse, 0xff, size_t(N * H) * 4, st), "poison lse");
    }
    void download(std::vector<float>& ho, std::vector<float>& hl, cudaStream_t st) const {
        ho.resize(size_t(N * H * dv));
        hl.resize(size_t(N * H));
        cuda_check(cudaMemcpyAsync(ho.data(), o, ho.size() * 4, cudaMemcpyDeviceToHost, st), "download o");
        cuda_check(cudaMemcpyAsync(hl.data(), lse, hl.size() * 4, cudaMemcpyDeviceToHost, st), "download lse");
        cuda_check(cudaStreamSynchronize(st), "synchronize");
    }
};

struct Output {
    gqla_path taken = kUnwritten;
    std::vector<float> o, lse;
};

int64_t total_of(const std::vector<int32_t>& q_lens) {
    int64_t n = 0;
    for (int32_t x : q_lens) n += x;
    return n;
}

gqla_attention_args make_args(const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens, gqla_path path,
                              const gqla_tensor* q, gqla_tensor* o, gqla_tensor* l, gqla_path* taken,
                              int32_t layer = 0) {
    gqla_attention_args args;
    require(gqla_attention_args_default(&args), "gqla_attention_args_default");
    args.layer = layer;
    args.batch = int32_t(seqs.size());
    args.seqs = seqs.data();
    args.q_lens = q_lens.empty() ? nullptr : q_lens.data();
    args.q = q;
    args.o = o;
    args.lse = l;
    args.path = path;
    args.path_taken = taken;
    return args;
}

// One ragged call with device tensors on the session's stream (`st`).
Output attend_device(Session& S, const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens,
                     gqla_path path, const std::vector<float>& q, cudaStream_t st = nullptr, int32_t layer = 0) {
    const int64_t N = total_of(q_lens);
    DeviceRows d(N, S.H, S.dq, S.dv);
    d.upload(q, st);
    gqla_tensor tq = d.tq(), to = d.to(), tl = d.tl();
    Output out;
    gqla_attention_args args = make_args(seqs, q_lens, path, &tq, &to, &tl, &out.taken, layer);
    require(gqla_attention(S.s, &args), "gqla_attention (device tensors)");
    d.download(out.o, out.lse, st);
    return out;
}

// Worst per-sequence errors of a ragged output against the reference.
void check_rows(const Session& S, const std::vector<gqla_seq_id>& seqs, const std::vector<int32_t>& q_lens,
                const std::vector<float>& q, const Output& out, const std::string& name, int32_t layer = 0) {
    double o_err = 0, l_err = 0;
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
        const int32_t n = q_lens[i];
        std::vector<double> ro(size_t(n) * S.H * S.dv), rl(size_t(n) * S.H);
        S.reference(seqs[i], n, q.data() + row * S.H * S.dq, ro.data(), rl.data(), layer);
        o_err = std::max(o_err, gqla::ref::rel_l2(out.o.data() + row * S.H * S.dv, ro.data(), ro.size()));
        l_err = std::max(l_err, lse_error(out.lse.data() + row * S.H, rl.data(), rl.size()));
        row += n;
    }
    const double tol = tolerance(S.cfg.cache_dtype);
    check_error(name + " o", o_err, tol);
    check_error(name + " lse", l_err, tol);
}

// ------------------------------------------------------------------ cases

// Per page size P: a mix of decoding sequences and whole prompts (q_lens
// {1, 7, 1, 65}), and chunks that start and end on page edges. GQA kind
// through AUTO; GQLA through absorb, the transient form (session on absorb:
// no expanded cache appears, the transient workspace is reported), and the
// kept expanded cache after select_path(GQA). f32: the forms agree within 1e-5.
void test_ragged(gqla_kind kind, gqla_dtype cache, int32_t P) {
    const bool gqla = kind == GQLA_KIND_GQLA;
    Session S(kind, cache, P, gqla ? GQLA_PATH_ABSORB : GQLA_PATH_AUTO);
    std::vector<gqla_seq_id> mix, edges;
    for (int64_t L : {5 * P + 2, 2 * P + 7, 1, 65}) mix.push_back(S.add(L));
    for (int64_t L : {2 * P, 3 * P + 1, P, 4 * P - 1}) edges.push_back(S.add(L));
    const std::vector<int32_t> mix_lens{1, 7, 1, 65};
    const std::vector<gqla_seq_id> edge_seqs{edges[2], edges[0], edges[3], edges[1]};
    const std::vector<int32_t> edge_lens{P, P, 2 * P - 1, P + 1};
    const std::vector<float> q_mix = randn(rng, size_t(total_of(mix_lens)) * S.H * S.dq);
    const std::vector<float> q_edges = randn(rng, size_t(total_of(edge_lens)) * S.H * S.dq);
    char base[96];
    std::snprintf(base, sizeof base, "ragged %s %s P=%d", gqla ? "gqla" : "gqa", gqla::dtype_name(cache), P);

    struct Form {
        gqla_path ask, expect, select;
    };
    std::vector<Form> forms;
    if (gqla)
        forms = {{GQLA_PATH_ABSORB, GQLA_PATH_ABSORB, GQLA_PATH_ABSORB},
                 {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_ABSORB},
                 {GQLA_PATH_GQA, GQLA_PATH_GQA, GQLA_PATH_GQA}};
    else
        forms = {{GQLA_PATH_AUTO, GQLA_PATH_GQA, GQLA_PATH_AUTO}};
    std::vector<Output> mix_outputs;
    for (const Form& f : forms) {
        if (gqla) require(gqla_select_path(S.s, f.select), "gqla_select_path");
        const gqla_stats before = S.stats();
        const std::string name = std::string(base) + " " + form_name(f.ask);
        const Output m = attend_device(S, mix, mix_lens, f.ask, q_mix);
        check_rows(S, mix, mix_lens, q_mix, m, name + " {1,7,1,65}");
        CHECK_MESSAGE(m.taken == f.expect, name << ": path_taken " << form_name(m.taken));
        const Output e = attend_device(S, edge_seqs, edge_lens, f.ask, q_edges);
        check_rows(S, edge_seqs, edge_lens, q_edges, e, name + " page edges");
        CHECK_MESSAGE(e.taken == f.expect, name << " page edges: path_taken " << form_name(e.taken));
        mix_outputs.push_back(m);
        const gqla_stats after = S.stats();
        if (f.ask == GQLA_PATH_GQA_TRANSIENT) {
            CHECK_MESSAGE(after.expanded_bytes == 0, name << ": no expanded cache kept");
            // One layer of expanded pages in the cache dtype (gqla.h), allocated on first use.
            const int64_t transient = after.pages_total * S.cfg.page_size * S.G * (S.cfg.nope_dim + S.cfg.value_dim) *
                                      int64_t(gqla::dtype_size(cache));
            CHECK_MESSAGE(after.workspace_bytes >= before.workspace_bytes + transient,
                          name << ": workspace_bytes " << before.workspace_bytes << " -> " << after.workspace_bytes
                               << " holds the transient pages (" << transient << " bytes)");
        }
        if (gqla) {
            gqla_path active = GQLA_PATH_AUTO;
            require(gqla_get_path(S.s, &active, nullptr), "gqla_get_path");
            CHECK_MESSAGE(active == f.select, name << ": session path unchanged");
        }
    }
    if (gqla && cache == GQLA_DTYPE_F32)
        for (size_t i = 0; i + 1 < mix_outputs.size(); ++i)
            check_error(std::string(base) + " " + form_name(forms[i].ask) + " vs gqa",
                        rel_l2(mix_outputs[i].o, mix_outputs.back().o), 1e-5);
}

// gqla_decode is gqla_attention with uniform queries on the session's path:
// on identical device inputs the outputs are identical.
void test_uniform_equals_decode(gqla_kind kind, gqla_path session_path, gqla_dtype cache) {
    Session S(kind, cache, 16, session_path);
    std::vector<gqla_seq_id> seqs;
    for (int64_t L : {3, 17, 600, 40}) seqs.push_back(S.add(L));
    const int64_t B = 4, s_q = 3;
    const std::vector<float> q = randn(rng, size_t(B * s_q) * S.H * S.dq);
    DeviceRows d(B * s_q, S.H, S.dq, S.dv);
    gqla_tensor tq = d.tq(B), to = d.to(B), tl = d.tl(B);
    Output dec, att;
    d.upload(q, nullptr);
    require(gqla_decode(S.s, 0, int32_t(B), seqs.data(), &tq, &to, &tl), "gqla_decode");
    d.download(dec.o, dec.lse, nullptr);
    const gqla_path ask = S.gqla ? session_path : GQLA_PATH_AUTO;
    d.upload(q, nullptr);
    gqla_attention_args args = make_args(seqs, {}, ask, &tq, &to, &tl, &att.taken);
    require(gqla_attention(S.s, &args), "gqla_attention (uniform)");
    d.download(att.o, att.lse, nullptr);
    const std::string name =
        std::string("uniform ") + (S.gqla ? "gqla " : "gqa ") + form_name(ask) + " " + gqla::dtype_name(cache);
    CHECK_MESSAGE((same_bits(att.o, dec.o) && same_bits(att.lse, dec.lse)),
                  name << ": o and lse equal gqla_decode's bit for bit");
    CHECK_MESSAGE(att.taken == (S.gqla ? session_path : GQLA_PATH_GQA),
                  name << ": path_taken " << form_name(att.taken));
    const std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(s_q));
    check_rows(S, seqs, lens, q, att, name);
}

// Host q/o/lse on a CUDA session: staged by the backend, same results.
void test_host_tensors(gqla_dtype cache) {
    Session S(GQLA_KIND_GQLA, cache, 16, GQLA_PATH_ABSORB);
    std::vector<gqla_seq_id> seqs;
    for (int64_t L : {70, 5, 33}) seqs.push_back(S.add(L));
    const std::vector<int32_t> lens{2, 5, 33};
    const int64_t N = total_of(lens);
    std::vector<float> q = randn(rng, size_t(N) * S.H * S.dq);
    for (gqla_path p : {GQLA_PATH_ABSORB, GQLA_PATH_GQA_TRANSIENT}) {
        Output out;
        out.o.assign(size_t(N) * S.H * S.dv, NAN);
        out.lse.assign(size_t(N) * S.H, NAN);
        gqla_tensor tq, to, tl;
        const int64_t qs[3] = {N, S.H, S.dq}, os[3] = {N, S.H, S.dv}, ls[2] = {N, S.H};
        gqla_tensor_init(&tq, q.data(), GQLA_DTYPE_F32, 3, qs);
        gqla_tensor_init(&to, out.o.data(), GQLA_DTYPE_F32, 3, os);
        gqla_tensor_init(&tl, out.lse.data(), GQLA_DTYPE_F32, 2, ls);
        gqla_attention_args args = make_args(seqs, lens, p, &tq, &to, &tl, &out.taken);
        require(gqla_attention(S.s, &args), "gqla_attention (host tensors)");
        const std::string name = std::string("host tensors gqla ") + form_name(p) + " " + gqla::dtype_name(cache);
        check_rows(S, seqs, lens, q, out, name);
        CHECK_MESSAGE(out.taken == p, name << ": path_taken " << form_name(out.taken));
    }
}

// Nothing of an earlier call may be reused stale (the transient form keeps
// its expanded pages between calls): calls between appends (into a partly
// filled page and onto new pages), new weights of the layer, and calls on
// another layer, on each GQLA form.
void test_between_calls(gqla_dtype cache) {
    for (gqla_path form : {GQLA_PATH_GQA_TRANSIENT, GQLA_PATH_ABSORB, GQLA_PATH_GQA}) {
        Session S(GQLA_KIND_GQLA, cache, 16, form == GQLA_PATH_GQA ? GQLA_PATH_GQA : GQLA_PATH_ABSORB, 2);
        std::vector<gqla_seq_id> seqs{S.add(37), S.add(10)};
        for (gqla_seq_id id : seqs) S.append(id, 1, 21);
        const std::string name = std::string("between calls gqla ") + form_name(form) + " " + gqla::dtype_name(cache);
        auto call = [&](const std::vector<int32_t>& lens, int32_t layer, const std::string& what) {
            const std::vector<float> q = randn(rng, size_t(total_of(lens)) * S.H * S.dq);
            const Output out = attend_device(S, seqs, lens, form, q, nullptr, layer);
            check_rows(S, seqs, lens, q, out, name + " " + what, layer);
        };
        call({5, 10}, 0, "first");
        S.append(seqs[0], 0, 3);   // into the partly filled third page
        S.append(seqs[1], 0, 20);  // onto new pages
        call({5, 10}, 0, "after appends");
        S.set_weights(0);
        call({5, 10}, 0, "after new weights");
        call({20, 1}, 1, "layer 1");
        call({5, 10}, 0, "layer 0 again");
    }
}

// A ragged call captured in a CUDA graph on the session's own stream, after
// one uncaptured call of the same form (which allocates the transient
// workspace), replayed twice with new queries: each replay matches the
// reference and equals an uncaptured call on the same queries bit for bit.
void test_graph(gqla_kind kind, gqla_path form, gqla_dtype cache) {
    const bool gqla = kind == GQLA_KIND_GQLA;
    Session S(kind, cache, 16, gqla ? GQLA_PATH_ABSORB : GQLA_PATH_AUTO);
    std::vector<gqla_seq_id> seqs;
    for (int64_t L : {40, 300, 7, 129}) seqs.push_back(S.add(L));
    const std::vector<int32_t> lens{1, 65, 7, 16};
    const int64_t N = total_of(lens);
    const std::string name =
        std::string("graph ") + (gqla ? "gqla " : "gqa ") + form_name(form) + " " + gqla::dtype_name(cache);

    cudaStream_t stream = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    try {
        require(gqla_session_set_stream(S.s, stream), "gqla_session_set_stream");
        // Uncaptured first: allocates what the form needs.
        const std::vector<float> q0 = randn(rng, size_t(N) * S.H * S.dq);
        const Output first = attend_device(S, seqs, lens, form, q0, stream);
        check_rows(S, seqs, lens, q0, first, name + " uncaptured");

        DeviceRows d(N, S.H, S.dq, S.dv);
        gqla_tensor tq = d.tq(), to = d.to(), tl = d.tl();
        gqla_path taken = kUnwritten;
        gqla_attention_args args = make_args(seqs, lens, form, &tq, &to, &tl, &taken);
        cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
        const gqla_status st = gqla_attention(S.s, &args);
        const cudaError_t end = cudaStreamEndCapture(stream, &graph);
        require(st, "gqla_attention (captured)");
        cuda_check(end, "cudaStreamEndCapture");
        cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        CHECK_MESSAGE(taken == (gqla ? form : GQLA_PATH_GQA),
                      name << ": captured call's path_taken " << form_name(taken));

        for (int round = 0; round < 2; ++round) {
            const std::vector<float> q = randn(rng, size_t(N) * S.H * S.dq);
            Output replay;
            d.upload(q, stream);
            cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
            d.download(replay.o, replay.lse, stream);
            const std::string r = name + " replay " + std::to_string(round + 1);
            check_rows(S, seqs, lens, q, replay, r);
            const Output direct = attend_device(S, seqs, lens, form, q, stream);
            CHECK_MESSAGE((same_bits(replay.o, direct.o) && same_bits(replay.lse, direct.lse)),
                          r << ": equals the uncaptured call bit for bit");
        }
        require(gqla_session_set_stream(S.s, nullptr), "gqla_session_set_stream(NULL)");
    } catch (...) {
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        gqla_session_set_stream(S.s, nullptr);
        cudaStreamDestroy(stream);
        throw;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
}

void uniform(gqla_dtype t) {
    test_uniform_equals_decode(GQLA_KIND_GQA, GQLA_PATH_AUTO, t);
    test_uniform_equals_decode(GQLA_KIND_GQLA, GQLA_PATH_ABSORB, t);
    test_uniform_equals_decode(GQLA_KIND_GQLA, GQLA_PATH_GQA, t);
}

void graph(gqla_dtype t) {
    test_graph(GQLA_KIND_GQA, GQLA_PATH_GQA, t);
    test_graph(GQLA_KIND_GQLA, GQLA_PATH_ABSORB, t);
    test_graph(GQLA_KIND_GQLA, GQLA_PATH_GQA_TRANSIENT, t);
}

}  // namespace

TEST_CASE("ragged gqa f32 P=1") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_F32, 1); }
TEST_CASE("ragged gqla f32 P=1") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_F32, 1); }
TEST_CASE("ragged gqa f32 P=5") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_F32, 5); }
TEST_CASE("ragged gqla f32 P=5") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_F32, 5); }
TEST_CASE("ragged gqa f32 P=16") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_F32, 16); }
TEST_CASE("ragged gqla f32 P=16") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_F32, 16); }
TEST_CASE("ragged gqa f32 P=64") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_F32, 64); }
TEST_CASE("ragged gqla f32 P=64") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_F32, 64); }
TEST_CASE("uniform f32") { uniform(GQLA_DTYPE_F32); }
TEST_CASE("host tensors f32") { test_host_tensors(GQLA_DTYPE_F32); }
TEST_CASE("between calls f32") { test_between_calls(GQLA_DTYPE_F32); }
TEST_CASE("graph f32") { graph(GQLA_DTYPE_F32); }

TEST_CASE("ragged gqa bf16 P=1") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_BF16, 1); }
TEST_CASE("ragged gqla bf16 P=1") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_BF16, 1); }
TEST_CASE("ragged gqa bf16 P=5") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_BF16, 5); }
TEST_CASE("ragged gqla bf16 P=5") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_BF16, 5); }
TEST_CASE("ragged gqa bf16 P=16") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_BF16, 16); }
TEST_CASE("ragged gqla bf16 P=16") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_BF16, 16); }
TEST_CASE("ragged gqa bf16 P=64") { test_ragged(GQLA_KIND_GQA, GQLA_DTYPE_BF16, 64); }
TEST_CASE("ragged gqla bf16 P=64") { test_ragged(GQLA_KIND_GQLA, GQLA_DTYPE_BF16, 64); }
TEST_CASE("uniform bf16") { uniform(GQLA_DTYPE_BF16); }
TEST_CASE("host tensors bf16") { test_host_tensors(GQLA_DTYPE_BF16); }
TEST_CASE("between calls bf16") { test_between_calls(GQLA_DTYPE_BF16); }
TEST_CASE("graph bf16") { graph(GQLA_DTYPE_BF16); }

int main(int argc, char** argv) {
    int32_t n = 0;
    const bool gpu = gqla_device_count(GQLA_DEVICE_CUDA, &n) == GQLA_OK && n > 0;
    seed = gqla::test::test_seed();
    if (gpu && !gqla::test::doctest_query_only(argc, argv)) std::printf("%s\n", gqla::test::replay_hint(seed).c_str());
    return gqla::test::cuda_suite_main(argc, argv, gpu, "no CUDA device (or CUDA module) visible: skipping",
                                       reseed_rng);
}
